"""Traffic classes in the simulator (issue 18: "the report and ``preheat simulate`` break
TTFT/SLO attainment down by class"): a trace row's ``slo_class`` (else the pool's default
class) sets the request's priority, the pool's workers schedule by it as the live pool's
do, and the report judges each class by its own TTFT target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preheat.core.pool import PoolConfig
from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.scheduler import schedule
from preheat.core.routing.types import PrefillCost, RouteDecision, RoutingContext
from preheat.report.record import read_meta
from preheat.report.summary import Quantiles, summarize
from preheat.simulate import (
    SimOptions,
    Startup,
    engine_config,
    pool_config,
    simulate,
    spec_document,
)
from preheat.workload.traces import TraceRequest

INTERACTIVE_MS, BATCH_MS = 2000.0, 60000.0


def _traffic(interactive_priority: int = 0, batch_priority: int = 2) -> dict[str, Any]:
    return {
        "defaultClass": "interactive",
        "classes": [
            {"name": "interactive", "ttftMs": INTERACTIVE_MS, "priority": interactive_priority},
            {"name": "batch", "ttftMs": BATCH_MS, "priority": batch_priority},
        ],
    }


def _pool(traffic: dict[str, Any] | None) -> PoolConfig:
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 2, "max": 2},
    }
    if traffic is not None:
        spec["traffic"] = traffic
    return pool_config(spec_document("p", spec))


BATCH_PROMPT = 6000


def _batch_rate(pool: PoolConfig) -> float:
    """1.5x what the pool's replicas can prefill of batch prompts (from the sim's own cost
    model, so that a recalibration keeps the overload)."""
    cost = engine_config(pool, SimOptions()).cost
    return 1.5 * pool.replicas.max * 1000.0 / cost.prefill_ms(BATCH_PROMPT, 0)


def _mixed(batch_per_s: float, seconds: int = 20) -> list[TraceRequest]:
    """Short interactive chats (no class named: the pool's default) at 2/s, and a flood of
    long batch prompts at ``batch_per_s``."""
    out: list[TraceRequest] = []
    for i in range(seconds * 2):
        out.append(TraceRequest(arrival_s=i / 2 + 0.01, input_tokens=256, output_tokens=16))
    for i in range(round(seconds * batch_per_s)):
        out.append(
            TraceRequest(
                arrival_s=i / batch_per_s,
                input_tokens=BATCH_PROMPT,
                output_tokens=32,
                slo_class="batch",
            )
        )
    out.sort(key=lambda r: r.arrival_s)
    return [TraceRequest(**{**r.__dict__, "index": k}) for k, r in enumerate(out)]


def _p99(q: Quantiles) -> float:
    assert q.p99 is not None
    return q.p99


def test_the_simulated_pool_schedules_by_class_priority() -> None:
    pool = _pool(_traffic())
    trace = _mixed(_batch_rate(pool))
    n_batch = sum(1 for r in trace if r.slo_class)
    lanes, _ = simulate(pool, trace, SimOptions())
    fcfs, _ = simulate(_pool(_traffic(1, 1)), trace, SimOptions())  # same classes, one lane
    with_lanes, without = summarize(lanes).by_class, summarize(fcfs).by_class
    assert set(with_lanes) == set(without) == {"interactive", "batch"}
    # every request is recorded under the class it ran in (the default for the unnamed)
    assert with_lanes["interactive"].requests == 40
    assert with_lanes["batch"].requests == n_batch
    # overloaded by batch prompts: one lane makes the chats wait behind them, priorities
    # do not; the batch class absorbs the overload
    assert _p99(with_lanes["interactive"].ttft_ms) < _p99(without["interactive"].ttft_ms) / 2
    assert _p99(with_lanes["interactive"].ttft_ms) < _p99(with_lanes["batch"].ttft_ms)
    # each class is judged by its own target
    assert with_lanes["interactive"].ttft_objective_ms == INTERACTIVE_MS
    assert with_lanes["batch"].ttft_objective_ms == BATCH_MS
    inter, inter_fcfs = with_lanes["interactive"], without["interactive"]
    assert inter.ttft_attainment is not None
    assert inter_fcfs.ttft_attainment is not None
    assert inter.ttft_attainment > inter_fcfs.ttft_attainment


def test_a_pool_without_classes_runs_fcfs_and_prints_no_class_table() -> None:
    run, _ = simulate(_pool(None), _mixed(1.0, 5), SimOptions())
    s = summarize(run)
    # the trace's "batch" rows name a class the pool does not declare: refused, as the
    # live router answers 400
    batch = [r for r in run.requests if r.slo_class == "batch"]
    assert batch
    assert {r.outcome for r in batch} == {"error"}
    assert all("unknown slo_class 'batch'" in r.error for r in batch)
    assert {r.outcome for r in run.requests if not r.slo_class} == {"ok"}
    assert set(s.by_class) == {"", "batch"}


def test_cli_prints_and_records_the_class_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    pool = tmp_path / "pool.yaml"
    pool.write_text(
        json.dumps(
            {
                "apiVersion": "preheat.dev/v1alpha1",
                "kind": "InferencePool",
                "metadata": {"name": "t"},
                "spec": {
                    "model": {"name": "m"},
                    "engine": {"kind": "sim"},
                    "replicas": {"min": 1, "max": 1},
                    "traffic": _traffic(),
                },
            }
        )
    )
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp_ms": 100 * i, "input_tokens": 300, "output_tokens": 4}
        | ({"slo_class": "batch"} if i % 2 else {})
        for i in range(20)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_dir = tmp_path / "run"
    argv = ["simulate", "--pool", str(pool), "--trace", str(trace), "--out", str(out_dir)]
    assert main([*argv, "--no-plots"]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert table["interactive"][1] == "10"  # requests
    assert table["batch"][1] == "10"
    assert table["interactive"][-2] == f"{INTERACTIVE_MS:.1f}"  # its own target
    assert table["batch"][-2] == f"{BATCH_MS:.1f}"
    meta = read_meta(out_dir)
    assert meta is not None
    assert meta.class_ttft_ms == {"interactive": INTERACTIVE_MS, "batch": BATCH_MS}


def test_held_requests_leave_the_router_by_class_priority_not_arrival() -> None:
    # a pool at zero holds every request at the router until its first pod is active;
    # then they leave in the live router's order (core.traffic.lanes): interactive first
    # though the batch ones came first (the trace names no tenant: one anonymous tenant)
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 0, "max": 1, "desired": 0},
        "autoscaling": {"objectives": [{"signal": "queueDepth", "perReplica": 4}]},
        "traffic": _traffic(),
    }
    pool = pool_config(spec_document("z", spec))
    rows = [(i * 0.1, "batch") for i in range(6)] + [(0.6 + i * 0.1, "") for i in range(3)]
    trace = [
        TraceRequest(arrival_s=t, input_tokens=64, output_tokens=4, slo_class=k, index=i)
        for i, (t, k) in enumerate(rows)
    ]
    routed: list[str] = []

    def route(
        ctx: RoutingContext, cfg: SchedulerConfig, cost: PrefillCost, state: SchedulerState
    ) -> tuple[RouteDecision, SchedulerState]:
        routed.append(ctx.request.request_id)
        return schedule(ctx, cfg, cost, state)

    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0, promote_s=0.5)
    run, _ = simulate(pool, trace, SimOptions(startup=fast, autoscale_interval_s=2.0, route=route))
    assert {r.outcome for r in run.requests} == {"ok"}
    assert min(r.ttft_ms for r in run.requests) > 1000  # all were held, none went at once
    assert routed == [f"req-{i}" for i in (6, 7, 8, 0, 1, 2, 3, 4, 5)]


def test_a_class_that_would_be_refused_takes_its_ladder_as_live() -> None:
    """Overloaded, a sheddable class past its target is refused, a class that is not
    sheddable queues, and one with a degraded maxTokens is served clamped to it (the live
    router's ladder, core.traffic.ladder; the fallback pool is not simulated)."""
    classes = [
        {"name": "shed", "ttftMs": 300},
        {"name": "keep", "ttftMs": 300, "sheddable": False},
        {"name": "clamp", "ttftMs": 300, "degrade": {"maxTokens": 4}},
    ]
    pool = _pool({"classes": classes})
    names = [str(c["name"]) for c in classes]
    rate = _batch_rate(pool)  # 1.5x what the two replicas prefill
    trace = [
        TraceRequest(
            arrival_s=i / rate,
            input_tokens=BATCH_PROMPT,
            output_tokens=32,
            slo_class=str(names[i % 3]),
            index=i,
        )
        for i in range(round(20 * rate))
    ]
    run, _ = simulate(pool, trace, SimOptions())
    by: dict[str, list[Any]] = {n: [] for n in names}
    for r in run.requests:
        by[str(r.slo_class)].append(r)
    shed = [r.outcome for r in by["shed"]]
    assert "rejected" in shed  # past its target: refused early
    assert {r.outcome for r in by["keep"]} == {"ok"}  # not sheddable: served, late
    assert max(r.ttft_ms for r in by["keep"]) > 300
    assert {r.outcome for r in by["clamp"]} == {"ok"}
    clamped = [r.output_tokens for r in by["clamp"] if r.output_tokens < 32]
    assert clamped
    assert set(clamped) == {4}
