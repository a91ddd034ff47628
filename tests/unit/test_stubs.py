"""The checked-in gRPC stubs match the .proto, the service has every RPC of docs/PROTOCOL.md#the-api, and the error
codes are Kafka's."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupcoord.protocol import generate as gen
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

SPEC_RPCS = (
    "FindCoordinator",
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "LeaveGroup",
    "AddMembersToGroup",
    "OffsetCommit",
    "OffsetFetch",
    "DescribeGroups",
    "ListGroups",
    "DeleteGroups",
    "DescribeCluster",
)

# docs/PROTOCOL.md#error-codes, the group protocol's list, verbatim.
SPEC_ERRORS = {
    "NONE": 0,
    "UNKNOWN_SERVER_ERROR": -1,
    "OFFSET_METADATA_TOO_LARGE": 12,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16,
    "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24,
    "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27,
    "INVALID_REQUEST": 42,
    "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69,
    "MEMBER_ID_REQUIRED": 79,
    "GROUP_MAX_SIZE_REACHED": 81,
    "FENCED_INSTANCE_ID": 82,
    "UNSTABLE_OFFSET_COMMIT": 88,
}

# Codes the project uses beyond that list; each must still carry Kafka's own number for that name.
KAFKA_EXTRA_ERRORS = {
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "REQUEST_TIMED_OUT": 7,
    "INVALID_TOPIC_EXCEPTION": 17,
    "GROUP_AUTHORIZATION_FAILED": 30,
    "CLUSTER_AUTHORIZATION_FAILED": 31,
    "TOPIC_ALREADY_EXISTS": 36,
    "INVALID_PARTITIONS": 37,
    "POLICY_VIOLATION": 44,
    "GROUP_SUBSCRIBED_TO_TOPIC": 86,
    "THROTTLING_QUOTA_EXCEEDED": 89,
    "DUPLICATE_RESOURCE": 92,
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return gen.generate(tmp_path_factory.mktemp("stubs"))


def test_generate_produces_every_stub(generated: dict[str, bytes]):
    assert set(generated) == set(gen.GENERATED)
    assert all(generated.values())


@pytest.mark.parametrize("name", gen.GENERATED)
def test_checked_in_stub_equals_regenerated(generated: dict[str, bytes], name: str):
    checked_in = (gen.PROTO_DIR / name).read_bytes()
    assert checked_in == generated[name], (
        f"protocol/v1/{name} drifted from groupcoord.proto; run `python -m groupcoord.protocol.generate`"
    )


def test_stubs_are_the_installed_modules():
    """The modules the code imports are the checked-in files, not a stale copy somewhere else."""
    assert Path(pb.__file__).resolve() == (gen.PROTO_DIR / "groupcoord_pb2.py").resolve()
    assert Path(pb_grpc.__file__).resolve() == (gen.PROTO_DIR / "groupcoord_pb2_grpc.py").resolve()


def test_generation_is_reproducible(generated: dict[str, bytes], tmp_path: Path):
    assert gen.generate(tmp_path) == generated


def test_service_has_every_spec_rpc():
    assert pb.DESCRIPTOR.package == "groupcoord.v1"
    service = pb.DESCRIPTOR.services_by_name["GroupCoordinator"]
    assert service.full_name == "groupcoord.v1.GroupCoordinator"
    methods = {m.name: m for m in service.methods}
    assert set(SPEC_RPCS) <= set(methods), f"missing RPCs: {set(SPEC_RPCS) - set(methods)}"
    for name in SPEC_RPCS:
        method = methods[name]
        assert method.input_type.full_name == f"groupcoord.v1.{name}Request"
        assert method.output_type.full_name == f"groupcoord.v1.{name}Response"
        # Unary-unary, as in Kafka's request/response protocol.
        assert not method.client_streaming and not method.server_streaming


def test_grpc_stub_and_servicer_cover_every_rpc():
    for name in SPEC_RPCS:
        assert callable(getattr(pb_grpc.GroupCoordinatorServicer, name))
    assert callable(pb_grpc.add_GroupCoordinatorServicer_to_server)
    assert pb_grpc.GroupCoordinatorStub is not None


@pytest.mark.parametrize(("name", "number"), sorted(SPEC_ERRORS.items(), key=lambda kv: kv[1]))
def test_error_code_has_kafkas_number(name: str, number: int):
    assert Errors[name] == number
    assert Errors(number).name == name


def test_error_enum_is_spec_list_plus_known_kafka_codes():
    defined = {e.name: int(e.value) for e in Errors}
    assert {k: v for k, v in defined.items() if k in SPEC_ERRORS} == SPEC_ERRORS
    extras = {k: v for k, v in defined.items() if k not in SPEC_ERRORS}
    assert extras == KAFKA_EXTRA_ERRORS
    # No aliases: every number maps to exactly one name.
    assert len(set(defined.values())) == len(defined)
