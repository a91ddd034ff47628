"""Group → partition mapping, peers parsing and the stored partition count."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import pytest

from groupcoord.base.errors import StartupError, UserError
from groupcoord.node.balance import preferred_leader
from groupcoord.node.cluster import compaction_phase
from groupcoord.node.topology import (
    Peer,
    check_partition_count,
    format_peer,
    incarnation,
    parse_peers,
    partition_for,
    stable_hash,
)


def test_stable_hash_is_blake2b_and_never_changes():
    # Pinned values: changing the hash would move every group to another partition of an existing cluster.
    assert stable_hash("orders") == 15396940609477705549
    assert stable_hash("") == 16476032584258269876
    assert stable_hash("ünïcode") == int.from_bytes(hashlib.blake2b("ünïcode".encode(), digest_size=8).digest(), "big")
    assert [partition_for(g, 16) for g in ("orders", "group-0", "")] == [13, 8, 4]


def test_the_known_answers_in_the_architecture_doc_are_what_the_code_computes():
    doc = (Path(__file__).parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    table = doc.split("Known answers of the group-to-partition hash", 1)[1].split("\n\n")[1]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    assert len(rows) >= 5
    for group_cell, hash_cell, p4, p16 in rows:
        group = group_cell.strip().strip("`").replace("(empty)", "")
        assert f"{stable_hash(group):016x}" == hash_cell.strip().strip("`"), group
        assert (partition_for(group, 4), partition_for(group, 16)) == (int(p4), int(p16)), group


def test_groups_spread_over_partitions():
    counts = [0] * 16
    for i in range(16_000):
        counts[partition_for(f"group-{i}", 16)] += 1
    assert min(counts) > 800 and max(counts) < 1200


def test_parse_peers():
    assert parse_peers("1=127.0.0.1:50051:60051, 2=127.0.0.2:50051:60051") == [
        Peer(1, "127.0.0.1", 50051, 60051),
        Peer(2, "127.0.0.2", 50051, 60051),
    ]
    assert parse_peers("") == []
    assert Peer(3, "h", 1, 100).raft_address(5) == "h:105"


def test_a_peer_may_advertise_another_address_to_clients():
    [plain, published] = parse_peers("1=node1:50051:60051,2=node2:50051:60051@127.0.0.1:50052")
    assert (plain.client_host, plain.client_port) == ("node1", 50051)
    assert published == Peer(2, "node2", 50051, 60051, ("127.0.0.1", 50052))
    assert (published.client_host, published.client_port) == ("127.0.0.1", 50052)
    assert published.raft_address(1) == "node2:60052", "nodes keep talking to each other at host"


def test_a_peer_may_give_the_address_kafka_clients_are_told():
    """`@kafka=host:port`, after the gRPC client address or alone, in either order; round-trips through
    format_peer, which is what membership entries carry."""
    texts = [
        "1=node1:50051:25051@127.0.0.1:50051@kafka=127.0.0.1:9092",
        "2=node2:50051:25051@kafka=127.0.0.1:9093@127.0.0.1:50052",
        "3=node3:50051:25051@kafka=kafka-3.example:19092",
        "4=[::1]:50051:25051@kafka=[::1]:9092",
    ]
    one, two, three, four = parse_peers(",".join(texts))
    assert one == Peer(1, "node1", 50051, 25051, ("127.0.0.1", 50051), ("127.0.0.1", 9092))
    assert two == Peer(2, "node2", 50051, 25051, ("127.0.0.1", 50052), ("127.0.0.1", 9093))
    assert three == Peer(3, "node3", 50051, 25051, None, ("kafka-3.example", 19092))
    assert (three.client_host, three.client_port) == ("node3", 50051), "the gRPC address is unchanged"
    assert four.kafka == ("::1", 9092)
    for peer in (one, two, three, four):
        assert parse_peers(format_peer(peer)) == [peer]
    assert format_peer(two) == "2=node2:50051:25051@127.0.0.1:50052@kafka=127.0.0.1:9093"
    assert parse_peers("5=node5:50051:25051")[0].kafka is None


@pytest.mark.parametrize(
    "text",
    [
        "1=127.0.0.1:50051",
        "x=h:1:2",
        "1=h:0:2",
        "1=h:1:70000",
        "1=:1:2",
        "1=h:1:2,1=g:1:2",
        "1=h:1:2@",
        "1=h:1:2@g",
        "1=h:1:2@:5",
        "1=h:1:2@g:0",
        "1=h:1:2@g:x",
        "1=h:1:2@kafka=",
        "1=h:1:2@kafka=g",
        "1=h:1:2@kafka=:9092",
        "1=h:1:2@kafka=g:0",
        "1=h:1:2@kafka=g:70000",
        "1=h:1:2@kafka=g:1@kafka=g:2",
        "1=h:1:2@g:1@g:2",
        "1=h:1:2@grpc=g:1",
    ],
)
def test_bad_peers_are_user_errors(text):
    with pytest.raises(UserError):
        parse_peers(text)


def test_the_partition_count_is_fixed_when_the_cluster_is_created(tmp_path):
    check_partition_count(tmp_path, 16, [2, 1, 3])
    meta = json.loads((tmp_path / "cluster.json").read_text())
    assert len(meta.pop("incarnation")) == 32  # the data directory's own id, minted with it
    assert meta == {"version": 1, "partitions": 16, "node_ids": [1, 2, 3]}
    check_partition_count(tmp_path, 16, [1, 2, 3])
    with pytest.raises(StartupError, match="16 partitions"):
        check_partition_count(tmp_path, 8, [1, 2, 3])


def test_a_data_directory_keeps_its_incarnation_and_an_older_one_gets_one(tmp_path):
    check_partition_count(tmp_path, 4, [1])
    first = incarnation(tmp_path)
    assert incarnation(tmp_path) == first
    (tmp_path / "cluster.json").write_text('{"version": 1, "partitions": 4, "node_ids": [1]}')  # before incarnations
    minted = incarnation(tmp_path)
    assert len(minted) == 32 and minted != first and incarnation(tmp_path) == minted


def test_preferred_leaders_rotate_over_the_nodes_by_id():
    peers = [Peer(3, "c", 1, 1), Peer(1, "a", 1, 1), Peer(2, "b", 1, 1)]
    assert [preferred_leader(k, peers).node_id for k in range(5)] == [1, 2, 3, 1, 2]


def test_every_replica_of_the_cluster_has_its_own_compaction_slot():
    peers = [Peer(3, "c", 1, 1), Peer(1, "a", 1, 1), Peer(2, "b", 1, 1)]
    phases = {(k, p.node_id): compaction_phase(k, 16, peers, p.node_id) for k in range(16) for p in peers}
    ordered = sorted(phases.values())
    assert ordered[0] == 0.0 and ordered[-1] < 1.0
    assert all(b - a == pytest.approx(1 / 48) for a, b in itertools.pairwise(ordered))
    # a node's own replicas a sixteenth of a round apart
    own = sorted(phase for (_, node), phase in phases.items() if node == 2)
    assert all(b - a == pytest.approx(1 / 16) for a, b in itertools.pairwise(own))
