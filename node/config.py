"""Node settings: defaults < TOML file < environment (`GROUPCOORD_<NAME>`) < command-line flags.

Every setting is declared once in `SETTINGS`; the flags, the environment names and the checks all come
from that table, and docs/CONFIG.md documents it (a test keeps the two in step).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupcoord.base.errors import UserError
from groupcoord.coordinator.config import GroupConfig

if TYPE_CHECKING:
    from groupcoord.node.auth import Acl

ENV_PREFIX = "GROUPCOORD_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"
INT32_MAX = 2**31 - 1
MS_PER_MINUTE = 60_000
TEN_YEARS_S = 10 * 365 * 86_400
# Kafka's own port: a client's default bootstrap port.
KAFKA_DEFAULT_PORT = 9092
# Caps of the per-group metric series (node/group_metrics.py): a few MB of exposition at most.
DEFAULT_MAX_GROUPS = 1000
DEFAULT_MAX_OFFSETS = 10_000
_GROUP_DEFAULTS = GroupConfig()


class ConfigError(UserError):
    """A setting is unknown, malformed or out of range."""


@dataclass(frozen=True, slots=True)
class Setting:
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


def _group(name: str, field: str, help: str, minimum: int = 0, scale: int = 1) -> Setting:
    default = getattr(_GROUP_DEFAULTS, field)
    return Setting(name, default // scale, help, minimum=minimum, group_field=field, scale=scale)


SETTINGS: tuple[Setting, ...] = (
    Setting("node_id", 1, "This node's id, reported by FindCoordinator and DescribeCluster."),
    Setting("host", "127.0.0.1", "Address the gRPC server listens on."),
    Setting("port", 50051, "TCP port the gRPC server listens on; 0 picks a free one.", maximum=65_535),
    Setting("advertised_host", "", "Host that clients are told to connect to; empty means `host`."),
    Setting(
        "metrics_port",
        -1,
        "Port of the Prometheus endpoint on `host`; -1 disables it, 0 picks a free one.",
        minimum=-1,
        maximum=65_535,
    ),
    Setting(
        "health_port",
        -1,
        "Port of a plaintext gRPC endpoint on `host` that serves only the health service (for probes that speak no "
        "TLS, as the kubelet's); -1 disables it, 0 picks a free one.",
        minimum=-1,
        maximum=65_535,
    ),
    Setting(
        "metrics_max_groups",
        DEFAULT_MAX_GROUPS,
        "Most groups that get per-group series (state, members, generation, offsets, rebalances), the smallest group "
        "ids of those this node coordinates; the rest are counted in groupcoord_groups_not_exported. 0: none.",
    ),
    Setting(
        "metrics_max_offsets",
        DEFAULT_MAX_OFFSETS,
        "Most committed-offset series (group, topic, partition) in all, each group's offsets whole or not at all; "
        "the rest are counted in groupcoord_group_offsets_not_exported.",
    ),
    Setting(
        "kafka_port",
        KAFKA_DEFAULT_PORT,
        "Port of the Kafka listener on `host` (docs/KAFKA.md); -1 disables it, 0 picks a free one. With TLS on the "
        "client port it speaks TLS too, with the same certificate and client-certificate rules (Kafka's SSL or, "
        "with kafka_sasl_mechanisms, SASL_SSL). Other nodes are told to clients at their `@kafka=` address in "
        "`peers`, else their client host and this node's advertised Kafka port.",
        minimum=-1,
        maximum=65_535,
    ),
    Setting(
        "kafka_advertised_host",
        "",
        "Host Kafka clients are told for this node (Kafka's advertised.listeners); empty means its `@kafka=` "
        "host in `peers`, else its client host.",
    ),
    Setting(
        "kafka_advertised_port",
        0,
        "Port Kafka clients are told for this node, and for other nodes without an `@kafka=` address in `peers` "
        "(published ports); 0 means its `@kafka=` port in `peers`, else the port the listener bound.",
        maximum=65_535,
    ),
    Setting(
        "kafka_max_frame_bytes",
        8 * 1024 * 1024,
        "Largest Kafka request frame; a bigger one closes its connection with a log line.",
        minimum=1024,
    ),
    Setting("kafka_max_connections", 1000, "Most open Kafka connections; more are closed as they come.", minimum=1),
    Setting(
        "kafka_sasl_mechanisms",
        "",
        "SASL mechanisms the Kafka listener requires, comma-separated: PLAIN (the password is a bearer token of "
        "acl_file, the user its identity; in the clear without TLS), SCRAM-SHA-256, SCRAM-SHA-512 (the acl_file's "
        "[[scram]] credentials). Empty: no SASL. Needs acl_file.",
    ),
    Setting(
        "kafka_fetch_max_wait_ms",
        5000,
        "Longest a Fetch waits before its empty answer (the client's max_wait_ms, up to this).",
        maximum=600_000,
    ),
    Setting(
        "peers",
        "",
        "Every node of the cluster as `id=host:port:raft_port[@client_host:client_port][@kafka=host:port]`, "
        "comma-separated (this node included); empty runs a single-node cluster. Partition k of a node uses Raft "
        "port raft_port+k; clients are told client_host:client_port when given (published ports), else host:port; "
        "Kafka clients are told the `@kafka=` address when given.",
    ),
    Setting(
        "raft_port",
        0,
        "First Raft port of a single-node cluster (partition k uses raft_port+k); 0 picks free ports. "
        "With `peers`, this node's entry there decides.",
        maximum=65_535,
    ),
    Setting(
        "partitions",
        16,
        "Coordinator partitions (Raft groups); fixed when the cluster is created.",
        minimum=1,
        maximum=1024,
    ),
    Setting(
        "data_dir",
        "",
        "Directory for the Raft journals and snapshots; empty means a temporary directory removed at exit "
        "(nothing survives a restart).",
    ),
    Setting(
        "cluster_secret",
        "",
        "Shared secret that encrypts and authenticates Raft traffic and signs the callers one node hands requests on "
        "for; required with `peers` (prefer the environment variable to a file or a flag).",
    ),
    Setting("log_level", "info", "Lowest level logged.", choices=("debug", "info", "warning", "error")),
    Setting("log_format", "text", "`text` (key=value) or `json` (JSON lines).", choices=("text", "json")),
    Setting(
        "max_request_bytes",
        4 * 1024 * 1024,
        "Largest request message accepted; bigger ones fail with gRPC RESOURCE_EXHAUSTED.",
        minimum=1024,
    ),
    Setting(
        "max_response_bytes",
        4 * 1024 * 1024,
        "Largest reply message sent; a bigger one fails with gRPC RESOURCE_EXHAUSTED (ask for fewer items).",
        minimum=1024,
    ),
    Setting(
        "max_connections",
        4096,
        "Client connections the node holds at once; beyond it new ones are closed as soon as they are accepted.",
        minimum=1,
    ),
    Setting(
        "max_connections_per_ip",
        1024,
        "Client connections one address may hold; beyond it the newest are closed within about a second. "
        "0 means no limit.",
    ),
    Setting(
        "max_concurrent_streams",
        1_000,
        "Calls in flight on one client connection (HTTP/2 MAX_CONCURRENT_STREAMS); more are refused "
        "(REFUSED_STREAM), and a gRPC client queues them.",
        minimum=1,
    ),
    Setting(
        "connection_idle_timeout_ms",
        600_000,
        "A client connection with no call in flight for this long is closed (GOAWAY).",
        minimum=1000,
    ),
    Setting(
        "connection_handshake_timeout_ms",
        10_000,
        "A client connection that has not completed its TLS and HTTP/2 handshake in this long is closed.",
        minimum=100,
    ),
    Setting(
        "keepalive_min_ping_interval_ms",
        10_000,
        "Shortest interval between a client's keepalive pings the node accepts while no call is in flight.",
        minimum=1,
    ),
    Setting(
        "keepalive_max_ping_strikes",
        2,
        "Pings sooner than keepalive_min_ping_interval_ms a connection may send before it is closed "
        "(GOAWAY ENHANCE_YOUR_CALM, too_many_pings); 0 means no limit.",
    ),
    Setting(
        "allocator",
        "jemalloc",
        "`jemalloc`: the node re-executes itself with jemalloc preloaded when it is installed, so memory freed after "
        "a flood goes back to the system; `system`: the C library's malloc.",
        choices=("jemalloc", "system"),
    ),
    Setting(
        "memory_trim_interval_ms",
        10_000,
        "How often the node asks glibc's malloc to hand free memory back to the system (malloc_trim); 0 turns it off.",
    ),
    Setting("shutdown_grace_ms", 5_000, "On SIGTERM/SIGINT, how long in-flight calls may take to finish."),
    Setting(
        "events_segment_bytes",
        4 * 1024 * 1024,
        "Size at which a partition's event file (data_dir/events) is closed and a new one begun.",
        minimum=4096,
    ),
    Setting(
        "events_max_segments",
        8,
        "Event files kept per partition, oldest deleted first; 0 writes no event files.",
        minimum=0,
    ),
    Setting(
        "event_loop",
        "uvloop",
        "Event loop of the gRPC server: `uvloop`, or `asyncio` (the standard loop, for comparison).",
        choices=("uvloop", "asyncio"),
    ),
    Setting(
        "raft_batch_period_ms",
        0,
        "0 sends each Raft entry at once; N > 0 batches entries and sends them every N ms (pysyncobj's "
        "appendEntriesUseBatch), which is also the leader's heartbeat period.",
        maximum=1000,
    ),
    Setting(
        "raft_tick_period_ms",
        50,
        "Period of each partition replica's pysyncobj tick thread (timeouts, heartbeats, retries).",
        minimum=1,
        maximum=1000,
    ),
    Setting(
        "raft_election_timeout_ms",
        200,
        "A follower that hears nothing from its partition's leader for a random time between this and three "
        "times this stands for election: it bounds how soon a dead leader is replaced. At least twice the "
        "leader's heartbeat period (the tick period, or the batch period when batching).",
        minimum=10,
        maximum=10_000,
    ),
    Setting(
        "raft_digest_interval_ms",
        60_000,
        "How often each partition's leader proposes a cross-replica state check: every replica hashes its state "
        "at that log index and compares it with the leader's (a mismatch raises the corruption alarm). Each costs "
        "every replica one pass over the partition's state; 0 turns the checks off.",
    ),
    Setting(
        "raft_quiesce_after_ms",
        5_000,
        "A partition whose leader answered nothing for this long (every reply checks the leader's lease) "
        "stops sending Raft heartbeats; a node-level heartbeat (UDP, on the Raft base port) then shows its followers "
        "that the leader is alive, so an idle cluster costs almost no CPU. The first reply after the quiet waits one "
        "Raft round trip. 0 turns quiescence off (and the UDP heartbeat with it); it is off when batching.",
        maximum=3_600_000,
    ),
    Setting(
        "wall_clock_offset_s",
        0,
        "Seconds added to the wall clock this node reads, for fault-injection tests (what libfaketime's offset "
        "does, without its effect on the monotonic clock): a node whose clock is wrong. Leave 0 in production.",
        minimum=-TEN_YEARS_S,
        maximum=TEN_YEARS_S,
    ),
    Setting(
        "initial_cluster_state",
        "new",
        "etcd's setting of that name. `new`: when every replica of a partition has an empty journal (every node "
        "started for the first time), they form a new cluster; `existing`: never, an empty replica waits to catch up "
        "from a leader. Set `existing` once the cluster has formed, so that nodes that all lost their data "
        "directories stay down instead of coming back as an empty cluster.",
        choices=("new", "existing"),
    ),
    Setting(
        "durability",
        "fsync",
        "`fsync`: every Raft entry, term and vote is on stable storage (fdatasync, one per tick for all that tick "
        "wrote) before any message that depends on it leaves the node, so a power loss of every node loses no "
        "acknowledged commit; `memory`: the journal reaches the page cache only (survives a killed process, not a "
        "crashed OS; a replica restarted after a reboot takes no part in elections until it has caught up).",
        choices=("fsync", "memory"),
    ),
    Setting(
        "tls_cert_file",
        "",
        "PEM certificate (chain) of the client gRPC port; with `tls_key_file` the port serves TLS only. Empty: "
        "plaintext.",
    ),
    Setting("tls_key_file", "", "PEM private key of `tls_cert_file` (unencrypted; keep it mode 0600)."),
    Setting(
        "tls_client_ca_file",
        "",
        "PEM CA certificate(s) that client certificates must be signed by; needs `tls_client_auth = require`.",
    ),
    Setting(
        "tls_client_auth",
        "none",
        "`require`: a client must present a certificate signed by `tls_client_ca_file` (mutual TLS); `none`: "
        "no client certificate is asked for.",
        choices=("none", "require"),
    ),
    Setting(
        "tls_peer_ca_file",
        "",
        "PEM CA certificate(s) a node checks the other nodes' client-port certificates with when it hands a request "
        "on to one of them (a Kafka CreateTopics naming a topic another node leads); it presents its own "
        "certificate. Empty: `tls_client_ca_file`, else the system's CAs.",
    ),
    Setting(
        "acl_file",
        "",
        "TOML file of identities, bearer-token digests and group ACLs (docs/SECURITY.md#authorization); empty: "
        "no authorization, every caller may do everything.",
    ),
    _group(
        "group_min_session_timeout_ms",
        "min_session_timeout_ms",
        "Shortest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT).",
        minimum=1,
    ),
    _group(
        "group_max_session_timeout_ms",
        "max_session_timeout_ms",
        "Longest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT).",
        minimum=1,
    ),
    Setting(
        "group_max_size",
        _GROUP_DEFAULTS.max_size or 0,
        "Most members a group may have (else GROUP_MAX_SIZE_REACHED); 0 means unlimited.",
        group_field="max_size",
    ),
    _group(
        "group_initial_rebalance_delay_ms",
        "initial_rebalance_delay_ms",
        "How long the first rebalance of an Empty group waits for more members to arrive.",
    ),
    _group(
        "offset_metadata_max_bytes",
        "offset_metadata_max_bytes",
        "Longest metadata string of one committed offset (else OFFSET_METADATA_TOO_LARGE).",
    ),
    _group(
        "offsets_retention_minutes",
        "offsets_retention_ms",
        "How long the offsets of an Empty group are kept after it became Empty.",
        minimum=1,
        scale=MS_PER_MINUTE,
    ),
    _group(
        "offsets_retention_check_interval_ms",
        "offsets_retention_check_interval_ms",
        "How often expired offsets and empty groups are looked for.",
        minimum=1,
    ),
    _group(
        "group_max_pending_members",
        "max_pending_members",
        "Most member ids per group handed out with MEMBER_ID_REQUIRED and not joined yet.",
        minimum=1,
    ),
    _group(
        "group_max_id_length",
        "max_id_length",
        "Longest group id, group instance id, client id and protocol name (characters).",
        minimum=1,
    ),
    _group(
        "group_max_member_metadata_bytes",
        "max_member_metadata_bytes",
        "Most protocol metadata bytes one member may send in a JoinGroup (else INVALID_REQUEST).",
    ),
    _group("group_max_protocols", "max_protocols", "Most protocols one member may offer.", minimum=1),
    _group(
        "group_max_assignment_bytes",
        "max_assignment_bytes",
        "Most bytes of one member's assignment in the leader's SyncGroup (else POLICY_VIOLATION).",
    ),
    _group(
        "max_groups_per_partition",
        "max_groups_per_partition",
        "Most groups one coordinator partition holds; a new group beyond it gets POLICY_VIOLATION. 0: no limit.",
    ),
    _group(
        "max_groups_per_node",
        "max_groups_per_node",
        "Most groups in the partitions this node leads; a new group beyond it gets POLICY_VIOLATION. 0: no limit.",
    ),
    _group(
        "group_join_rate_per_s",
        "join_rate_per_s",
        "JoinGroups per second admitted per group (else THROTTLING_QUOTA_EXCEEDED); 0: no limit.",
    ),
    _group(
        "group_join_burst",
        "join_burst",
        "JoinGroups a group may send at once before `group_join_rate_per_s` applies.",
        minimum=1,
    ),
    _group(
        "offset_commit_max_partitions",
        "offset_commit_max_partitions",
        "Most partitions in one OffsetCommit (else POLICY_VIOLATION for the whole request).",
        minimum=1,
    ),
    _group(
        "offset_fetch_max_partitions",
        "offset_fetch_max_partitions",
        "Most partitions named in one OffsetFetch (else POLICY_VIOLATION).",
        minimum=1,
    ),
    Setting(
        "auto_create_topics",
        _GROUP_DEFAULTS.auto_create_topics,
        "Whether a Kafka Metadata request naming an unknown topic creates it (Kafka's auto.create.topics.enable).",
        group_field="auto_create_topics",
    ),
    _group(
        "default_num_partitions",
        "default_num_partitions",
        "Partitions of a topic created without a count (Kafka's num.partitions; auto-created topics get these).",
        minimum=1,
    ),
    _group(
        "max_topic_partitions",
        "max_topic_partitions",
        "Most partitions a topic may be created with (else INVALID_PARTITIONS).",
        minimum=1,
    ),
)
_BY_NAME = {s.name: s for s in SETTINGS}
# Settings whose value is never shown (`groupcoord settings` says only whether one is set).
SENSITIVE = frozenset({"cluster_secret"})
# The least a cluster secret must have (`openssl rand -hex 32` gives 64 characters of 16 kinds), and words that
# mark one copied from an example (deploy/k8s/secret.example.yaml's "REPLACE-ME-...").
MIN_SECRET_LENGTH, MIN_SECRET_DISTINCT = 16, 8
SECRET_PLACEHOLDERS = ("replace-me", "replaceme", "changeme", "change-me", "placeholder", "your-secret", "xxxxxx")


@dataclass(frozen=True, slots=True)
class NodeSettings:
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
    group: GroupConfig
    durability: str = "fsync"
    initial_cluster_state: str = "new"
    raft_digest_interval_ms: int = 60_000
    raft_quiesce_after_ms: int = 5_000
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds `--config` and one flag per setting; an absent flag leaves the lower layers in force."""
    parser.add_argument(
        "--config", metavar="FILE", help=f"TOML file with settings (also ${CONFIG_ENV}); see docs/CONFIG.md"
    )
    for s in SETTINGS:
        if isinstance(s.default, bool):
            metavar, shown = "{true,false}", str(s.default).lower()
        else:
            metavar = "{" + ",".join(s.choices) + "}" if s.choices else ("N" if isinstance(s.default, int) else "TEXT")
            shown = repr(s.default)
        parser.add_argument(s.flag, dest=s.name, metavar=metavar, help=f"{s.help} (default: {shown}; env {s.env})")


