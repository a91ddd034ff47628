"""TLS on the client port (issue 9): real node processes serving TLS, and mutual TLS; the SDK, Admin and the CLI
with a CA, a client certificate and a token; `groupcoord certs init`; bad TLS settings stopping the node in one
line."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from groupcoord import certs
from groupcoord.base.errors import UserError
from groupcoord.cli import build_parser
from groupcoord.client import GroupMember
from groupcoord.client.admin import Admin
from groupcoord.client.cli_flags import client_security
from groupcoord.client.errors import BootstrapUnreachable
from groupcoord.client.security import PLAINTEXT, ClientSecurity, SecurityError, aio_channel, sync_channel
from groupcoord.client.sync import SyncGroupMember
from groupcoord.node.auth import load_acl
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import NodeProcess, start_node, stop_node

FAST = ("--partitions=2",)
CONNECT_S = 2.0
# A client that cannot connect must say so within its connect timeout plus one retry round, never hang.
FAIL_WITHIN_S = 10.0
TOKEN = "s3cr3t-token-value"
KAFKA_TIMEOUT_S = 10.0
# A Kafka client the listener will not serve fails at once (connection closed, handshake failed), but librdkafka
# retries until list_topics' timeout: a short one for the refused cases.
KAFKA_REFUSED_S = 3.0


def groupcoord(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupcoord", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("GROUPCOORD_")}, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki") / "certs"
    certs.init(directory, 1, ["admin", "team-a"])
    return directory


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA with the same names: its certificates look right and must still be refused."""
    directory = tmp_path_factory.mktemp("pki") / "other"
    certs.init(directory, 1, ["admin"])
    return directory


def security(directory: Path, client: str | None = "admin", ca: Path | None = None, token: str = "") -> ClientSecurity:
    cert, key = certs.client_cert(directory, client) if client else ("", "")
    return ClientSecurity(str(ca or directory / certs.CA_FILE), str(cert), str(key), token)


def server_flags(directory: Path, mutual: bool) -> tuple[str, ...]:
    cert, key = certs.node_cert(directory, 1)
    flags = (f"--tls-cert-file={cert}", f"--tls-key-file={key}")
    if mutual:
        flags += (f"--tls-client-ca-file={directory / certs.CA_FILE}", "--tls-client-auth=require")
    return flags


