"""The Kafka listener with TLS and SASL, against librdkafka (confluent-kafka): SCRAM-SHA-256, SCRAM-SHA-512 and
PLAIN over TLS authenticate to the identities of the ACL file, which then judges every request as it judges a
gRPC call; a denied group reaches the client as GROUP_AUTHORIZATION_FAILED (30); a wrong password, or no SASL at
all, gets no further than authentication."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupcoord import certs
from groupcoord.client.security import ClientSecurity
from groupcoord.node.auth import hash_token
from groupcoord.node.kafka.sasl import scram_credential
from tests.e2e.support import NodeProcess, start_node, stop_node
from tests.e2e.test_tls import server_flags

PASSWORDS = {"alice": "alice-pw-0", "bob": "bob-pw-1"}
TOKEN_A, TOKEN_OPS = "tok-team-a-5ca1ab1e", "tok-ops-0ddba11"
TOPIC = "secure-orders"


def _acl() -> str:
    scram = ""
    for identity, mechanism in (("alice", "SCRAM-SHA-256"), ("bob", "SCRAM-SHA-512")):
        c = scram_credential(identity, mechanism, PASSWORDS[identity], 4096)
        encoded = {k: base64.b64encode(getattr(c, k)).decode() for k in ("salt", "stored_key", "server_key")}
        scram += (
            f'[[scram]]\nidentity = "{identity}"\nmechanism = "{mechanism}"\nsalt = "{encoded["salt"]}"\n'
            f'stored_key = "{encoded["stored_key"]}"\nserver_key = "{encoded["server_key"]}"\niterations = 4096\n\n'
        )
    tokens = "".join(
        f'[[tokens]]\nidentity = "{who}"\nsha256 = "{hash_token(t)}"\n\n'
        for who, t in (("team-a", TOKEN_A), ("ops", TOKEN_OPS))
    )
    rules = "".join(
        f'[[acl]]\nidentity = "{who}"\ngroup_prefixes = ["{who}."]\noperations = ["member", "describe"]\n\n'
        for who in ("alice", "bob", "team-a")
    )
    return f'admins = ["ops"]\n\n{tokens}{scram}{rules}'


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, str, Path]]:
    root = tmp_path_factory.mktemp("kafka-secure")
    pki = root / "pki"
    certs.init(pki, 1, ["admin"])
    (root / "acl.toml").write_text(_acl())
    proc = start_node(
        root / "node.log",
        "--partitions=2",
        "--kafka-port=0",
        f"--acl-file={root / 'acl.toml'}",
        "--kafka-sasl-mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        *server_flags(pki, mutual=False),
        security=ClientSecurity(str(pki / certs.CA_FILE), "", "", TOKEN_OPS),
    )
    try:
        started = next(e for e in proc.events() if e.get("event") == "node.started")
        bootstrap = f"127.0.0.1:{started['kafka_address'].rsplit(':', 1)[1]}"
        admin = AdminClient(_sasl(bootstrap, pki, "PLAIN", "ops", TOKEN_OPS))
        admin.create_topics([NewTopic(TOPIC, num_partitions=4)])[TOPIC].result(15)
        yield proc, bootstrap, pki
    finally:
        stop_node(proc)


def _sasl(bootstrap: str, pki: Path, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki / certs.CA_FILE),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _join_and_commit(config: dict[str, str], group: str) -> list[int]:
    """A consumer in `group`: its partitions once assigned, after a commit read back; or raises the group error."""
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            message = consumer.poll(0.1)
            if message is not None and message.error() is not None and message.error().code() > 0:
                raise KafkaException(message.error())
        owned = sorted(tp.partition for tp in consumer.assignment())
        consumer.commit(offsets=[TopicPartition(TOPIC, p, 10 + p) for p in owned], asynchronous=False)
        read = consumer.committed([TopicPartition(TOPIC, p) for p in owned], timeout=10)
        assert [tp.offset for tp in read] == [10 + p for p in owned]
        return owned
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-256", "alice", PASSWORDS["alice"]),
        ("SCRAM-SHA-512", "bob", PASSWORDS["bob"]),
        ("PLAIN", "team-a", TOKEN_A),
    ],
)
def test_each_mechanism_authenticates_and_the_acl_lets_the_identity_use_its_groups(secure, mechanism, user, password):
    proc, bootstrap, pki = secure
    assert _join_and_commit(_sasl(bootstrap, pki, mechanism, user, password), f"{user}.workers") == [0, 1, 2, 3]
    authenticated = [e for e in proc.events() if e.get("event") == "kafka.authentication_failed"]
    assert not [e for e in authenticated if user in str(e)], authenticated


def test_a_group_the_acl_does_not_grant_is_group_authorization_failed(secure):
    _, bootstrap, pki = secure
    with pytest.raises(KafkaException) as refused:
        _join_and_commit(_sasl(bootstrap, pki, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]), "bob.workers")
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-256", "alice", "wrong"),
        ("SCRAM-SHA-512", "alice", PASSWORDS["alice"]),  # alice has a SHA-256 credential only
        ("SCRAM-SHA-256", "mallory", "anything"),
        ("PLAIN", "alice", TOKEN_A),  # team-a's token, another user name
    ],
)
def test_wrong_credentials_get_no_further_than_authentication(secure, mechanism, user, password):
    proc, bootstrap, pki = secure
    before = sum(1 for e in proc.events() if e.get("event") == "kafka.authentication_failed")
    admin = AdminClient(_sasl(bootstrap, pki, mechanism, user, password))
    with pytest.raises(KafkaException) as failed:
        admin.list_topics(timeout=2)
    assert failed.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT), failed.value
    deadline = time.monotonic() + 5
    while sum(1 for e in proc.events() if e.get("event") == "kafka.authentication_failed") == before:
        assert time.monotonic() < deadline, "no kafka.authentication_failed line"
        time.sleep(0.05)


def test_a_client_without_sasl_or_without_tls_is_not_served(secure):
    proc, bootstrap, pki = secure
    before = sum(1 for e in proc.events() if e.get("event") == "kafka.unauthenticated_request")
    tls_only = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki / certs.CA_FILE)}
    with pytest.raises(KafkaException):
        AdminClient(tls_only).list_topics(timeout=3)
    deadline = time.monotonic() + 5
    while sum(1 for e in proc.events() if e.get("event") == "kafka.unauthenticated_request") == before:
        assert time.monotonic() < deadline, "no kafka.unauthenticated_request line"
        time.sleep(0.05)
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=3)
