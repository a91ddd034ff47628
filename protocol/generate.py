"""Regenerates the checked-in gRPC stubs from protocol/v1/groupcoord.proto.

Run `python -m groupcoord.protocol.generate` after editing the .proto; tests/unit/test_stubs.py fails when
the checked-in stubs differ from what the pinned grpcio-tools (and mypy-protobuf) produce. protoc writes the
messages' module and its type stub, grpcio-tools the service's module, and mypy-protobuf's protoc plugin the
service's type stub (`groupcoord_pb2_grpc.pyi`: typed stubs, sync and grpc.aio, for mypy).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent / "v1"
PROTO_NAME = "groupcoord.proto"
# The proto is compiled under the virtual path of its Python package, so the generated
# `_pb2_grpc` module imports `groupcoord.protocol.v1.groupcoord_pb2`.
VIRTUAL_DIR = "groupcoord/protocol/v1"
GENERATED = ("groupcoord_pb2.py", "groupcoord_pb2.pyi", "groupcoord_pb2_grpc.py", "groupcoord_pb2_grpc.pyi")
# mypy-protobuf's plugin, installed beside this interpreter (the `dev` extra).
MYPY_GRPC_PLUGIN = Path(sys.executable).parent / "protoc-gen-mypy_grpc"


def generate(out_dir: Path) -> dict[str, bytes]:
    """Compiles the proto into `out_dir` and returns the generated files by name."""
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        f"--proto_path={VIRTUAL_DIR}={PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--plugin=protoc-gen-mypy_grpc={MYPY_GRPC_PLUGIN}",
        f"--mypy_grpc_out={out_dir}",
        f"{VIRTUAL_DIR}/{PROTO_NAME}",
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on " + PROTO_NAME)
    return {name: (out_dir / VIRTUAL_DIR / name).read_bytes() for name in GENERATED}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in generate(Path(tmp)).items():
            (PROTO_DIR / name).write_bytes(data)
            print(f"wrote {PROTO_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