@pytest.fixture(scope="module")
def tls_node(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    log = tmp_path_factory.mktemp("tls") / "node.log"
    proc = start_node(log, *FAST, *server_flags(pki, mutual=False), security=security(pki, client=None))
    try:
        yield proc
    finally:
        stop_node(proc)


@pytest.fixture(scope="module")
def mtls_node(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    log = tmp_path_factory.mktemp("mtls") / "node.log"
    proc = start_node(log, *FAST, *server_flags(pki, mutual=True), security=security(pki))
    try:
        yield proc
    finally:
        stop_node(proc)


async def describe_cluster(address: str, sec: ClientSecurity) -> int:
    async with Admin([address], deadline_s=CONNECT_S, connect_timeout_s=CONNECT_S, security=sec) as admin:
        return (await admin.describe_cluster()).answered_by


async def refused(address: str, sec: ClientSecurity) -> str:
    """The failure a client that may not connect gets: quickly, as BootstrapUnreachable."""
    started = time.monotonic()
    with pytest.raises(BootstrapUnreachable) as failed:
        await describe_cluster(address, sec)
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert "UNAVAILABLE" in failed.value.last_cause or "UNKNOWN" in failed.value.last_cause, failed.value.last_cause
    return failed.value.last_cause


# -- server TLS ---------------------------------------------------------------------------------------


async def test_a_plaintext_client_cannot_talk_to_a_tls_node(tls_node: NodeProcess):
    await refused(tls_node.address, PLAINTEXT)
    # Not even the health service answers in plaintext: the port speaks TLS only.
    async with grpc.aio.insecure_channel(tls_node.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=CONNECT_S)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_client_with_the_ca_joins_and_commits(tls_node: NodeProcess, pki: Path):
    sec = security(pki, client=None)
    assert await describe_cluster(tls_node.address, sec) == 1
    member = GroupMember([tls_node.address], "tls-sdk", {"orders": 2}, heartbeat_interval_ms=200, security=sec)
    await member.start()
    try:
        assignment = await member.wait_stable(20)
        assert sorted(assignment.partitions) == [("orders", 0), ("orders", 1)]
        assert await member.commit({("orders", 0): 7}) == {("orders", 0): Errors.NONE}
        assert (await member.committed())[("orders", 0)] == 7
    finally:
        await member.close()


async def test_a_client_trusting_another_ca_cannot_connect(tls_node: NodeProcess, pki: Path, other_pki: Path):
    detail = await refused(tls_node.address, security(pki, client=None, ca=other_pki / certs.CA_FILE))
    assert "CERTIFICATE_VERIFY_FAILED" in detail


def test_the_sync_member_takes_the_same_security(tls_node: NodeProcess, pki: Path):
    sec = security(pki, client=None)
    with SyncGroupMember([tls_node.address], "tls-sync", {"t": 1}, heartbeat_interval_ms=200, security=sec) as m:
        assert m.wait_stable(20).partitions == (("t", 0),)


# -- mutual TLS ---------------------------------------------------------------------------------------


async def test_mutual_tls_refuses_a_client_without_a_certificate(mtls_node: NodeProcess, pki: Path):
    await refused(mtls_node.address, security(pki, client=None))


async def test_mutual_tls_refuses_a_certificate_of_another_ca(mtls_node: NodeProcess, pki: Path, other_pki: Path):
    # The node's CA is trusted, but the client certificate (CN=admin, like the real one) is another CA's.
    cert, key = certs.client_cert(other_pki, "admin")
    await refused(mtls_node.address, ClientSecurity(str(pki / certs.CA_FILE), str(cert), str(key)))


async def test_mutual_tls_accepts_each_identity_of_the_ca(mtls_node: NodeProcess, pki: Path):
    for client in ("admin", "team-a"):
        assert await describe_cluster(mtls_node.address, security(pki, client)) == 1


def test_the_cli_takes_flags_and_environment(mtls_node: NodeProcess, pki: Path, tmp_path: Path):
    cert, key = certs.client_cert(pki, "admin")
    ca = pki / certs.CA_FILE
    flags = ("--ca-file", str(ca), "--cert-file", str(cert), "--key-file", str(key))
    listed = groupcoord("groups", "list", "--bootstrap", mtls_node.address, *flags)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("GROUP")
    env = {"GROUPCOORD_CA_FILE": str(ca), "GROUPCOORD_CERT_FILE": str(cert), "GROUPCOORD_KEY_FILE": str(key)}
    described = groupcoord("cluster", "describe", "--bootstrap", mtls_node.address, "--json", env=env)
    assert described.returncode == 0, described.stderr
    assert '"answered_by": 1' in described.stdout
    exported = groupcoord("events", "export", "--bootstrap", mtls_node.address, "--out", str(tmp_path), *flags)
    assert exported.returncode == 0, exported.stderr
    assert "events from 1 sources" in exported.stdout
    health = groupcoord("health", "--address", mtls_node.address, *flags)
    assert (health.returncode, health.stdout.strip()) == (0, f"{mtls_node.address}: SERVING")

    # Without a certificate: the cluster is unreachable (exit 3), in one line; the token never shows.
    denied = groupcoord("groups", "list", "--bootstrap", mtls_node.address, "--ca-file", str(ca), "--token", TOKEN)
    assert denied.returncode == 3
    assert "cannot reach the cluster" in denied.stderr
    assert "give --cert-file and --key-file" in denied.stderr
    assert "Traceback" not in denied.stderr
    assert TOKEN not in denied.stderr + denied.stdout
    plaintext = groupcoord("cluster", "describe", "--bootstrap", mtls_node.address, "--timeout", "2")
    assert plaintext.returncode == 3 and "if the nodes serve TLS, give --ca-file" in plaintext.stderr
    unhealthy = groupcoord("health", "--address", mtls_node.address, "--timeout", "1")
    assert (unhealthy.returncode, unhealthy.stdout.strip()) == (1, f"{mtls_node.address}: UNREACHABLE")


def test_flags_win_over_the_environment(pki: Path, tmp_path: Path):
    ca = str(pki / certs.CA_FILE)
    args = build_parser().parse_args(["groups", "list", "--token", "from-flag", "--ca-file", ca])
    sec = client_security(args, {"GROUPCOORD_TOKEN": "from-env", "GROUPCOORD_CA_FILE": "/nowhere.pem"})
    assert (sec.token, sec.ca_file, sec.cert_file) == ("from-flag", ca, "")
    assert "from-flag" not in repr(sec)
    bare = build_parser().parse_args(["groups", "list"])
    assert client_security(bare, {"GROUPCOORD_TOKEN": "from-env"}).token == "from-env"
    assert client_security(bare, {}) == PLAINTEXT

    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("hello")
    with pytest.raises(UserError, match=r"not PEM"):
        client_security(build_parser().parse_args(["groups", "list", "--ca-file", str(not_pem)]), {})
    with pytest.raises(UserError, match=r"needs its key|give both"):
        client_security(bare, {"GROUPCOORD_CA_FILE": ca, "GROUPCOORD_CERT_FILE": ca})
    with pytest.raises(UserError, match="printable ASCII") as spaced:
        client_security(build_parser().parse_args(["groups", "list", "--token", "two words"]), {})
    assert "two words" not in str(spaced.value)
    with pytest.raises(SecurityError, match="cannot read"):
        aio_channel("127.0.0.1:1", ClientSecurity(str(tmp_path / "missing.pem")))


# -- the bearer token ------------------------------------------------------------------------------------


class _Recorder(pb_grpc.GroupCoordinatorServicer):
    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    async def DescribeCluster(self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext):
        self.metadata.append(dict(context.invocation_metadata()))
        return pb.DescribeClusterResponse(node_id=9)

    async def ReadEvents(self, request: pb.ReadEventsRequest, context: grpc.aio.ServicerContext):
        self.metadata.append(dict(context.invocation_metadata()))
        yield pb.ReadEventsResponse(partition=0)

    def streams(self) -> grpc.GenericRpcHandler:
        """Raw-bytes streaming methods, so every call type of the channel is seen."""

        async def count(requests, context: grpc.aio.ServicerContext) -> bytes:
            self.metadata.append(dict(context.invocation_metadata()))
            return str(len([r async for r in requests])).encode()

        async def echo(requests, context: grpc.aio.ServicerContext):
            self.metadata.append(dict(context.invocation_metadata()))
            async for request in requests:
                yield request

        return grpc.method_handlers_generic_handler(
            "test.Streams",
            {"Count": grpc.stream_unary_rpc_method_handler(count), "Echo": grpc.stream_stream_rpc_method_handler(echo)},
        )


def sync_describe(address: str, sec: ClientSecurity) -> None:
    with sync_channel(address, sec) as channel:
        pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
async def test_the_token_goes_with_every_call_as_a_bearer_header(pki: Path, tls: bool):
    recorder = _Recorder()
    server = grpc.aio.server()
    pb_grpc.add_GroupCoordinatorServicer_to_server(recorder, server)
    server.add_generic_rpc_handlers((recorder.streams(),))
    if tls:
        cert, key = certs.node_cert(pki, 1)
        creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
        port = server.add_secure_port("127.0.0.1:0", creds)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        sec = security(pki, client=None, token=TOKEN) if tls else ClientSecurity(token=TOKEN)
        async with Admin([f"127.0.0.1:{port}"], security=sec) as admin:
            assert (await admin.describe_cluster()).answered_by == 9
            assert [r.partition async for r in admin.read_events(f"127.0.0.1:{port}")] == [0]
        await asyncio.to_thread(sync_describe, f"127.0.0.1:{port}", sec)  # the blocking channel (cluster status)
        async with aio_channel(f"127.0.0.1:{port}", sec) as channel:
            # Client-streaming and bidirectional calls (HeartbeatStream), the latter written to as the SDK does.
            assert await channel.stream_unary("/test.Streams/Count")(iter([b"a", b"b"]), timeout=5) == b"2"
            chat = channel.stream_stream("/test.Streams/Echo")(timeout=5)
            await chat.write(b"ping")
            await chat.done_writing()
            assert [reply async for reply in chat] == [b"ping"]
        assert [m.get("authorization") for m in recorder.metadata] == [f"Bearer {TOKEN}"] * 5
    finally:
        await server.stop(None)


async def test_no_token_sends_no_authorization_header(pki: Path):
    recorder = _Recorder()
    server = grpc.aio.server()
    pb_grpc.add_GroupCoordinatorServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with aio_channel(f"127.0.0.1:{port}") as channel:
            await pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
        assert "authorization" not in recorder.metadata[0]
    finally:
        await server.stop(None)


# -- certs init ----------------------------------------------------------------------------------------


def test_certs_init_writes_a_ca_node_and_client_certificates(tmp_path: Path):
    directory = tmp_path / "dev"
    made = groupcoord(
        "certs", "init", str(directory), "--nodes", "2", "--clients", "admin,team-a", "--hosts", "gc.example"
    )
    assert made.returncode == 0, made.stderr
    ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey) and ca.public_key().curve.name == "secp256r1"
    now = datetime.datetime.now(datetime.UTC)
    for node_id in (1, 2):
        cert = x509.load_pem_x509_certificate(certs.node_cert(directory, node_id)[0].read_bytes())
        cert.verify_directly_issued_by(ca)
        assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert ipaddress.ip_address(f"127.0.0.{node_id}") in sans.get_values_for_type(x509.IPAddress)
        assert {f"node{node_id}", "localhost", "gc.example"} <= set(sans.get_values_for_type(x509.DNSName))
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    for name in ("admin", "team-a"):
        cert_path, key_path = certs.client_cert(directory, name)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        assert ExtendedKeyUsageOID.CLIENT_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "ca-key.pem").stat().st_mode) == 0o600

    ca_before = (directory / "ca.pem").read_bytes()
    again = groupcoord("certs", "init", str(directory))
    assert again.returncode == 2
    assert "already holds a CA" in again.stderr and "--force" in again.stderr
    assert (directory / "ca.pem").read_bytes() == ca_before
    forced = groupcoord("certs", "init", str(directory), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (directory / "ca.pem").read_bytes() != ca_before

    bad = groupcoord("certs", "init", str(tmp_path / "x"), "--clients", "ca")
    assert bad.returncode == 2 and "client name 'ca'" in bad.stderr


def test_certs_init_for_a_deployment_keeps_the_ca_key_apart_writes_an_acl_and_runs_once(tmp_path: Path):
    """What the compose credentials service runs at every start: the first writes, later ones change nothing."""
    directory, ca_key = tmp_path / "credentials", tmp_path / "ca" / "ca-key.pem"
    argv = ("certs", "init", str(directory), "--if-missing", "--nodes=2", "--clients=admin",
            "--admins=admin,node-1,node-2", f"--ca-key-file={ca_key}")  # fmt: skip
    made = groupcoord(*argv)
    assert made.returncode == 0, made.stderr
    assert not (directory / "ca-key.pem").exists() and stat.S_IMODE(ca_key.stat().st_mode) == 0o600
    acl = load_acl(directory / "acl.toml")
    assert acl.admins == {"admin", "node-1", "node-2"} and not acl.rules and not acl.tokens
    written = {f.name: f.read_bytes() for f in directory.iterdir()}
    again = groupcoord(*argv)
    assert again.returncode == 0 and "nothing written" in again.stdout, again.stderr
    assert {f.name: f.read_bytes() for f in directory.iterdir()} == written

    issued = groupcoord("certs", "issue", str(directory), "team-a", f"--ca-key-file={ca_key}")
    assert issued.returncode == 0, issued.stderr
    ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate(certs.client_cert(directory, "team-a")[0].read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "team-a"
    twice = groupcoord("certs", "issue", str(directory), "team-a", f"--ca-key-file={ca_key}")
    assert twice.returncode == 2 and "issued once" in twice.stderr
    no_key = groupcoord("certs", "issue", str(directory), "team-b")
    assert no_key.returncode == 2 and "cannot read the CA" in no_key.stderr

    unknown = groupcoord("certs", "init", str(tmp_path / "y"), "--admins=bob")
    assert unknown.returncode == 2 and "bob is neither a --clients name nor node-1..node-3" in unknown.stderr


# -- bad TLS settings ------------------------------------------------------------------------------------


def node_fails(*flags: str) -> subprocess.CompletedProcess[str]:
    done = groupcoord("node", "--host=127.0.0.1", "--port=0", "--partitions=1", *flags)
    assert "Traceback" not in done.stderr, done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("groupcoord: error:")]) == 1
    return done


