"""Topics another node leads, created and deleted through any node of a cluster with mutual TLS, SASL and an ACL:
the node serves its own topics and hands the others on to their leaders over TLS with its own certificate, for the
same caller (node/handon.py, node/forwarding.py), whom the leader judges by the same ACL. A header forged without
the cluster's key is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from groupcoord import certs
from groupcoord.client.security import ClientSecurity, aio_channel
from groupcoord.node.auth import Caller
from groupcoord.node.forwarding import CallerForwarding
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.cluster.test_three_nodes import PARTITIONS, SECRET, Cluster
from tests.e2e.test_tls import server_flags
from tests.kafka.conftest import common_port
from tests.kafka.test_kafka_security import PASSWORDS, TOKEN_OPS, _acl

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int, Path]]:
    root = tmp_path_factory.mktemp("kafka-handon")
    pki = root / "pki"
    # One node certificate valid for every node's address, so one set of flags serves the three nodes.
    certs.init(pki, 1, ["admin"], HOSTS[1:])
    (root / "acl.toml").write_text(_acl())
    port = common_port(HOSTS)
    admin_cert, admin_key = certs.client_cert(pki, "admin")
    cluster = Cluster(
        root,
        f"--kafka-port={port}",
        f"--acl-file={root / 'acl.toml'}",
        "--kafka-sasl-mechanisms=PLAIN,SCRAM-SHA-256",
        *server_flags(pki, mutual=True),
        security=ClientSecurity(str(pki / certs.CA_FILE), str(admin_cert), str(admin_key), TOKEN_OPS),
    )
    try:
        yield cluster, port, pki
    finally:
        cluster.stop_all()


def _client(port: int, pki: Path, mechanism: str, user: str, password: str) -> dict[str, str]:
    """A librdkafka client of node 1 only: TLS with the admin certificate (the nodes require one), then SASL."""
    cert, key = certs.client_cert(pki, "admin")
    return {
        "bootstrap.servers": f"{HOSTS[0]}:{port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki / certs.CA_FILE),
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _led_by(node_id: int, prefix: str) -> str:
    """A topic name whose coordinator partition node `node_id` leads (partition k: node k % 3 + 1)."""
    return next(
        name for name in (f"{prefix}-{i}" for i in range(1000)) if partition_for(name, PARTITIONS) % 3 + 1 == node_id
    )


def _codes(futures: dict) -> dict[str, int]:
    codes = {}
    for name, future in futures.items():
        error = future.exception(30)
        codes[name] = 0 if error is None else error.args[0].code()
    return codes


def test_an_admin_creates_and_deletes_topics_every_node_leads_through_one_node(secure_cluster):
    _, port, pki = secure_cluster
    names = [_led_by(node_id, "handon") for node_id in (1, 2, 3)]
    ops = AdminClient(_client(port, pki, "PLAIN", "ops", TOKEN_OPS))
    created = ops.create_topics([NewTopic(name, num_partitions=3) for name in names], operation_timeout=10)
    assert _codes(created) == dict.fromkeys(names, 0)
    for node in range(3):
        at_node = {**_client(port, pki, "PLAIN", "ops", TOKEN_OPS), "bootstrap.servers": f"{HOSTS[node]}:{port}"}
        listed = AdminClient(at_node)
        deadline = time.monotonic() + 10
        while not set(names) <= set(listed.list_topics(timeout=10).topics):
            assert time.monotonic() < deadline, f"node {node + 1} does not list {names}"
            time.sleep(0.1)
    assert {name: len(listed.list_topics(timeout=10).topics[name].partitions) for name in names} == dict.fromkeys(
        names, 3
    )
    assert _codes(ops.delete_topics(names, operation_timeout=10)) == dict.fromkeys(names, 0)


def test_a_caller_who_may_not_create_topics_is_refused_by_every_node(secure_cluster):
    _, port, pki = secure_cluster
    names = [_led_by(node_id, "refused") for node_id in (1, 2, 3)]
    alice = AdminClient(_client(port, pki, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]))
    assert _codes(alice.create_topics([NewTopic(n, num_partitions=1) for n in names])) == dict.fromkeys(
        names, KafkaError.TOPIC_AUTHORIZATION_FAILED
    )


def test_auto_creation_creates_a_topic_led_elsewhere_for_an_admin_only(secure_cluster):
    _, port, pki = secure_cluster
    topic = _led_by(3, "auto")
    as_alice = Consumer(
        {**_client(port, pki, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]), "group.id": "alice.auto",
         "allow.auto.create.topics": True}
    )  # fmt: skip
    try:
        as_alice.list_topics(topic, timeout=10)
    finally:
        as_alice.close()
    ops = AdminClient(_client(port, pki, "PLAIN", "ops", TOKEN_OPS))
    assert topic not in ops.list_topics(timeout=10).topics
    as_ops = Consumer(
        {**_client(port, pki, "PLAIN", "ops", TOKEN_OPS), "group.id": "ops.auto", "allow.auto.create.topics": True}
    )
    try:
        deadline = time.monotonic() + 15
        while as_ops.list_topics(topic, timeout=10).topics[topic].error is not None:
            assert time.monotonic() < deadline, "the topic was not auto-created"
            time.sleep(0.2)
    finally:
        as_ops.close()


@pytest.mark.parametrize(("secret", "created"), [("not-the-cluster-secret", False), (SECRET, True)])
def test_a_forwarded_caller_header_counts_only_when_signed_with_the_cluster_key(secure_cluster, secret, created):
    """A client with the admin certificate but no admin token, claiming to be ops through the header."""
    cluster, _, pki = secure_cluster
    cert, key = certs.client_cert(pki, "admin")
    topic = _led_by(2, f"forged-{created}")

    async def create() -> pb.CreateTopicsResponse:
        header = CallerForwarding(secret).header(Caller("ops", "token"), time.time())
        async with aio_channel(cluster.address(1), ClientSecurity(str(pki / certs.CA_FILE), str(cert), str(key))) as ch:
            return await pb_grpc.GroupCoordinatorStub(ch).CreateTopics(
                pb.CreateTopicsRequest(topics=[pb.CreateTopicsRequest.Topic(name=topic, num_partitions=1)]),
                metadata=(header,),
                timeout=10,
            )

    reply = asyncio.run(create())
    if created:
        assert (reply.error_code, [r.error_code for r in reply.results]) == (Errors.NONE, [Errors.NONE])
    else:
        assert reply.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        assert "not signed with this cluster's key" in reply.error_message