def load(args: argparse.Namespace, environ: Mapping[str, str]) -> NodeSettings:
    values: dict[str, int | str] = {s.name: s.default for s in SETTINGS}
    sources = dict.fromkeys(values, "default")
    path = args.config or environ.get(CONFIG_ENV)
    if path:
        from_file = _read_file(Path(path))
        values.update(from_file)
        sources.update(dict.fromkeys(from_file, f"config file {path}"))
    for s in SETTINGS:
        if s.env in environ:
            values[s.name] = s.parse(environ[s.env], f"environment {s.env}", text=True)
            sources[s.name] = f"environment {s.env}"
    for s in SETTINGS:
        flag_value = getattr(args, s.name, None)
        if flag_value is not None:
            values[s.name] = s.parse(flag_value, f"flag {s.flag}", text=True)
            sources[s.name] = f"flag {s.flag}"
    origins = tuple(_origin(s, values[s.name], sources[s.name]) for s in SETTINGS)
    return dataclasses.replace(_build(values), origins=origins)


@dataclass(frozen=True, slots=True)
class SettingOrigin:
    """A setting in force and where it came from, for `groupcoord settings` (Kafka's DescribeConfigs source)."""

    name: str
    value: str  # "(set)" or "" for a sensitive one: its value never leaves the node
    source: str  # "default", "config file PATH", "environment GROUPCOORD_X" or "flag --x"
    default: str
    sensitive: bool