def test_bad_tls_settings_stop_the_node_with_one_line(pki: Path, other_pki: Path, tmp_path: Path):
    cert, key = certs.node_cert(pki, 1)
    ca = pki / certs.CA_FILE
    half = node_fails(f"--tls-cert-file={cert}")
    assert half.returncode == 2 and "tls_cert_file is set but tls_key_file is not" in half.stderr
    no_ca = node_fails(f"--tls-cert-file={cert}", f"--tls-key-file={key}", "--tls-client-auth=require")
    assert no_ca.returncode == 2 and "needs tls_client_ca_file" in no_ca.stderr
    ca_only = node_fails(f"--tls-cert-file={cert}", f"--tls-key-file={key}", f"--tls-client-ca-file={ca}")
    assert ca_only.returncode == 2 and "tls_client_auth is not `require`" in ca_only.stderr
    missing = node_fails(f"--tls-cert-file={tmp_path / 'none.pem'}", f"--tls-key-file={key}")
    assert missing.returncode == 1 and "cannot read it" in missing.stderr
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    bad_pem = node_fails(f"--tls-cert-file={garbage}", f"--tls-key-file={key}")
    assert bad_pem.returncode == 1 and "no PEM certificate" in bad_pem.stderr
    bad_key = node_fails(f"--tls-cert-file={cert}", f"--tls-key-file={cert}")
    assert bad_key.returncode == 1 and "not an unencrypted PEM private key" in bad_key.stderr
    other_key = certs.node_cert(other_pki, 1)[1]
    mismatch = node_fails(f"--tls-cert-file={cert}", f"--tls-key-file={other_key}")
    assert mismatch.returncode == 1 and "is not the key of the certificate" in mismatch.stderr
    bad_ca = node_fails(f"--tls-cert-file={cert}", f"--tls-key-file={key}", f"--tls-client-ca-file={garbage}",
                        "--tls-client-auth=require")  # fmt: skip
    assert bad_ca.returncode == 1 and "tls_client_ca_file" in bad_ca.stderr


