"""What the Kafka listener adds to the node's metrics. The request layer already counts every call it serves, from
either listener, in `groupcoord_requests`; these say what came over the Kafka protocol: which API at which version
with which outcome, how many connections are open, and which client software holds them (ApiVersions v3+)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from groupcoord.node.metrics import NAMESPACE, error_label
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import APIS

# Client software names and versions are the clients' own strings: past this many distinct pairs, further ones
# are counted under "other", so that no client can grow the exposition without bound.
MAX_CLIENT_SOFTWARE = 64
OTHER = ("other", "other")


class KafkaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "kafka_requests",
            "Kafka requests answered, by API, version and outcome (the first error code of the response: top-level, "
            "else the first per-item one; NONE when every item succeeded)",
            ("api", "version", "error_code"),
            namespace=NAMESPACE,
            registry=registry,
        )
        self.connections = Gauge("kafka_connections", "Open Kafka connections", namespace=NAMESPACE, registry=registry)
        self.client_connections = Gauge(
            "kafka_client_connections",
            "Open Kafka connections by the client software they named in ApiVersions (v3+)",
            ("software_name", "software_version"),
            namespace=NAMESPACE,
            registry=registry,
        )
        self._software: set[tuple[str, str]] = set()

    def on_response(self, api_key: int, version: int, values: dict[str, Any] | None) -> None:
        code = Errors.NONE if values is None else first_error(values)
        self.requests.labels(APIS[api_key][0], str(version), error_label(code)).inc()

    def on_connection(self, delta: int) -> None:
        self.connections.inc(delta)

    def on_client_software(self, software: tuple[str, str], delta: int) -> tuple[str, str]:
        """Counts a connection in (delta 1) or out (-1) under its software; returns the labels used, which the
        caller passes back when the connection closes."""
        if software not in self._software:
            if len(self._software) >= MAX_CLIENT_SOFTWARE:
                software = OTHER
            self._software.add(software)
        self.client_connections.labels(*software).inc(delta)
        return software


def first_error(values: Any) -> int:
    """The top-level error code of a response's values, else the first non-zero one of its items, else NONE."""
    if isinstance(values, dict):
        code = int(values.get("error_code", Errors.NONE))
        if code != Errors.NONE:
            return code
        items = [v for v in values.values() if isinstance(v, list | tuple)]
    elif isinstance(values, list | tuple):
        items = [values]
    else:
        return Errors.NONE
    for item in items:
        for entry in item:
            code = first_error(entry)
            if code != Errors.NONE:
                return code
    return Errors.NONE
