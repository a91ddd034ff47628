"""The compose deployment with TLS (deploy/compose.tls.yml over docker-compose.yml): the override checked with
Docker Compose's own `config`, then the cluster brought up for real with certificates from `groupcoord certs init`,
mutual TLS required. The containers' health checks pass over TLS, an SDK member and Admin with the CA and a client
certificate work through the published ports, and clients without the CA or without a certificate are refused.
Uses the image and the compose plumbing of test_containers.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from groupcoord import certs
from groupcoord.client import GroupMember
from groupcoord.client.admin import Admin
from groupcoord.client.errors import BootstrapUnreachable
from groupcoord.client.security import PLAINTEXT, ClientSecurity
from groupcoord.protocol.errors import Errors
from tests.deploy.test_containers import BOOTSTRAP, NODES, ROOT, compose_cluster
from tests.deploy.test_manifests import SECRET, compose_binary

FILES = ("docker-compose.yml", "deploy/compose.tls.yml")
TLS_MOUNT = "/etc/groupcoord/tls"
NODE_UID = 10001  # the image's `groupcoord` user (deploy/Dockerfile)


def _config(tls_dir: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "GROUPCOORD_"))}
    env["GROUPCOORD_CLUSTER_SECRET"] = SECRET
    if tls_dir is not None:
        env["GROUPCOORD_TLS_DIR"] = tls_dir
    files = [arg for f in FILES for arg in ("-f", str(ROOT / f))]
    command = [str(compose_binary()), *files, "config", "--format", "json"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_tls_override_gives_each_node_its_own_certificate(tmp_path: Path):
    done = _config(str(tmp_path))
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    assert sorted(services) == [f"node{k}" for k in range(1, NODES + 1)]
    for name, service in services.items():
        node_id = service["environment"]["GROUPCOORD_NODE_ID"]
        env = service["environment"]
        assert env["GROUPCOORD_TLS_CERT_FILE"] == env["GROUPCOORD_CERT_FILE"] == f"{TLS_MOUNT}/node-{node_id}.pem"
        assert env["GROUPCOORD_TLS_KEY_FILE"] == env["GROUPCOORD_KEY_FILE"] == f"{TLS_MOUNT}/node-{node_id}-key.pem"
        assert env["GROUPCOORD_TLS_CLIENT_CA_FILE"] == env["GROUPCOORD_CA_FILE"] == f"{TLS_MOUNT}/ca.pem"
        assert env["GROUPCOORD_TLS_CLIENT_AUTH"] == "require"
        mounts = [v for v in service["volumes"] if v["target"] == TLS_MOUNT]
        assert mounts == [{"type": "bind", "source": str(tmp_path), "target": TLS_MOUNT, "read_only": True}], name
    # The certificates' place is the operator's to say: no default that silently mounts an empty directory.
    missing = _config(None)
    assert missing.returncode != 0
    assert "set GROUPCOORD_TLS_DIR" in missing.stderr


def _readable_by_the_node(directory: Path) -> None:
    """The node runs as uid 10001 and `certs init` writes keys 0600 for their owner: hand the test's copy over."""
    if os.geteuid() == 0:
        for path in (directory, *directory.iterdir()):
            os.chown(path, NODE_UID, NODE_UID)
    else:
        directory.chmod(0o755)
        for key in directory.glob("*-key.pem"):
            key.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


async def test_a_tls_compose_cluster_admits_only_clients_of_its_ca(tmp_path_factory: pytest.TempPathFactory):
    tls_dir = tmp_path_factory.mktemp("compose-tls") / "certs"
    certs.init(tls_dir, NODES, ["admin"])
    other = tmp_path_factory.mktemp("compose-tls") / "other"
    certs.init(other, 1, ["admin"])
    _readable_by_the_node(tls_dir)
    cert, key = certs.client_cert(tls_dir, "admin")
    admin = ClientSecurity(str(tls_dir / certs.CA_FILE), str(cert), str(key))

    env = {"GROUPCOORD_TLS_DIR": str(tls_dir)}
    with compose_cluster(tmp_path_factory, FILES, env, security=admin):  # every container healthy: checks over TLS
        async with Admin(BOOTSTRAP, deadline_s=20, security=admin) as client:
            described = await client.describe_cluster()
        assert sorted(n.node_id for n in described.nodes) == list(range(1, NODES + 1))

        member = GroupMember(BOOTSTRAP, "tls-compose", {"orders": 3}, heartbeat_interval_ms=500, security=admin)
        await member.start()
        try:
            assignment = await member.wait_stable(60)
            assert len(assignment.partitions) == 3
            assert set((await member.commit({("orders", 0): 5})).values()) == {Errors.NONE}
        finally:
            await member.close()

        other_cert, other_key = certs.client_cert(other, "admin")
        refused = {
            "plaintext": PLAINTEXT,
            "the CA, no certificate": ClientSecurity(str(tls_dir / certs.CA_FILE)),
            "another CA's certificate": ClientSecurity(str(tls_dir / certs.CA_FILE), str(other_cert), str(other_key)),
            "trusting another CA": ClientSecurity(str(other / certs.CA_FILE), str(cert), str(key)),
        }
        for what, security in refused.items():
            with pytest.raises(BootstrapUnreachable):
                async with Admin(BOOTSTRAP, deadline_s=3, connect_timeout_s=3, security=security) as client:
                    await client.describe_cluster()
                pytest.fail(f"a client with {what} was let in")

        cli = subprocess.run(
            [sys.executable, "-m", "groupcoord", "groups", "describe", "tls-compose", "--json",
             "--bootstrap", ",".join(BOOTSTRAP)],
            env={**os.environ, "GROUPCOORD_CA_FILE": admin.ca_file, "GROUPCOORD_CERT_FILE": admin.cert_file,
                 "GROUPCOORD_KEY_FILE": admin.key_file},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)[0]["state"] == "Empty"
