"""`preheat up -f a.yaml -f b.yaml`, before anything starts: two pools serving one model
are refused, the machine's capacity is counted over every pool together (issue 12, E), and
the router's discovery file is the several-pool form, rewritten only when a set changes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from preheat.api.poolfile import PoolFile, parse_pool
from preheat.local import capacity
from preheat.local.capacity import GiB, Limits, Machine, PoolNeeds, fits, fits_pools
from preheat.local.fleet import SharedRouter, model_clashes
from preheat.local.runtime import DISCOVERY_FILE, UpOptions
from preheat.router.pools import PoolSpec
from preheat.router.pools.static import parse_pools

SMALL = Machine(cpus=2, mem_available_bytes=4 * GiB, nproc_limit=None)


def _sim(workers: int, per: int = capacity.SIM_WORKER_BYTES) -> PoolNeeds:
    return PoolNeeds("sim", workers, f"replicas.max {workers} + warmStandby 0", per, "est")


def _vllm(workers: int) -> PoolNeeds:
    return PoolNeeds("vllm", workers, f"replicas.max {workers} + warmStandby 0", GiB, "est")


def pool_yaml(name: str, model: str, *, replicas: str = "{min: 1, max: 1}") -> str:
    return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {name}}}
spec:
  model: {{name: {model}}}
  engine: {{kind: sim}}
  replicas: {replicas}
  autoscaling:
    objectives:
      - {{signal: ttft, percentile: 95, targetMs: 800}}
"""


def _pool(text: str, source: str) -> PoolFile:
    return parse_pool(yaml.safe_load(text), source=source)


def test_pools_that_fit_alone_may_not_fit_together() -> None:
    # 2 CPUs x 4 sim workers = 8: 5 fits alone, 5 + 5 does not
    assert fits(_sim(5), SMALL).fits
    v = fits_pools([("a", _sim(5)), ("b", _sim(5))], SMALL)
    assert not v.fits
    for needle in ("2 pools need up to 10 workers together", "125%", "a: 5", "b: 5"):
        assert needle in v.reason, v.reason
    assert fits_pools([("a", _sim(4)), ("b", _sim(4))], SMALL).fits


def test_engines_take_their_own_share_of_the_machine() -> None:
    eight = Machine(cpus=8, mem_available_bytes=64 * GiB)
    # 8 CPUs: 32 sim workers or 2 vLLM workers; 1 vLLM (half) + 16 sim (half) fill it
    v = fits_pools([("chat", _vllm(1)), ("sim", _sim(16))], eight)
    assert v.fits, v.reason
    assert v.worker_limits == (1, 16)
    assert not fits_pools([("chat", _vllm(1)), ("sim", _sim(17))], eight).fits


def test_memory_is_every_pools_workers_and_one_router() -> None:
    v = fits_pools([("a", _sim(2, 2 * GiB)), ("b", _sim(1, GiB))], SMALL)
    assert not v.fits  # 5 GiB + 200 MiB > 80% of 4 GiB
    assert v.need_bytes == 5 * GiB + capacity.ROUTER_BYTES
    assert "2 x 2 GiB (a: est) + 1 x 1 GiB (b: est) + 200 MiB for the router" in v.reason
    assert "3.2 GiB is usable" in v.reason


def test_each_pools_cap_is_its_share_of_the_machine() -> None:
    v = fits_pools([("a", _sim(2)), ("b", _sim(2))], SMALL)
    assert v.fits
    assert v.worker_limits == (4, 4)
    v = fits_pools([("a", _sim(3)), ("b", _sim(9))], SMALL, Limits(allow_oversubscribe=True))
    assert v.fits
    assert "oversubscribed" in v.reason
    assert v.worker_limits == (3, 9)  # never below a pool's peak
    v = fits_pools([("a", _sim(3)), ("b", _sim(3))], SMALL, Limits(max_workers=12))
    assert v.fits
    assert v.worker_limits == (6, 6)


def test_one_model_two_pools_is_refused() -> None:
    a = _pool(pool_yaml("chat", "tiny"), source="a.yaml")
    b = _pool(pool_yaml("code", "tiny"), source="b.yaml")
    c = _pool(pool_yaml("chat", "other"), source="c.yaml")
    assert model_clashes([a, _pool(pool_yaml("code", "coder"), source="b.yaml")]) == []
    (why,) = model_clashes([a, b])
    assert "model 'tiny' is served by two pools" in why
    assert "chat in a.yaml" in why
    assert "code in b.yaml" in why
    (why,) = model_clashes([a, c])
    assert why == "pool 'chat' is in both a.yaml and c.yaml"


