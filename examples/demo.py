"""The groupcoord demo: a local 3-node cluster, four SDK workers (two static) and, in a group of their own, two
unmodified Kafka consumers (confluent-kafka) through the Kafka listener; then the coordinator of the workers' group
is killed with SIGKILL and everyone carries on without a rebalance. Runs in well under two minutes.

    python examples/demo.py        (README's `make run`)
    python examples/demo.py --tls  (`make run TLS=1`: TLS with client certificates, from a development CA)

Each step prints the command a person would type for it. Everything the demo starts it stops again, by pid,
also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_DIR = ROOT / ".groupcoord" / "demo"
# Not the defaults (50051, 25051, Kafka's 9092): the demo runs next to a `make cluster` or a Kafka broker.
BASE_PORT, RAFT_BASE_PORT, KAFKA_BASE_PORT = 50071, 25171, 9192
BOOTSTRAP = ",".join(f"127.0.0.{i}:{BASE_PORT}" for i in (1, 2, 3))
KAFKA_BOOTSTRAP = ",".join(f"127.0.0.{i}:{KAFKA_BASE_PORT}" for i in (1, 2, 3))
GROUP, TOPIC = "demo", "orders:8"
KAFKA_GROUP, KAFKA_CONSUMERS = "demo-kafka", ("k1", "k2")
WORKERS = (("w1", True), ("w2", True), ("d1", False), ("d2", False))
GROUPCOORD = [sys.executable, "-m", "groupcoord"]
TLS_DIR = CLUSTER_DIR / "tls"
# What every client of the --tls cluster passes: `cluster up --tls` makes the CA and the admin certificate.
TLS_FLAGS = [
    "--ca-file", str(TLS_DIR / "ca.pem"), "--cert-file", str(TLS_DIR / "admin.pem"),
    "--key-file", str(TLS_DIR / "admin-key.pem"),
]  # fmt: skip


def step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run(*args: str, check: bool = True, show: bool = True) -> subprocess.CompletedProcess[str]:
    print("$ groupcoord " + " ".join(args), flush=True)
    done = subprocess.run([*GROUPCOORD, *args], text=True, capture_output=True)
    if show:
        print(done.stdout, end="", flush=True)
    if check and done.returncode != 0:
        print(done.stderr, end="", file=sys.stderr)
        raise SystemExit(f"`groupcoord {' '.join(args)}` failed with exit code {done.returncode}")
    return done


class Worker:
    """One client process printing its assignments as JSON lines: an SDK worker (examples/worker.py) or a Kafka
    consumer (examples/kafka_consumer.py, which knows no generation: -1)."""

    def __init__(self, name: str, cmd: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.assigned: tuple[int, list[str]] | None = None
        self.generations: list[int] = []
        self.revocations = 0
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def sdk(cls, name: str, static: bool, client_flags: list[str]) -> Worker:
        cmd = [
            sys.executable, str(ROOT / "examples" / "worker.py"), "--bootstrap", BOOTSTRAP, "--group", GROUP,
            "--topic", TOPIC, "--session-timeout-ms=6000", "--heartbeat-interval-ms=500", *client_flags,
        ] + (["--instance", name] if static else [])  # fmt: skip
        return cls(name, cmd)

    @classmethod
    def kafka(cls, name: str, client_flags: list[str]) -> Worker:
        cmd = [
            sys.executable, str(ROOT / "examples" / "kafka_consumer.py"), "--bootstrap", KAFKA_BOOTSTRAP,
            "--group", KAFKA_GROUP, "--topic", TOPIC.split(":")[0], "--session-timeout-ms=6000",
            "--heartbeat-interval-ms=500", *client_flags,
        ]  # fmt: skip
        return cls(name, cmd)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event["event"] == "assigned":
                generation = event.get("generation", -1)
                self.assigned = (generation, event["partitions"])
                self.generations.append(generation)
                where = f"generation {generation}" if generation >= 0 else "assigned"
                print(f"   [{self.name}] {where}: owns {', '.join(event['partitions'])}")
            elif event["event"] == "revoked":
                self.revocations += 1
                self.assigned = None
                print(f"   [{self.name}] revoked {', '.join(event['partitions']) or 'nothing'}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_settled(workers: list[Worker], timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = [w.assigned for w in workers]
        if all(states) and len({s[0] for s in states if s}) == 1:
            owned = [p for s in states if s for p in s[1]]
            if len(owned) == int(TOPIC.split(":")[1]) == len(set(owned)):
                return states[0][0]  # type: ignore[index]
        time.sleep(0.1)
    raise SystemExit("the workers did not settle on one generation in time")


def main(tls: bool) -> int:
    workers: list[Worker] = []
    client_flags = TLS_FLAGS if tls else []
    try:
        what = ", TLS with client certificates" if tls else ""
        step(f"1. Start a local 3-node cluster (16 Raft partitions, leaders spread over the nodes{what})")
        if CLUSTER_DIR.exists():
            run("cluster", "down", "--dir", str(CLUSTER_DIR), check=False)
            shutil.rmtree(CLUSTER_DIR)
        # A Kafka listener on every node; with --tls it serves TLS too, with the same certificates.
        run("cluster", "up", "--dir", str(CLUSTER_DIR), "--nodes", "3", "--base-port", str(BASE_PORT),
            "--raft-base-port", str(RAFT_BASE_PORT), "--kafka-base-port", str(KAFKA_BASE_PORT),
            *(["--tls"] if tls else []))  # fmt: skip

        step(f"2. Start four workers sharing topic {TOPIC} in group {GROUP!r}: static w1, w2; dynamic d1, d2")
        shown = " ".join(["--group demo --topic orders:8", *client_flags, "[--instance w1]"])
        print(f"$ python examples/worker.py {shown}   (x4)")
        workers = [Worker.sdk(name, static, client_flags) for name, static in WORKERS]
        generation = wait_settled(workers)
        print(f"-> every partition has exactly one owner, all in generation {generation}")

        step(f"3. Next to them, two unmodified Kafka consumers (confluent-kafka) in group {KAFKA_GROUP!r}")
        run("topics", "create", TOPIC.split(":")[0], "--partitions", TOPIC.split(":")[1], "--bootstrap", BOOTSTRAP,
            *client_flags)  # fmt: skip
        shown = " ".join([f"--bootstrap {KAFKA_BOOTSTRAP} --group {KAFKA_GROUP} --topic orders", *client_flags])
        print(f"$ python examples/kafka_consumer.py {shown}   (x2)")
        consumers = [Worker.kafka(name, client_flags) for name in KAFKA_CONSUMERS]
        workers += consumers
        wait_settled(consumers)
        print("-> librdkafka's consumers split the topic's partitions through the Kafka listener")

        step("4. Kill -9 the node that coordinates the workers' group")
        described = run(
            "groups", "describe", GROUP, "--json", "--bootstrap", BOOTSTRAP, *client_flags, show=False
        ).stdout
        node_id = json.loads(described)[0]["coordinator_node_id"]
        state = json.loads((CLUSTER_DIR / "state.json").read_text())
        pid = next(n["pid"] for n in state["nodes"] if n["node_id"] == node_id)
        print(f"$ kill -9 {pid}    # node {node_id}, coordinator of group {GROUP!r}")
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()

        step("5. Watch everyone for 10 s: they find the new coordinators and keep heartbeating")
        revoked_before = {w.name: w.revocations for w in workers}
        time.sleep(10)
        sdk_workers = workers[: len(WORKERS)]
        after = {w.name: w.generations[-1] for w in sdk_workers}
        if all(g == generation for g in after.values()) and all(w.assigned for w in sdk_workers):
            print(f"-> no rebalance: every worker still owns its partitions in generation {generation}")
        else:
            print(f"-> the group rebalanced during the failover: generations now {after}")
        if all(w.revocations == revoked_before[w.name] and w.assigned for w in consumers):
            print("-> the Kafka consumers kept their partitions too")
        else:
            print("-> the Kafka consumers' group rebalanced during the failover")
        print(f"   ({time.monotonic() - killed_at:.0f} s after the kill)")

        step("6. Describe both groups at their coordinators (SOFTWARE: what each client named)")
        run("groups", "describe", GROUP, KAFKA_GROUP, "--bootstrap", BOOTSTRAP, *client_flags)
        run("cluster", "status", "--dir", str(CLUSTER_DIR), check=False)
        return 0
    finally:
        step("7. Clean up: stop the workers, the consumers and the cluster")
        for w in workers:
            w.stop()
        run("cluster", "down", "--dir", str(CLUSTER_DIR), "--purge", check=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tls", action="store_true", help="the cluster serves TLS and requires client certificates")
    try:
        sys.exit(main(parser.parse_args().tls))
    except KeyboardInterrupt:
        sys.exit(130)
