"""Where the Kafka listener listens and what clients are told: the kafka_port default (TLS nodes included), the
SASL mechanisms setting, and each node's advertised address (`kafka_advertised_*`, a peer's `@kafka=` address, the
common-port fallback)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from groupcoord.node import config as node_config
from groupcoord.node.kafka.apis import KafkaApis
from groupcoord.node.topology import Peer, parse_peers


def settings(*flags: str, environ: dict[str, str] | None = None) -> node_config.NodeSettings:
    parser = argparse.ArgumentParser()
    node_config.add_arguments(parser)
    return node_config.load(parser.parse_args(list(flags)), environ or {})


def tls_flags(tmp_path: Path) -> list[str]:
    """Paths only: the files are read when the node starts, not when its settings load."""
    return [f"--tls-cert-file={tmp_path / 'node.pem'}", f"--tls-key-file={tmp_path / 'node-key.pem'}"]


def test_the_kafka_listener_is_on_by_default_at_kafkas_port():
    assert settings().kafka_port == 9092
    assert settings("--kafka-port=-1").kafka_port == -1
    assert settings(environ={"GROUPCOORD_KAFKA_PORT": "19092"}).kafka_port == 19092


@pytest.mark.parametrize(
    ("flags", "environ", "file_text", "port"),
    [
        ([], {}, None, 9092),  # the default: a TLS node serves Kafka over TLS like any other
        (["--kafka-port=0"], {}, None, 0),
        ([], {"GROUPCOORD_KAFKA_PORT": "19092"}, None, 19092),
        ([], {}, "kafka_port = 29092\n", 29092),
        (["--kafka-port=-1"], {}, None, -1),
    ],
    ids=["default", "flag", "environment", "file", "off"],
)
def test_a_tls_node_keeps_its_kafka_port(tmp_path: Path, flags, environ, file_text, port):
    if file_text is not None:
        (tmp_path / "node.toml").write_text(file_text)
        flags = ["--config", str(tmp_path / "node.toml"), *flags]
    loaded = settings(*tls_flags(tmp_path), *flags, environ=environ)
    assert (loaded.tls_cert_file, loaded.kafka_port) == (str(tmp_path / "node.pem"), port)


def acl_file(tmp_path: Path) -> str:
    path = tmp_path / "acl.toml"
    path.write_text('admins = ["ops"]\n')
    return str(path)


def test_sasl_mechanisms_are_read_with_an_acl_file(tmp_path: Path):
    assert settings().kafka_sasl_mechanisms == ()
    loaded = settings(f"--acl-file={acl_file(tmp_path)}", "--kafka-sasl-mechanisms= PLAIN, SCRAM-SHA-512 ")
    assert loaded.kafka_sasl_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    from_env = settings(
        *tls_flags(tmp_path),
        environ={"GROUPCOORD_ACL_FILE": acl_file(tmp_path), "GROUPCOORD_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-256"},
    )
    assert (from_env.kafka_port, from_env.kafka_sasl_mechanisms) == (9092, ("SCRAM-SHA-256",))


def test_sasl_mechanisms_without_an_acl_file_are_refused(tmp_path: Path):
    with pytest.raises(node_config.ConfigError, match="kafka_sasl_mechanisms needs acl_file"):
        settings("--kafka-sasl-mechanisms=PLAIN")
    with pytest.raises(node_config.ConfigError, match="kafka_sasl_mechanisms needs acl_file"):
        settings(*tls_flags(tmp_path), environ={"GROUPCOORD_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-256"})


@pytest.mark.parametrize("mechanisms", ["GSSAPI", "OAUTHBEARER", "PLAIN,SCRAM-SHA-1"])
def test_an_unknown_sasl_mechanism_is_refused(tmp_path: Path, mechanisms: str):
    flags = (f"--kafka-sasl-mechanisms={mechanisms}", f"--acl-file={acl_file(tmp_path)}")
    with pytest.raises(node_config.ConfigError, match="kafka_sasl_mechanisms: unknown"):
        settings(*flags)


def apis(peers_text: str, node_id: int) -> KafkaApis:
    """Only the cluster matters to the addresses; the rest of the request layer is never called."""
    peers = parse_peers(peers_text)
    me = next(p for p in peers if p.node_id == node_id)
    cluster: Any = SimpleNamespace(node_id=node_id, me=me, peers=peers)
    return KafkaApis(SimpleNamespace(), cluster, SimpleNamespace(), SimpleNamespace(), 5000)  # type: ignore[arg-type]


def brokers(kafka: KafkaApis) -> list[tuple[int, str, int]]:
    return [(b["node_id"], b["host"], b["port"]) for b in kafka._brokers()]


COMMON = "1=127.0.0.1:50051:25051,2=127.0.0.2:50051:25051,3=127.0.0.3:50051:25051"


def test_nodes_on_one_common_port_are_told_at_their_client_hosts():
    """No `@kafka=` anywhere: today's rule, each node's client host with this node's Kafka port."""
    kafka = apis(COMMON, 2)
    kafka.advertise(19092)
    assert brokers(kafka) == [(1, "127.0.0.1", 19092), (2, "127.0.0.2", 19092), (3, "127.0.0.3", 19092)]
    published = apis(COMMON.replace("127.0.0.3:50051:25051", "node3:50051:25051@10.0.0.3:60051"), 1)
    published.advertise(9092)
    assert published.broker(Peer(3, "node3", 50051, 25051, ("10.0.0.3", 60051))) == ("10.0.0.3", 9092)


def test_advertised_settings_decide_this_nodes_address():
    kafka = apis(COMMON, 1)
    kafka.advertise(9092, "kafka-1.example", 29092)
    assert brokers(kafka)[0] == (1, "kafka-1.example", 29092)
    assert brokers(kafka)[1] == (2, "127.0.0.2", 29092), "others: their client host, this node's advertised port"
    host_only = apis(COMMON, 1)
    host_only.advertise(9092, "kafka-1.example")
    assert brokers(host_only)[0] == (1, "kafka-1.example", 9092)


PUBLISHED = (
    "1=node1:50051:25051@127.0.0.1:50051@kafka=127.0.0.1:9092,"
    "2=node2:50051:25051@127.0.0.1:50052@kafka=127.0.0.1:9093,"
    "3=node3:50051:25051@127.0.0.1:50053"
)


def test_a_peers_kafka_address_is_what_every_node_tells_clients():
    """Ports published at different host ports (compose): each node's `@kafka=` address, its own included, and the
    fallback for a node without one."""
    for node_id in (1, 2):
        kafka = apis(PUBLISHED, node_id)
        kafka.advertise(9092)  # the port the listener bound inside its container
        assert brokers(kafka)[:2] == [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 9093)], node_id
        # Node 3 has no `@kafka=`: each node names it with its own advertised port, which is why compose files
        # give every node one.
        assert brokers(kafka)[2] == (3, "127.0.0.1", 9092 if node_id == 1 else 9093)
    overridden = apis(PUBLISHED, 2)
    overridden.advertise(9092, port=39093)  # kafka_advertised_port beats the peers entry
    assert brokers(overridden)[:2] == [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 39093)]
