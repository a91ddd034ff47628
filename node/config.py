"""Node settings: defaults < TOML file < environment (`GROUPCOORD_<NAME>`) < command-line flags.

The settings are declared in node/config_table.py, their types in node/config_types.py, the checks across
settings in node/config_checks.py; this module reads the layers and builds the `NodeSettings`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from groupcoord.node.config_checks import (
    acl_settings,
    check_cluster_secret,
    election_timeout,
    group_config,
    pre_vote_window,
    sasl_mechanisms,
    tls_settings,
)
from groupcoord.node.config_table import BY_NAME, SENSITIVE, SETTINGS
from groupcoord.node.config_types import (
    ENV_PREFIX,
    KAFKA_DEFAULT_PORT,
    ConfigError,
    NodeSettings,
    Setting,
    SettingOrigin,
)

# The loading, the error it raises and what it returns, and the names the command line (groupcoord/cli.py,
# localcluster.py, localstate.py) and the docs' snippet checks read as attributes of this module.
__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "KAFKA_DEFAULT_PORT",
    "SETTINGS",
    "ConfigError",
    "NodeSettings",
    "add_arguments",
    "load",
    "read_toml",
]

CONFIG_ENV = ENV_PREFIX + "CONFIG"


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
    """The settings in force, each layer over the one below, every value checked and its source kept."""
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
        setting = BY_NAME.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, BY_NAME, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"config file {path}: unknown setting {key!r}{hint}")
        values[key] = setting.parse(value, f"config file {path}")
    return values


def _build(values: dict[str, int | str]) -> NodeSettings:
    if values["cluster_secret"]:
        check_cluster_secret(str(values["cluster_secret"]))
    group = group_config(values)
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
        raft_election_timeout_ms=election_timeout(values),
        raft_pre_vote_window_ms=pre_vote_window(values),
        group=group,
        durability=str(values["durability"]),
        initial_cluster_state=str(values["initial_cluster_state"]),
        raft_digest_interval_ms=int(values["raft_digest_interval_ms"]),
        raft_quiesce_after_ms=int(values["raft_quiesce_after_ms"]),
        raft_threads=str(values["raft_threads"]),
        wall_clock_offset_s=int(values["wall_clock_offset_s"]),
        kafka_port=int(values["kafka_port"]),
        health_port=int(values["health_port"]),
        kafka_sasl_mechanisms=sasl_mechanisms(values),
        kafka_advertised_host=str(values["kafka_advertised_host"]),
        kafka_advertised_port=int(values["kafka_advertised_port"]),
        kafka_max_frame_bytes=int(values["kafka_max_frame_bytes"]),
        kafka_max_connections=int(values["kafka_max_connections"]),
        kafka_fetch_max_wait_ms=int(values["kafka_fetch_max_wait_ms"]),
        metrics_max_groups=int(values["metrics_max_groups"]),
        metrics_max_offsets=int(values["metrics_max_offsets"]),
        **tls_settings(values),
        **acl_settings(values),
    )