def _origin(setting: Setting, value: bool | int | str, source: str) -> SettingOrigin:
    def shown(v: bool | int | str) -> str:
        if setting.name in SENSITIVE:
            return "(set)" if v else ""
        return str(v).lower() if isinstance(v, bool) else str(v)

    return SettingOrigin(setting.name, shown(value), source, shown(setting.default), setting.name in SENSITIVE)


def read_toml(path: Path, what: str, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """A TOML file's table; a file that cannot be read or parsed is one `error` line naming `what` and the path."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise error(f"{what} {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path}: not valid TOML: {exc}") from None


def _read_file(path: Path) -> dict[str, int | str]:
    data = read_toml(path, "config file")
    values: dict[str, int | str] = {}
    for key, value in data.items():
        setting = _BY_NAME.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, _BY_NAME, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"config file {path}: unknown setting {key!r}{hint}")
        values[key] = setting.parse(value, f"config file {path}")
    return values


def check_cluster_secret(secret: str) -> None:
    """Refuses a cluster secret an attacker could guess: it is all that keeps an open Raft port from being remote
    code execution (pysyncobj unpickles what peers send), so a short, repetitive or placeholder one is an error."""
    hint = "make one with `openssl rand -hex 32`"
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"cluster_secret has {len(secret)} characters, fewer than {MIN_SECRET_LENGTH}: {hint}")
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        raise ConfigError(f"cluster_secret uses fewer than {MIN_SECRET_DISTINCT} different characters: {hint}")
    folded = secret.lower().replace("_", "-")
    placeholder = next((word for word in SECRET_PLACEHOLDERS if word in folded), None)
    if placeholder is not None:
        raise ConfigError(f"cluster_secret looks like a placeholder (it contains {placeholder!r}): {hint}")


def _build(values: dict[str, int | str]) -> NodeSettings:
    if values["cluster_secret"]:
        check_cluster_secret(str(values["cluster_secret"]))
    lo, hi = values["group_min_session_timeout_ms"], values["group_max_session_timeout_ms"]
    if lo > hi:  # type: ignore[operator]
        raise ConfigError(f"group_min_session_timeout_ms ({lo}) must not exceed group_max_session_timeout_ms ({hi})")
    group_kwargs: dict[str, int | None] = {}
    for s in SETTINGS:
        if s.group_field:
            value = values[s.name]
            group_kwargs[s.group_field] = value if isinstance(value, bool) else int(value) * s.scale
    group_kwargs["max_size"] = group_kwargs["max_size"] or None
    try:
        group = GroupConfig(**group_kwargs)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(f"group settings: {exc}") from None
    return NodeSettings(
        node_id=int(values["node_id"]),
        host=str(values["host"]),
        port=int(values["port"]),
        advertised_host=str(values["advertised_host"] or values["host"]),
        metrics_port=int(values["metrics_port"]),
        peers=str(values["peers"]),
        raft_port=int(values["raft_port"]),
        partitions=int(values["partitions"]),
        data_dir=str(values["data_dir"]),
        cluster_secret=str(values["cluster_secret"]),
        log_level=str(values["log_level"]),
        log_format=str(values["log_format"]),
        max_request_bytes=int(values["max_request_bytes"]),
        max_response_bytes=int(values["max_response_bytes"]),
        max_connections=int(values["max_connections"]),
        max_connections_per_ip=int(values["max_connections_per_ip"]),
        max_concurrent_streams=int(values["max_concurrent_streams"]),
        connection_idle_timeout_ms=int(values["connection_idle_timeout_ms"]),
        connection_handshake_timeout_ms=int(values["connection_handshake_timeout_ms"]),
        keepalive_min_ping_interval_ms=int(values["keepalive_min_ping_interval_ms"]),
        keepalive_max_ping_strikes=int(values["keepalive_max_ping_strikes"]),
        memory_trim_interval_ms=int(values["memory_trim_interval_ms"]),
        allocator=str(values["allocator"]),
        shutdown_grace_ms=int(values["shutdown_grace_ms"]),
        events_segment_bytes=int(values["events_segment_bytes"]),
        events_max_segments=int(values["events_max_segments"]),
        event_loop=str(values["event_loop"]),
        raft_batch_period_ms=int(values["raft_batch_period_ms"]),
        raft_tick_period_ms=int(values["raft_tick_period_ms"]),
        raft_election_timeout_ms=_election_timeout(values),
        group=group,
        durability=str(values["durability"]),
        initial_cluster_state=str(values["initial_cluster_state"]),
        raft_digest_interval_ms=int(values["raft_digest_interval_ms"]),
        raft_quiesce_after_ms=int(values["raft_quiesce_after_ms"]),
        wall_clock_offset_s=int(values["wall_clock_offset_s"]),
        kafka_port=int(values["kafka_port"]),
        health_port=int(values["health_port"]),
        kafka_sasl_mechanisms=_sasl_mechanisms(values),
        kafka_advertised_host=str(values["kafka_advertised_host"]),
        kafka_advertised_port=int(values["kafka_advertised_port"]),
        kafka_max_frame_bytes=int(values["kafka_max_frame_bytes"]),
        kafka_max_connections=int(values["kafka_max_connections"]),
        kafka_fetch_max_wait_ms=int(values["kafka_fetch_max_wait_ms"]),
        metrics_max_groups=int(values["metrics_max_groups"]),
        metrics_max_offsets=int(values["metrics_max_offsets"]),
        **_tls(values),
        **_acl(values),
    )


def _election_timeout(values: dict[str, int | str]) -> int:
    """Checked against the leader's heartbeat period: closer than two of them, followers would stand for election
    between heartbeats."""
    election = int(values["raft_election_timeout_ms"])
    heartbeat = int(values["raft_batch_period_ms"]) or int(values["raft_tick_period_ms"])
    if election < 2 * heartbeat:
        raise ConfigError(
            f"raft_election_timeout_ms ({election}) must be at least twice the leader's heartbeat period "
            f"({heartbeat} ms: raft_batch_period_ms when batching, else raft_tick_period_ms)"
        )
    return election


def _sasl_mechanisms(values: dict[str, int | str]) -> tuple[str, ...]:
    from groupcoord.node.kafka.sasl import MECHANISMS  # sasl imports the ACL, which imports this module

    names = tuple(n.strip() for n in str(values["kafka_sasl_mechanisms"]).split(",") if n.strip())
    for name in names:
        if name not in MECHANISMS:
            raise ConfigError(f"kafka_sasl_mechanisms: unknown {name!r}, expected some of {', '.join(MECHANISMS)}")
    if names and not values["acl_file"]:
        raise ConfigError("kafka_sasl_mechanisms needs acl_file: the SASL credentials are its tokens and [[scram]]")
    return names


def _acl(values: dict[str, int | str]) -> dict[str, Acl | str | None]:
    """The ACL file is read and checked here, so a mistake in it stops the node before it binds."""
    from groupcoord.node.auth import load_acl  # auth imports ConfigError from here

    path = str(values["acl_file"])
    return {"acl_file": path, "acl": load_acl(Path(path)) if path else None}


def _tls(values: dict[str, int | str]) -> dict[str, str]:
    """The TLS settings, checked as a whole: half a configuration would silently serve plaintext."""
    names = ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "tls_peer_ca_file")
    tls = {name: str(values[name]) for name in names}
    auth = str(values["tls_client_auth"])
    if bool(tls["tls_cert_file"]) != bool(tls["tls_key_file"]):
        given, missing = (
            ("tls_cert_file", "tls_key_file") if tls["tls_cert_file"] else ("tls_key_file", "tls_cert_file")
        )
        raise ConfigError(f"{given} is set but {missing} is not: TLS needs both the certificate and its key")
    if not tls["tls_cert_file"] and (tls["tls_client_ca_file"] or tls["tls_peer_ca_file"] or auth != "none"):
        raise ConfigError(
            "tls_client_ca_file, tls_peer_ca_file and tls_client_auth need TLS: set tls_cert_file and tls_key_file"
        )
    if auth == "require" and not tls["tls_client_ca_file"]:
        raise ConfigError(
            "tls_client_auth = require needs tls_client_ca_file, the CA client certificates are checked against"
        )
    if tls["tls_client_ca_file"] and auth != "require":
        raise ConfigError(
            "tls_client_ca_file is set but tls_client_auth is not `require`: grpcio either requires a client "
            "certificate or asks for none, so set tls_client_auth = require (or drop tls_client_ca_file)"
        )
    return {**tls, "tls_client_auth": auth}
