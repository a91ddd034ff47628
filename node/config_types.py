"""The types of node settings: one `Setting` of the table (node/config_table.py), the `NodeSettings` a node runs
with and the `SettingOrigin` of each, apart from the table and the loading so that every layer of the node can
import them without the other two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from groupcoord.base.errors import UserError
from groupcoord.coordinator.config import GroupConfig

if TYPE_CHECKING:
    from groupcoord.node.auth import Acl

ENV_PREFIX = "GROUPCOORD_"
INT32_MAX = 2**31 - 1
# Kafka's own port: a client's default bootstrap port.
KAFKA_DEFAULT_PORT = 9092
# Caps of the per-group metric series (node/group_metrics.py): a few MB of exposition at most.
DEFAULT_MAX_GROUPS = 1000
DEFAULT_MAX_OFFSETS = 10_000


class ConfigError(UserError):
    """A setting is unknown, malformed or out of range."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting of the table: its flag, environment name and checks all follow from these fields."""

    name: str
    default: bool | int | str
    help: str
    choices: tuple[str, ...] = ()
    minimum: int = 0
    maximum: int = INT32_MAX
    # The GroupConfig field this setting feeds, and the factor from this setting's unit to the field's.
    group_field: str = ""
    scale: int = 1

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, value: object, source: str, text: bool = False) -> bool | int | str:
        """Checks one value: `text` ones (environment, flags) are converted, TOML ones must have the right type."""
        where = f"{source}: {self.name}"
        if isinstance(self.default, bool):
            if text and isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: expected true or false, got {value!r}")
            return value
        if isinstance(self.default, str):
            if not isinstance(value, str):
                raise ConfigError(f"{where}: expected a string, got {value!r}")
            if self.choices and value.lower() not in self.choices:
                raise ConfigError(f"{where}: expected one of {', '.join(self.choices)}, got {value!r}")
            return value.lower() if self.choices else value
        if text and isinstance(value, str):
            try:
                value = int(value.strip(), 10)
            except ValueError:
                raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if not self.minimum <= value <= self.maximum:
            raise ConfigError(f"{where}: must be between {self.minimum} and {self.maximum}, got {value}")
        return value


@dataclass(frozen=True, slots=True)
class SettingOrigin:
    """A setting in force and where it came from, for `groupcoord settings` (Kafka's DescribeConfigs source)."""

    name: str
    value: str  # "(set)" or "" for a sensitive one: its value never leaves the node
    source: str  # "default", "config file PATH", "environment GROUPCOORD_X" or "flag --x"
    default: str
    sensitive: bool


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """The settings a node runs with, built by node/config.py's `load` once every value has been checked."""

    node_id: int
    host: str
    port: int
    advertised_host: str
    metrics_port: int
    peers: str
    raft_port: int
    partitions: int
    data_dir: str
    cluster_secret: str
    log_level: str
    log_format: str
    max_request_bytes: int
    max_response_bytes: int
    max_connections: int
    max_connections_per_ip: int
    max_concurrent_streams: int
    connection_idle_timeout_ms: int
    connection_handshake_timeout_ms: int
    keepalive_min_ping_interval_ms: int
    keepalive_max_ping_strikes: int
    memory_trim_interval_ms: int
    allocator: str
    shutdown_grace_ms: int
    events_segment_bytes: int
    events_max_segments: int
    event_loop: str
    raft_batch_period_ms: int
    raft_tick_period_ms: int
    raft_election_timeout_ms: int
    raft_pre_vote_window_ms: int
    group: GroupConfig
    durability: str = "fsync"
    initial_cluster_state: str = "new"
    raft_digest_interval_ms: int = 60_000
    raft_quiesce_after_ms: int = 5_000
    raft_threads: str = "partition"
    wall_clock_offset_s: int = 0
    kafka_port: int = -1
    health_port: int = -1
    kafka_sasl_mechanisms: tuple[str, ...] = ()
    kafka_advertised_host: str = ""
    kafka_advertised_port: int = 0
    kafka_max_frame_bytes: int = 8 * 1024 * 1024
    kafka_max_connections: int = 1000
    kafka_fetch_max_wait_ms: int = 5000
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    tls_client_auth: str = "none"
    tls_peer_ca_file: str = ""
    acl_file: str = ""
    acl: Acl | None = None
    metrics_max_groups: int = DEFAULT_MAX_GROUPS
    metrics_max_offsets: int = DEFAULT_MAX_OFFSETS
    # Every setting in force with its source; filled by `load` (a NodeSettings built otherwise has none).
    origins: tuple[SettingOrigin, ...] = ()
