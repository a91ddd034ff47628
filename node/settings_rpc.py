"""DescribeSettings: the settings a node runs with and where each came from, as `node/config.py` loaded them, so
an operator can read back what a flag, the environment or a config file actually set (`groupcoord settings`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message

from groupcoord.node.config_types import SettingOrigin
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


class NodeSettingsView:
    def __init__(self, node_id: int, origins: Sequence[SettingOrigin]) -> None:
        # Built once: the settings do not change while the node runs.
        self._response = pb.DescribeSettingsResponse(error_code=Errors.NONE, node_id=node_id)
        for o in origins:
            self._response.settings.add(
                name=o.name, value=o.value, source=o.source, default_value=o.default, sensitive=o.sensitive
            )

    async def describe_settings(self, request: pb.DescribeSettingsRequest, context: Any) -> Message:
        response = pb.DescribeSettingsResponse()
        response.CopyFrom(self._response)
        return response
