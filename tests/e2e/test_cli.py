"""The `groupcoord` command line: settings precedence, and user mistakes reported without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groupcoord.cli import build_parser
from groupcoord.node.config import load
from groupcoord.node.config_table import SETTINGS
from tests.e2e.support import NodeProcess

ROOT = Path(__file__).resolve().parents[2]


def groupcoord(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupcoord", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def parse(*flags: str, environ: dict[str, str] | None = None):
    return load(build_parser().parse_args(["node", *flags]), environ or {})


def test_flags_override_environment_override_file_override_defaults(tmp_path):
    config = tmp_path / "node.toml"
    config.write_text(
        'node_id = 3\nport = 1111\nlog_format = "json"\ngroup_max_size = 5\noffsets_retention_minutes = 2\n'
    )
    settings = parse(
        "--config", str(config), "--port=3333", environ={"GROUPCOORD_PORT": "2222", "GROUPCOORD_NODE_ID": "4"}
    )
    assert (settings.node_id, settings.port, settings.log_format, settings.host) == (4, 3333, "json", "127.0.0.1")
    assert settings.group.max_size == 5
    assert settings.group.offsets_retention_ms == 120_000
    assert settings.advertised_host == "127.0.0.1"

    from_env = parse(environ={"GROUPCOORD_CONFIG": str(config)})
    assert from_env.port == 1111


def test_defaults_match_the_coordinator_defaults():
    settings = parse()
    assert (settings.host, settings.port, settings.node_id, settings.max_request_bytes) == (
        "127.0.0.1",
        50051,
        1,
        4 << 20,
    )
    assert settings.group.max_size == 10_000
    assert settings.group.min_session_timeout_ms == 6_000
    assert settings.group.offsets_retention_ms == 7 * 24 * 3_600_000


@pytest.mark.parametrize(
    ("file_text", "args", "env", "message"),
    [
        (None, ["--config", "/nonexistent/node.toml"], {}, "No such file or directory"),
        ("port = \n", [], {}, "not valid TOML"),
        ("prot = 1\n", [], {}, "unknown setting 'prot' (did you mean 'port'?)"),
        ('port = "50051"\n', [], {}, "port: expected an integer"),
        ("log_format = true\n", [], {}, "log_format: expected a string"),
        (None, [], {"GROUPCOORD_PORT": "fifty"}, "environment GROUPCOORD_PORT: port: expected an integer, got 'fifty'"),
        (None, ["--port=70000"], {}, "flag --port: port: must be between 0 and 65535, got 70000"),
        (None, ["--log-format=xml"], {}, "expected one of text, json, got 'xml'"),
        (None, ["--group-min-session-timeout-ms=10", "--group-max-session-timeout-ms=5"], {}, "must not exceed"),
    ],
)
def test_bad_settings_exit_2_with_one_clear_line(tmp_path, file_text, args, env, message):
    if file_text is not None:
        config = tmp_path / "node.toml"
        config.write_text(file_text)
        args = ["--config", str(config), *args]
    result = groupcoord("node", *args, env=env)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.startswith("groupcoord: error: ")
    assert "Traceback" not in result.stderr


def test_a_port_in_use_exits_1_without_a_traceback(node: NodeProcess):
    result = groupcoord("node", f"--port={node.port}")
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{node.port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_health_exits_0_for_a_serving_node_and_1_otherwise(node: NodeProcess):
    serving = groupcoord("health", "--address", node.address)
    assert (serving.returncode, serving.stdout.strip()) == (0, f"{node.address}: SERVING")
    by_env = groupcoord("health", env={"GROUPCOORD_PORT": str(node.port)})
    assert (by_env.returncode, by_env.stdout.strip()) == (0, f"127.0.0.1:{node.port}: SERVING")
    nobody = groupcoord("health", "--address", "127.0.0.1:1", "--timeout", "0.5")
    assert (nobody.returncode, nobody.stdout.strip()) == (1, "127.0.0.1:1: UNREACHABLE")
    # The admin commands' variable: every node it lists, one line each; 0 only if all serve.
    listed = groupcoord("health", env={"GROUPCOORD_BOOTSTRAP": f"{node.address},127.0.0.1:1", "GROUPCOORD_PORT": "1"})
    assert (listed.returncode, listed.stdout.splitlines()) == (
        1,
        [f"{node.address}: SERVING", "127.0.0.1:1: UNREACHABLE"],
    )
    alone = groupcoord("health", env={"GROUPCOORD_BOOTSTRAP": node.address, "GROUPCOORD_PORT": "1"})
    assert (alone.returncode, alone.stdout.strip()) == (0, f"{node.address}: SERVING")


def test_no_command_prints_usage_and_exits_2():
    result = groupcoord()
    assert result.returncode == 2
    assert "usage: groupcoord" in result.stderr


def test_every_setting_is_documented():
    doc = (ROOT / "docs" / "CONFIG.md").read_text()
    for setting in SETTINGS:
        row = f"| `{setting.name}` | `{setting.env}` | `{setting.flag}` |"
        assert row in doc, f"docs/CONFIG.md lacks the row for {setting.name}"
