"""Every node setting, declared once: the flags, the environment names and the checks all come from `SETTINGS`,
and docs/CONFIG.md documents it (a test keeps the two in step). The group settings are node/group_settings.py's.
"""

from __future__ import annotations

from groupcoord.node.config_types import DEFAULT_MAX_GROUPS, DEFAULT_MAX_OFFSETS, KAFKA_DEFAULT_PORT, Setting
from groupcoord.node.group_settings import GROUP_SETTINGS

TEN_YEARS_S = 10 * 365 * 86_400

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
        "First Raft port of a single-node cluster (partition k uses raft_port+k); 0 picks free ports below the "
        "kernel's ephemeral range. "
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
        1000,
        "A follower that hears nothing from its partition's leader for a random time between this and three "
        "times this stands for election: it bounds how soon a leader that went silent (hung, or cut off with its "
        "connections open) is replaced, and a leader stalled for longer is voted out. At least twice the "
        "leader's heartbeat period (the tick period, or the batch period when batching).",
        minimum=10,
        maximum=10_000,
    ),
    Setting(
        "raft_pre_vote_window_ms",
        100,
        "A follower that heard from its partition's leader within this long refuses to help elect another (Raft's "
        "pre-vote). It bounds leader leases (a leader answers reads alone for 0.9 of it after a majority's "
        "acknowledgement) and how soon a leader whose connections closed (a killed process) is replaced: about "
        "1 to 1.5 times this after its last heartbeat. At least the leader's heartbeat period and at most half "
        "the election timeout.",
        minimum=10,
        maximum=5_000,
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
        "raft_threads",
        "partition",
        "`partition`: every partition's Raft replica polls and ticks on a thread of its own (pysyncobj's model); "
        "`node`: one thread polls and ticks all of them (less CPU per write and fewer wake-ups; a slow fdatasync "
        "or snapshot of one partition then holds up the others' ticks for as long).",
        choices=("partition", "node"),
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
    *GROUP_SETTINGS,
)
BY_NAME = {s.name: s for s in SETTINGS}
# Settings whose value is never shown (`groupcoord settings` says only whether one is set).
SENSITIVE = frozenset({"cluster_secret"})