# -- the Kafka listener over TLS -------------------------------------------------------------------------


def kafka_metadata(address: str, **config: str) -> ClusterMetadata:
    """A Kafka Metadata request through librdkafka; raises KafkaException when it gets no answer."""
    admin = AdminClient({"bootstrap.servers": address, "socket.timeout.ms": 5000, **config})
    return admin.list_topics(timeout=KAFKA_TIMEOUT_S)


def kafka_refused(address: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": address, "socket.timeout.ms": 5000, **config})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=KAFKA_REFUSED_S)


def start_kafka_node(log: Path, pki: Path, mutual: bool) -> tuple[NodeProcess, str]:
    """A TLS node with its Kafka listener on a port it picks; returns it and the listener's address."""
    sec = security(pki, client="admin" if mutual else None)
    node = start_node(log, *FAST, *server_flags(pki, mutual), "--kafka-port=0", security=sec)
    [started] = [e for e in node.events() if e.get("event") == "node.started"]
    assert started["tls"].startswith("on"), started
    return node, started["kafka_address"]


def ssl_config(ca: Path, client: tuple[Path, Path] | None = None) -> dict[str, str]:
    config = {"security.protocol": "SSL", "ssl.ca.location": str(ca)}
    if client is not None:
        config |= {"ssl.certificate.location": str(client[0]), "ssl.key.location": str(client[1])}
    return config


def test_a_tls_node_answers_kafka_metadata_over_tls_only(pki: Path, other_pki: Path, tmp_path: Path):
    """A TLS node serves its Kafka listener with the client port's certificate (Kafka's SSL); a plaintext Kafka
    client, or one trusting another CA, gets no answer from it."""
    node, kafka = start_kafka_node(tmp_path / "node.log", pki, mutual=False)
    try:
        host, port = kafka.rsplit(":", 1)
        metadata = kafka_metadata(kafka, **ssl_config(pki / certs.CA_FILE))
        assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [(1, host, int(port))]
        kafka_refused(kafka)  # PLAINTEXT, librdkafka's default
        kafka_refused(kafka, **ssl_config(other_pki / certs.CA_FILE))
    finally:
        assert stop_node(node) == 0


def test_with_mutual_tls_a_kafka_client_needs_a_certificate_of_the_ca(pki: Path, other_pki: Path, tmp_path: Path):
    node, kafka = start_kafka_node(tmp_path / "node.log", pki, mutual=True)
    try:
        ca = pki / certs.CA_FILE
        metadata = kafka_metadata(kafka, **ssl_config(ca, certs.client_cert(pki, "team-a")))
        assert [b.id for b in metadata.brokers.values()] == [1]
        kafka_refused(kafka, **ssl_config(ca))
        kafka_refused(kafka, **ssl_config(ca, certs.client_cert(other_pki, "admin")))
    finally:
        assert stop_node(node) == 0


async def test_a_stuck_handshake_does_not_hang_the_client(pki: Path):
    """A port that accepts and never answers (not a gRPC server at all) fails the call by its deadline."""
    held: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda reader, writer: held.append(writer), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(BootstrapUnreachable):
            await describe_cluster(f"127.0.0.1:{port}", security(pki, client=None))
    finally:
        server.close()
    assert held, "the client did connect"
    assert time.monotonic() - started < FAIL_WITHIN_S