def test_the_discovery_file_is_the_several_pool_form(tmp_path: Path) -> None:
    a = _pool(pool_yaml("chat", "tiny"), source="a.yaml")
    b = _pool(pool_yaml("code", "coder"), source="b.yaml")
    host = SharedRouter([a, b], UpOptions(out=tmp_path))
    try:
        host.write(force=True)
        path = tmp_path / DISCOVERY_FILE
        doc = json.loads(path.read_text())
        assert [(p["pool"], p["model"], p["endpoints"]) for p in doc["pools"]] == [
            ("chat", "tiny", []),
            ("code", "coder", []),
        ]
        assert doc["pools"][0]["routing"]["defaultTtftTargetMs"] == 800
        before = path.stat().st_ino
        host.publish("code", [])  # no change: not rewritten
        assert path.stat().st_ino == before
        entry = {"address": "127.0.0.1:1", "id": "w-1", "ready": True, "role": "active"}
        host.publish("code", [entry])
        assert path.stat().st_ino != before  # replaced whole (os.replace), never half-written
        doc = json.loads(path.read_text())
        assert doc["pools"][1]["endpoints"] == [entry]
        assert doc["pools"][0]["endpoints"] == []
    finally:
        host.release_ports()


def test_the_router_reads_the_discovery_file_as_two_pools(tmp_path: Path) -> None:
    a = _pool(pool_yaml("chat", "tiny"), source="a.yaml")
    b = _pool(pool_yaml("code", "coder"), source="b.yaml")
    host = SharedRouter([a, b], UpOptions(out=tmp_path))
    try:
        entry = {"address": "127.0.0.1:1", "id": "code-w-1", "ready": True, "role": "active"}
        host.publish("code", [entry])
        specs = parse_pools(host.document(), origin="endpoints.yaml", default=PoolSpec(name=""))
    finally:
        host.release_ports()
    assert [(s.key, s.model, len(s.endpoints)) for s in specs] == [
        ("default/chat", "tiny", 0),
        ("default/code", "coder", 1),
    ]
    assert specs[1].endpoints[0].id == "code-w-1"
    assert dict(specs[0].routing)["defaultTtftTargetMs"] == 800


def _up(
    tmp_path: Path, *files: str, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    args = [a for f in files for a in ("-f", f)]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "preheat.cli",
            "up",
            *args,
            "--no-ui",
            "--out",
            str(tmp_path / "run"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _files(tmp_path: Path, *pools: tuple[str, str, str]) -> list[str]:
    out = []
    for name, model, replicas in pools:
        p = tmp_path / f"{name}.yaml"
        p.write_text(pool_yaml(name, model, replicas=replicas))
        out.append(str(p))
    return out


def test_cli_refuses_two_pools_of_one_model_and_starts_nothing(tmp_path: Path) -> None:
    files = _files(
        tmp_path, ("chat", "tiny", "{min: 1, max: 1}"), ("code", "tiny", "{min: 1, max: 1}")
    )
    r = _up(tmp_path, *files)
    assert r.returncode == 2, r.stderr
    assert "cannot run together; nothing was started" in r.stderr
    assert "model 'tiny' is served by two pools" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


def test_cli_counts_every_pool_against_the_machine(tmp_path: Path) -> None:
    files = _files(
        tmp_path, ("chat", "tiny", "{min: 1, max: 3}"), ("code", "coder", "{min: 1, max: 3}")
    )
    r = _up(tmp_path, *files, extra=("--max-workers", "5"))
    assert r.returncode == 2, r.stderr
    assert "the pools do not fit together on this machine" in r.stderr
    assert "2 pools need up to 6 workers together" in r.stderr
    assert "chat: 3" in r.stderr
    assert "code: 3" in r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("bad", ["prometheus", "pool-file"])
def test_cli_names_every_problem_of_several_pools(tmp_path: Path, bad: str) -> None:
    files = _files(
        tmp_path, ("chat", "tiny", "{min: 1, max: 1}"), ("code", "coder", "{min: 1, max: 1}")
    )
    extra: tuple[str, ...] = ()
    if bad == "prometheus":
        extra = ("--prometheus", "http://127.0.0.1:9")
        needle = "--prometheus takes one pool"
    else:
        Path(files[1]).write_text(pool_yaml("code", "coder", replicas="{min: -1, max: 1}"))
        needle = "spec.replicas.min"
    r = _up(tmp_path, *files, extra=extra)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert not (tmp_path / "run").exists()
