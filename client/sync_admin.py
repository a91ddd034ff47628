"""`SyncAdmin`: a blocking wrapper around `Admin` for scripts and notebooks.

The admin client runs on a private event loop in a daemon thread (client/sync.py's, torn down the same way);
each method submits the `Admin` coroutine of the same name to that loop and waits for it. Arguments, results and
errors are `Admin`'s (client/errors.py: `BootstrapUnreachable` for a wrong address, ...).

    with SyncAdmin(["127.0.0.1:9000"]) as admin:
        for group in admin.list_groups():
            print(group.group_id, admin.list_offsets(group.group_id))

The loop thread starts in the constructor (as `Admin`'s channels open lazily, there is no `start`); an admin never
closed is closed at interpreter exit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType

from groupcoord.client.admin import (
    Admin,
    ClusterDescription,
    CreatedTopic,
    GroupDescription,
    ListedGroup,
    NodeSetting,
    TopicInfo,
    TopicPartition,
)
from groupcoord.client.security import PLAINTEXT, ClientSecurity
from groupcoord.client.sync import EXIT_TIMEOUT_S, _LoopThread
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


class SyncAdmin:
    """Same arguments as `Admin`; use it as a context manager, or call `close()`."""

    def __init__(
        self,
        bootstrap: list[str],
        deadline_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        security: ClientSecurity = PLAINTEXT,
        fail_fast_refused: bool = False,
    ) -> None:
        # Made before the thread starts, so that a bad argument (no bootstrap, an unreadable certificate) leaves
        # nothing to tear down. Its channels open lazily, on the loop that runs their calls.
        self._admin = Admin(
            bootstrap,
            deadline_s=deadline_s,
            connect_timeout_s=connect_timeout_s,
            security=security,
            fail_fast_refused=fail_fast_refused,
        )
        self._runner = _LoopThread("groupcoord-admin")
        self._runner.on_close = self._admin.close

    def close(self) -> None:
        """Closes the channels and tears down the loop thread; idempotent."""
        self._runner.close(EXIT_TIMEOUT_S)

    def __enter__(self) -> SyncAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the cluster ----------------------------------------------------------------------------------

    def describe_cluster(self) -> ClusterDescription:
        """Blocking `Admin.describe_cluster`."""
        return self._runner.run(lambda: self._admin.describe_cluster())

    def describe_settings(self) -> tuple[int, list[NodeSetting]]:
        """Blocking `Admin.describe_settings`."""
        return self._runner.run(lambda: self._admin.describe_settings())

    def add_voter(self, node: str) -> list[int]:
        """Blocking `Admin.add_voter`."""
        return self._runner.run(lambda: self._admin.add_voter(node))

    def remove_voter(self, node_id: int) -> list[int]:
        """Blocking `Admin.remove_voter`."""
        return self._runner.run(lambda: self._admin.remove_voter(node_id))

    def replace_voter(self, node: str) -> list[int]:
        """Blocking `Admin.replace_voter`."""
        return self._runner.run(lambda: self._admin.replace_voter(node))

    def read_events(self, address: str) -> list[pb.ReadEventsResponse]:
        """`Admin.read_events` read to its end, as a list: the stream is bounded by `deadline_s` anyway, and no
        half-read stream is left on the loop for a caller that stops iterating."""
        return self._runner.run(lambda: self._read_events(address))

    async def _read_events(self, address: str) -> list[pb.ReadEventsResponse]:
        return [reply async for reply in self._admin.read_events(address)]

    # -- groups ---------------------------------------------------------------------------------------

    def list_groups(self, states: tuple[str, ...] | list[str] = ()) -> list[ListedGroup]:
        """Blocking `Admin.list_groups`."""
        return self._runner.run(lambda: self._admin.list_groups(states))

    def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        """Blocking `Admin.describe_groups`."""
        return self._runner.run(lambda: self._admin.describe_groups(group_ids))

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Blocking `Admin.delete_groups`."""
        return self._runner.run(lambda: self._admin.delete_groups(group_ids))

    def add_members(self, group_id: str, instance_ids: list[str]) -> dict[str, int]:
        """Blocking `Admin.add_members`."""
        return self._runner.run(lambda: self._admin.add_members(group_id, instance_ids))

    def remove_members(self, group_id: str, instance_ids: list[str], reason: str = "") -> dict[str, int]:
        """Blocking `Admin.remove_members`."""
        return self._runner.run(lambda: self._admin.remove_members(group_id, instance_ids, reason))

    # -- offsets --------------------------------------------------------------------------------------

    def list_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, str]]:
        """Blocking `Admin.list_offsets`."""
        return self._runner.run(lambda: self._admin.list_offsets(group_id))

    def alter_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Blocking `Admin.alter_offsets`."""
        return self._runner.run(lambda: self._admin.alter_offsets(group_id, offsets))

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Blocking `Admin.delete_offsets`."""
        return self._runner.run(lambda: self._admin.delete_offsets(group_id, partitions))

    # -- topics ---------------------------------------------------------------------------------------

    def create_topics(self, topics: Sequence[tuple[str, int]], validate_only: bool = False) -> list[CreatedTopic]:
        """Blocking `Admin.create_topics`."""
        return self._runner.run(lambda: self._admin.create_topics(topics, validate_only))

    def delete_topics(self, names: Sequence[str]) -> dict[str, int]:
        """Blocking `Admin.delete_topics`."""
        return self._runner.run(lambda: self._admin.delete_topics(names))

    def list_topics(self, names: Sequence[str] = ()) -> list[TopicInfo]:
        """Blocking `Admin.list_topics`."""
        return self._runner.run(lambda: self._admin.list_topics(names))
