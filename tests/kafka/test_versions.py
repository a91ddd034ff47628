"""Versions no client of the test suite sends, spoken through kio on a real node: every advertised version of
ApiVersions, CreateTopics and DeleteTopics, OffsetCommit and OffsetFetch v10 (topics by id), ListGroups v5 (types
filter), DescribeGroups v6 (an unknown group is an error). An advertised version is a version something has
exercised."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from groupcoord.protocol.kafka.codec import APIS
from tests.e2e.support import NodeProcess
from tests.kafka.wire import ResponseHeaderV0, call, connect, kafka_node, read, request, response

NO_ID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, int]]:
    yield from kafka_node(tmp_path_factory)


@pytest.mark.parametrize("version", range(APIS[18][1], APIS[18][2] + 1))
def test_api_versions_at_every_advertised_version(node, version: int) -> None:
    """Always a v0 response header; from v3 the request names the client software (v4 only lifts a rule about
    feature versions, which groupcoord does not advertise)."""
    _, port = node
    software = {"client_software_name": "test", "client_software_version": "1"} if version >= 3 else {}
    with connect(port) as sock:
        sock.sendall(request(18, version, 7, **software))
        correlation, body = response(read(sock), 18, version, ResponseHeaderV0)
    assert (correlation, body.error_code) == (7, ErrorCode.none)
    assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == {
        (key, lo, hi) for key, (_, lo, hi) in APIS.items()
    }


def _create(port: int, version: int, *topics: tuple[str, int], validate_only: bool = False) -> Any:
    asked = [
        {"name": name, "num_partitions": partitions, "replication_factor": -1, "assignments": [], "configs": []}
        for name, partitions in topics
    ]
    return call(port, 19, version, topics=asked, timeout=5000, validate_only=validate_only)


@pytest.mark.parametrize("version", range(APIS[19][1], APIS[19][2] + 1))
def test_create_topics_at_every_advertised_version(node, version: int) -> None:
    _, port = node
    name = f"created-v{version}"
    body = _create(port, version, (name, 3), ("bad/name", 1), (f"{name}-checked", 2), validate_only=False)
    made, bad, checked = body.topics
    assert (made.name, made.error_code) == (name, ErrorCode.none)
    assert (bad.error_code, checked.error_code) == (ErrorCode.invalid_topic_exception, ErrorCode.none)
    if version >= 5:
        assert (made.num_partitions, made.replication_factor) == (3, 1)
    if version >= 7:
        assert made.topic_id != NO_ID
    again = _create(port, version, (name, 3)).topics[0]
    assert again.error_code == ErrorCode.topic_already_exists
    assert again.error_message
    dry = _create(port, version, (f"{name}-dry", 1), validate_only=True).topics[0]
    assert dry.error_code == ErrorCode.none
    listed = call(port, 3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    names = {t.name for t in listed.topics}
    assert {name, f"{name}-checked"} <= names and f"{name}-dry" not in names


@pytest.mark.parametrize("version", range(APIS[20][1], APIS[20][2] + 1))
def test_delete_topics_at_every_advertised_version(node, version: int) -> None:
    _, port = node
    name = f"deleted-v{version}"
    created = _create(port, 7, (name, 1)).topics[0]
    assert created.error_code == ErrorCode.none
    if version >= 6:
        # From v6 a topic may be named by its id alone.
        body = call(port, 20, version, topics=[{"name": None, "topic_id": created.topic_id}], timeout=5000)
    else:
        body = call(port, 20, version, topic_names=[name], timeout=5000)
    (result,) = body.responses
    assert (result.name, result.error_code) == (name, ErrorCode.none)
    if version >= 6:
        assert result.topic_id == created.topic_id
    gone = call(port, 20, min(version, 5), topic_names=[name], timeout=5000).responses[0]
    assert gone.error_code == ErrorCode.unknown_topic_or_partition


def test_offsets_by_topic_id_commit_and_fetch_v10(node) -> None:
    _, port = node
    topic = _create(port, 7, ("by-id", 2)).topics[0]
    unknown = uuid.uuid4()
    commit = call(
        port, 8, 10, group_id="g-v10", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[
            {"topic_id": topic.topic_id, "partitions": [
                {"partition_index": 1, "committed_offset": 42, "committed_leader_epoch": -1, "committed_metadata": "m"},
            ]},
            {"topic_id": unknown, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""},
            ]},
        ],
    )  # fmt: skip
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in commit.topics] == [
        (topic.topic_id, [ErrorCode.none]),
        (unknown, [ErrorCode.unknown_topic_id]),
    ]
    asked = [{"topic_id": topic.topic_id, "partition_indexes": [0, 1]}, {"topic_id": unknown, "partition_indexes": [0]}]
    fetched = call(
        port, 9, 10, require_stable=False,
        groups=[{"group_id": "g-v10", "member_id": None, "member_epoch": -1, "topics": asked}],
    )  # fmt: skip
    (group,) = fetched.groups
    assert group.error_code == ErrorCode.none
    by_id = {
        t.topic_id: [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions] for t in group.topics
    }
    assert by_id == {
        topic.topic_id: [(0, -1, ErrorCode.none), (1, 42, ErrorCode.none)],
        unknown: [(0, -1, ErrorCode.unknown_topic_id)],
    }
    every = call(
        port, 9, 10, require_stable=False,
        groups=[{"group_id": "g-v10", "member_id": None, "member_epoch": -1, "topics": None}],
    )  # fmt: skip
    assert [(t.topic_id, [p.committed_offset for p in t.partitions]) for t in every.groups[0].topics] == [
        (topic.topic_id, [42])
    ]


def test_list_groups_v5_filters_by_type_and_describe_groups_v6_reports_an_unknown_group(node) -> None:
    _, port = node
    committed = call(
        port, 8, 9, group_id="g-listed", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[{"name": "any", "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""},
        ]}],
    )  # fmt: skip
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    classic = call(port, 16, 5, states_filter=[], types_filter=["classic"])
    assert ("g-listed", "classic", "Empty") in {(g.group_id, g.group_type, g.group_state) for g in classic.groups}
    assert call(port, 16, 5, states_filter=[], types_filter=["consumer"]).groups == ()
    described = call(port, 15, 6, groups=["no-such-group", "g-listed"], include_authorized_operations=False)
    missing, listed = described.groups
    assert (missing.error_code, missing.group_state) == (ErrorCode.group_id_not_found, "Dead")
    assert missing.error_message
    assert (listed.error_code, listed.group_state) == (ErrorCode.none, "Empty")
    old = call(port, 15, 5, groups=["no-such-group"], include_authorized_operations=False).groups[0]
    assert (old.error_code, old.group_state) == (ErrorCode.none, "Dead")


def test_offset_delete_v0_deletes_an_empty_groups_offsets_and_reports_a_missing_group(node) -> None:
    _, port = node
    committed = call(
        port, 8, 9, group_id="g-del", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[{"name": "any", "partitions": [
            {"partition_index": p, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""}
            for p in (0, 1)
        ]}],
    )  # fmt: skip
    assert [p.error_code for p in committed.topics[0].partitions] == [ErrorCode.none] * 2
    deleted = call(port, 47, 0, group_id="g-del", topics=[{"name": "any", "partitions": [{"partition_index": 0}]}])
    assert deleted.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for p in deleted.topics[0].partitions] == [(0, ErrorCode.none)]
    left = call(port, 9, 7, group_id="g-del", topics=None, require_stable=False)
    assert [(p.partition_index, p.committed_offset) for t in left.topics for p in t.partitions] == [(1, 5)]
    missing = call(port, 47, 0, group_id="g-none", topics=[{"name": "any", "partitions": [{"partition_index": 0}]}])
    assert (missing.error_code, missing.topics) == (ErrorCode.group_id_not_found, ())
