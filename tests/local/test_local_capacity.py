"""`preheat up` refuses a pool that does not fit the machine (issue 12, E): the pure
verdict as a table, the per-worker memory figure, and the CLI's refusal and overrides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from preheat.api.poolfile import parse_pool
from preheat.local import capacity
from preheat.local.capacity import GiB, Limits, Machine, MiB, PoolNeeds, fits, parse_bytes

LAPTOP = Machine(cpus=8, mem_available_bytes=16 * GiB, nproc_limit=None)
SMALL = Machine(cpus=2, mem_available_bytes=4 * GiB, nproc_limit=None)


def _sim(workers: int, per: int = capacity.SIM_WORKER_BYTES) -> PoolNeeds:
    return PoolNeeds("sim", workers, f"replicas.max {workers} + warmStandby 0", per, "est")


@pytest.mark.parametrize(
    ("needs", "machine", "limits", "ok", "limit", "needles"),
    [
        (_sim(5), LAPTOP, Limits(), True, 32, ()),
        (_sim(32), LAPTOP, Limits(), True, 32, ()),
        # the pool: replicas {min: 1000}
        (
            _sim(1000),
            LAPTOP,
            Limits(),
            False,
            32,
            ("up to 1000 workers", "at most 32", "8 CPUs x 4 sim workers", "is usable"),
        ),
        (_sim(33), LAPTOP, Limits(), False, 32, ("up to 33 workers", "at most 32")),
        # count fits, memory does not: the memory figures are named
        (
            _sim(4, 2 * GiB),
            SMALL,
            Limits(),
            False,
            8,
            ("4 x 2 GiB (est)", "= 8.2 GiB", "3.2 GiB is usable", "MemAvailable 4 GiB"),
        ),
        # --max-workers replaces the CPU-derived count; memory still checked
        (_sim(40), LAPTOP, Limits(max_workers=40), True, 40, ()),
        (_sim(10), LAPTOP, Limits(max_workers=4), False, 4, ("--max-workers 4",)),
        (_sim(200, 1 * GiB), LAPTOP, Limits(max_workers=500), False, 500, ("is usable",)),
        # --allow-oversubscribe: runs, says why it would not fit, caps at the pool's peak
        (
            _sim(1000),
            LAPTOP,
            Limits(allow_oversubscribe=True),
            True,
            1000,
            ("oversubscribed", "up to 1000 workers"),
        ),
        # the absolute ceiling, and RLIMIT_NPROC
        (_sim(65), Machine(64, 512 * GiB), Limits(), False, 64, ("at most 64 on one",)),
        (_sim(6), Machine(8, 16 * GiB, nproc_limit=10), Limits(), False, 5, ("RLIMIT_NPROC 10",)),
        # memory unknown: the count alone decides
        (_sim(8), Machine(2, None), Limits(), True, 8, ("memory unknown",)),
        # vLLM: one worker per 4 CPUs
        (
            PoolNeeds("vllm", 3, "replicas.max 2 + warmStandby 1", 6 * GiB, "v"),
            LAPTOP,
            Limits(),
            False,
            2,
            ("up to 3 workers", "8 CPUs / 4 per vLLM worker"),
        ),
    ],
)
def test_fits(needs, machine, limits, ok, limit, needles):
    v = fits(needs, machine, limits)
    assert v.fits is ok, v.reason
    assert v.worker_limit == limit
    for n in needles:
        assert n in v.reason, v.reason


@pytest.mark.parametrize(
    ("text", "want"),
    [("512Mi", 512 * MiB), ("2Gi", 2 * GiB), ("1.5G", 1_500_000_000), ("1000", 1000)],
)
def test_parse_bytes(text, want):
    assert parse_bytes(text) == want


@pytest.mark.parametrize("text", ["", "2GB", "-1Gi", "0", "lots"])
def test_parse_bytes_refuses(text):
    with pytest.raises(ValueError, match="memory size"):
        parse_bytes(text)


def _pool(replicas: str, extra: str = "", engine: str = "sim") -> object:
    import yaml

    text = f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: p}}
spec:
  model: {{name: sim-8b}}
  engine: {{kind: {engine}}}
  replicas: {replicas}
{extra}"""
    return parse_pool(yaml.safe_load(text), "p.yaml").config


def test_pool_needs_peak_and_the_memory_figure_in_order():
    config = _pool("{min: 1, max: 4, warmStandby: 1}")
    needs = capacity.pool_needs(config)
    assert (needs.workers, needs.worker_bytes) == (5, capacity.SIM_WORKER_BYTES)
    assert needs.workers_why == "replicas.max 4 + warmStandby 1"
    declared = _pool("{min: 1, max: 2}", "  resources: {memory: 1Gi}\n")
    assert capacity.pool_needs(declared).worker_bytes == GiB
    assert "resources.memory" in capacity.pool_needs(declared).worker_bytes_why
    flag = capacity.pool_needs(declared, declared_bytes=3 * GiB)
    assert (flag.worker_bytes, flag.worker_bytes_why) == (3 * GiB, "--worker-memory")


def test_vllm_estimate_counts_the_weights_on_disk(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    config = _pool(
        "{min: 1, max: 1}",
        f'  model: {{name: tiny, source: "hostpath://{tmp_path}"}}\n',
        engine="vllm",
    )
    weights, why = capacity.model_bytes(config)
    assert weights == 4096
    assert str(tmp_path) in why
    needs = capacity.pool_needs(config, weights_bytes=weights, weights_why=why, kv_gib=1.0)
    assert needs.worker_bytes == capacity.VLLM_BASE_BYTES + 4096 + GiB


def test_read_machine_reads_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemFree: 5 kB\nMemAvailable:   2048 kB\n")
    m = capacity.read_machine(meminfo)
    assert m.mem_available_bytes == 2048 * 1024
    assert m.cpus >= 1
    assert capacity.read_machine(tmp_path / "missing").mem_available_bytes is None


BIG = """\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {name: big}
spec:
  model: {name: sim-8b}
  engine: {kind: sim}
  replicas: {min: 1000, max: 1000}
"""


def _up(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    pool = tmp_path / "big.yaml"
    pool.write_text(BIG)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "preheat.cli",
            "up",
            "-f",
            str(pool),
            "--no-ui",
            "--out",
            str(tmp_path / "run"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_refuses_a_pool_that_does_not_fit_and_starts_nothing(tmp_path):
    r = _up(tmp_path)
    assert r.returncode == 2, r.stderr
    assert "does not fit this machine" in r.stderr
    assert "up to 1000 workers" in r.stderr
    assert "--allow-oversubscribe" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # nothing started, no run folder


def test_cli_bad_capacity_flags_are_listed(tmp_path):
    r = _up(tmp_path, "--max-starting", "0", "--worker-memory", "lots", "--max-workers", "-1")
    assert r.returncode == 2
    for needle in ("--max-starting must be >= 1", "--worker-memory", "--max-workers must be"):
        assert needle in r.stderr, r.stderr
