"""The two published wheels (packaging/): `groupcoord-client` holds the SDK and installs alone into an empty venv,
where it runs a member against a real 3-node cluster with no server module or dependency; `groupcoord` (the server)
holds the rest; no file is in both and none of the tree is in neither; versions and dependencies agree with the
development install (pyproject.toml) and the exact pins (constraints.txt)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest

from groupcoord.client.admin import Admin
from tests.cluster.test_three_nodes import Cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)

# What an empty venv may hold after installing the client wheel: it, its three dependencies, grpcio's own
# (typing-extensions), and what `python -m venv` put there.
CLIENT_DISTS = {"groupcoord-client", "grpcio", "protobuf", "msgpack", "typing-extensions", "pip", "setuptools"}
# Modules of the server and of its dependencies, none of which may be importable with the client alone.
SERVER_MODULES = (
    "groupcoord.node", "groupcoord.raft", "groupcoord.coordinator", "groupcoord.chaos", "groupcoord.pipeline",
    "groupcoord.bench", "groupcoord.cli", "groupcoord.protocol.kafka",
    "groupcoord.protocol.records", "pysyncobj", "uvloop", "kio", "grpc_health", "prometheus_client", "cryptography",
)  # fmt: skip


def pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    for dist in ("client", "server"):
        built = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT / "packaging" / dist)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert built.returncode == 0, built.stdout + built.stderr
    (client,) = out.glob("groupcoord_client-*.whl")
    (server,) = out.glob("groupcoord-*.whl")
    return {"client": client, "server": server}


def files(wheel: Path) -> set[str]:
    return {n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}


def metadata(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(z.read(name).decode())
    return {key: message.get_all(key) or [] for key in set(message.keys())}


def tree_files() -> set[str]:
    """Every file the development install maps into the `groupcoord` package (pyproject.toml's package-dir)."""
    setuptools = pyproject(ROOT / "pyproject.toml")["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    found = set()
    for package in setuptools["packages"]:
        parts = package.split(".")
        mapped = next(i for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in package_dir)
        folder = ROOT / package_dir[".".join(parts[:mapped])] / Path(*parts[mapped:])
        found |= {"/".join([*parts, p.name]) for p in folder.iterdir() if p.is_file() and p.suffix != ".pyc"}
    return found


def test_no_file_is_in_both_wheels_and_none_of_the_tree_is_in_neither(wheels):
    client, server = files(wheels["client"]), files(wheels["server"])
    assert not client & server
    assert client | server == tree_files()
    assert {"groupcoord/py.typed", "groupcoord/client/member.py", "groupcoord/protocol/v1/groupcoord_pb2.py"} <= client
    assert not any(name.startswith(("groupcoord/node/", "groupcoord/raft/", "groupcoord/cli.py")) for name in client)


def test_the_client_wheel_takes_ranges_and_carries_its_license_and_types(wheels):
    meta = metadata(wheels["client"])
    requires = meta["Requires-Dist"]
    assert {requirement_name(r) for r in requires} == {"grpcio", "protobuf", "msgpack"}
    assert all(">=" in r and "<" in r and "==" not in r for r in requires), requires
    assert meta["License-Expression"] == ["Apache-2.0"] and meta["License-File"] == ["LICENSE"]
    assert "Typing :: Typed" in meta["Classifier"]
    with zipfile.ZipFile(wheels["client"]) as z:
        license_text = z.read("groupcoord_client-0.1.0.dist-info/licenses/LICENSE").decode()
    assert license_text == (ROOT / "LICENSE").read_text() and "Apache License" in license_text


def test_versions_dependencies_and_pins_agree():
    root = pyproject(ROOT / "pyproject.toml")["project"]
    client = pyproject(ROOT / "packaging/client/pyproject.toml")["project"]
    server = pyproject(ROOT / "packaging/server/pyproject.toml")["project"]
    assert root["version"] == client["version"] == server["version"]
    # The server needs exactly its own version of the client; otherwise the development install is their union,
    # with the server's range where both name a distribution (it may be narrower: grpcio).
    assert f"groupcoord-client=={client['version']}" in server["dependencies"]
    union = {requirement_name(r): r for r in client["dependencies"]}
    union |= {requirement_name(r): r for r in server["dependencies"] if not r.startswith("groupcoord-client")}
    assert sorted(root["dependencies"]) == sorted(union.values())
    assert root["optional-dependencies"]["spark"] == server["optional-dependencies"]["spark"]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            pins[name.lower()] = pinned
    runtime = {requirement_name(r) for r in [*root["dependencies"], *root["optional-dependencies"]["spark"]]}
    assert runtime == set(pins), "every runtime dependency has an exact pin in constraints.txt, and nothing else"
    assert all(re.fullmatch(r"\d+(\.\d+)+", version) for version in pins.values()), pins


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


MEMBER_SCRIPT = """
import asyncio, importlib.util, json, sys

from groupcoord.client import GroupMember


async def main() -> dict:
    async with GroupMember(sys.argv[1].split(","), "wheel-group", {"t": 4}) as member:
        assignment = await member.wait_stable(30)
        codes = await member.commit({tp: 7 for tp in assignment.partitions})
    return {"partitions": sorted(assignment.partitions), "codes": sorted(set(codes.values()))}


found = asyncio.run(main())
found["server_modules"] = [m for m in json.loads(sys.argv[2]) if importlib.util.find_spec(m) is not None]
print(json.dumps(found))
"""


async def test_the_client_wheel_alone_runs_a_member_against_a_cluster(wheels, cluster, tmp_path):
    venv = tmp_path / "app"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), str(wheels["client"])],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    dists = {d["name"].lower().replace("_", "-") for d in json.loads(listed.stdout)}
    assert "groupcoord-client" in dists and dists <= CLIENT_DISTS, sorted(dists - CLIENT_DISTS)

    bootstrap = ",".join(cluster.address(i) for i in range(3))
    # Run outside the repo, whose folders would otherwise be importable from the working directory.
    ran = subprocess.run(
        [python, "-W", "error", "-c", MEMBER_SCRIPT, bootstrap, json.dumps(SERVER_MODULES)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found == {"partitions": [["t", p] for p in range(4)], "codes": [0], "server_modules": []}
    async with Admin(bootstrap.split(",")) as admin:
        assert await admin.list_offsets("wheel-group") == {("t", p): (7, "") for p in range(4)}
