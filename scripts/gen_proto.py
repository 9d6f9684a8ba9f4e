"""Regenerates src/preheat/proto/preheat/v1/*_pb2*.py(i) from the .proto files.

Run with the dev extras installed: ``python scripts/gen_proto.py [OUTDIR]``. The generated
modules are committed; tests/test_proto_generated.py fails when they drift from the .proto.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTO_DIR = SRC / "preheat" / "proto" / "preheat" / "v1"


def generate(out: Path) -> list[Path]:
    """Generates into ``out`` (a tree mirroring ``src``); returns the generated files."""
    plugin = shutil.which("protoc-gen-mypy_grpc")
    if plugin is None:
        raise SystemExit("protoc-gen-mypy_grpc not found: install the dev extras (mypy-protobuf)")
    protos = sorted(p.relative_to(SRC).as_posix() for p in PROTO_DIR.glob("*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{Path(protoc.__file__).parent / '_proto'}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted((out / "preheat" / "proto" / "preheat" / "v1").glob("*_pb2*"))


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    for path in generate(out):
        print(path.relative_to(out))


if __name__ == "__main__":
    main()
