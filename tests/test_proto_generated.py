"""The committed gRPC modules are exactly what the .proto files generate."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "src" / "preheat" / "proto" / "preheat" / "v1"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regenerating_gives_the_committed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    fresh = _load_generator().generate(tmp_path)
    assert fresh, "protoc generated nothing"
    names = sorted(p.name for p in fresh)
    committed = sorted(p.name for p in GENERATED.glob("*_pb2*"))
    assert names == committed
    for path in fresh:
        assert path.read_text() == (GENERATED / path.name).read_text(), (
            f"{path.name} differs from the .proto: run `make proto` and commit"
        )
