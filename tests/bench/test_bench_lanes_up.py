"""The pool files of ``scripts/bench_lanes_up.py``: valid pool files whose two runs differ
only in the batch class's priority, and whose worker, started by ``preheat up``, schedules
by priority in both (so the FCFS run is the priority policy with equal priorities)."""

from __future__ import annotations

from types import ModuleType

import pytest
from scriptkit import load_script

from preheat.api.poolfile import load_pool
from preheat.local.runtime import worker_argv


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench_lanes_up")


@pytest.mark.parametrize(("with_lanes", "batch"), [(True, 2), (False, 0)])
def test_the_pool_file_declares_both_classes_with_the_runs_priorities(
    bench: ModuleType, with_lanes: bool, batch: int
) -> None:
    pool = load_pool(bench.pool_file(with_lanes=with_lanes).encode(), source="lanes.yaml")
    classes = {c.name: c for c in pool.config.traffic.classes}
    assert set(classes) == {"interactive", "batch"}
    assert (classes["interactive"].priority, classes["batch"].priority) == (0, batch)
    assert not any(c.sheddable for c in classes.values())
    assert pool.config.traffic.default_class == "interactive"
    assert (pool.config.replicas.min, pool.config.replicas.max) == (1, 1)


@pytest.mark.parametrize("with_lanes", [True, False])
def test_preheat_up_starts_its_worker_with_the_priority_policy(
    bench: ModuleType, with_lanes: bool
) -> None:
    pool = load_pool(bench.pool_file(with_lanes=with_lanes).encode(), source="lanes.yaml")
    argv = worker_argv(
        pool.config, "w", grpc_port=0, http_port=0, drain_grace_s=1, extra=bench.WORKER_ARGS
    )
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "--sim-opt"]
    assert "scheduling_policy=priority" in opts
    assert "--sim-opt=max_waiting=100000" in argv
