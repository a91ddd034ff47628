"""The compose deployment with the operator's own credentials (GROUPCOORD_CREDENTIALS_DIR) instead of those the
project generates: the credentials service leaves them as they are, the containers' health checks pass over mutual
TLS with them, an SDK member, Admin and the CLI with the CA and a client certificate work through the published
ports, and clients without the CA or without a certificate of it are refused. Uses the image and the compose plumbing
of test_containers.py."""

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
from tests.deploy.test_containers import BOOTSTRAP, NODES, admin_security, compose_cluster

NODE_UID = 10001  # the image's `groupcoord` user (deploy/Dockerfile)


def _readable_by_the_node(directory: Path) -> None:
    """The node runs as uid 10001 and `certs init` writes keys 0600 for their owner: hand the test's copy over."""
    if os.geteuid() == 0:
        for path in (directory, *directory.iterdir()):
            os.chown(path, NODE_UID, NODE_UID)
    else:
        directory.chmod(0o755)
        for key in directory.glob("*-key.pem"):
            key.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


async def test_a_compose_cluster_on_own_credentials_admits_only_clients_of_its_ca(
    tmp_path_factory: pytest.TempPathFactory,
):
    own = tmp_path_factory.mktemp("compose-tls") / "certs"
    certs.init(own, NODES, ["admin"], ca_key_file=own.parent / "ca-key.pem")
    certs.write_acl(own, ["admin", *(f"node-{k}" for k in range(1, NODES + 1))])
    other = tmp_path_factory.mktemp("compose-tls") / "other"
    certs.init(other, 1, ["admin"])
    _readable_by_the_node(own)
    before = {f.name: f.read_bytes() for f in own.iterdir()}
    admin = admin_security(own)

    env = {"GROUPCOORD_CREDENTIALS_DIR": str(own)}
    with compose_cluster(tmp_path_factory, env=env):  # every container healthy: checks over TLS
        assert {f.name: f.read_bytes() for f in own.iterdir()} == before, "the credentials service changed them"
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

        cert, key = certs.client_cert(own, "admin")
        other_cert, other_key = certs.client_cert(other, "admin")
        refused = {
            "plaintext": PLAINTEXT,
            "the CA, no certificate": ClientSecurity(str(own / certs.CA_FILE)),
            "another CA's certificate": ClientSecurity(str(own / certs.CA_FILE), str(other_cert), str(other_key)),
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
