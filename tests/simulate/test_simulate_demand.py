"""The simulator feeds the routers' refusals to the one policy (issue 12, item B): a pool
whose router rejects most requests early (their TTFT deadline cannot be met) while the
latency of what it serves is far under target grows, where before it stayed at one
worker because the served histograms alone looked healthy."""

from __future__ import annotations

import dataclasses
from typing import Any

from preheat.core.autoscaling import PolicyTuning
from preheat.report.record import count_outcomes
from preheat.simulate import SimOptions, Startup, pool_config, simulate, spec_document
from preheat.workload.traces import TraceRequest


def _steady(rate: float, seconds: float) -> list[TraceRequest]:
    """Distinct ~4k-token prompts at a constant rate (no shared prefix)."""
    blocks = 64
    return [
        TraceRequest(
            arrival_s=i / rate,
            input_tokens=64 * (blocks - 1) + 40,
            output_tokens=64,
            session_id=f"s{i}",
            prefix_block_ids=tuple(blocks * i + k for k in range(blocks)),
            block_tokens=64,
            index=i,
        )
        for i in range(int(rate * seconds))
    ]


def test_a_pool_refusing_its_traffic_grows_in_the_simulator() -> None:
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 4},
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 2000}],
            "window": "30s",
        },
    }
    pool = pool_config(spec_document("p", spec))
    trace = _steady(rate=20.0, seconds=120.0)
    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0)
    # feedback only (no capacity estimate): what the refusals alone do
    opts = SimOptions(
        ttft_deadline_ms=300.0,
        startup=fast,
        autoscale_interval_s=5.0,
        tuning=PolicyTuning(cost=None),
    )
    run, _ = simulate(pool, trace, opts)

    ups = [e for e in run.events if e.kind == "scale_up"]
    assert ups, "the pool never grew although its router refused requests"
    assert ups[0].reason.startswith("router refused ")
    assert "(rejected): needs " in ups[0].reason
    # the served latency was under target: only the refusals asked for more
    assert "ms < 2000 ms" in ups[0].reason
    assert max(s.active for s in run.replicas) > 1
    # once the pool has grown, the router stops refusing
    late = [r for r in run.requests if r.t_s >= 60.0]
    assert count_outcomes(late)["rejected"] == 0
    assert count_outcomes(run.requests)["rejected"] > 0


def test_the_capacity_estimate_sizes_the_pool_from_the_rate_before_refusals_do() -> None:
    """With the capacity estimate (the default), the first scale-up comes from the arrival
    rate and the mix the workers finished: 20 req/s of 4k-token prompts needs more than one
    GPU whatever the served latency says."""
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 8},
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 2000}],
            "window": "30s",
        },
    }
    pool = pool_config(spec_document("p", spec))
    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0)
    opts = SimOptions(ttft_deadline_ms=300.0, startup=fast, autoscale_interval_s=5.0)
    run, _ = simulate(pool, _steady(rate=20.0, seconds=60.0), opts)
    ups = [e for e in run.events if e.kind == "scale_up"]
    assert ups
    assert "capacity: 20.0 req/s of 4072 prompt (0 cached) / 64 output tokens needs" in (
        ups[0].reason
    )
    assert ups[0].to_replicas > 1


def test_the_run_says_how_far_off_the_arrival_rate_forecast_was() -> None:
    """The forecast runs with autoscaling.predictive off too; the run's meta says how far
    off it was (a steady rate: within a few percent)."""
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 2},
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 2000}],
            "window": "10s",
        },
    }
    pool = pool_config(spec_document("p", spec))
    trace = _steady(rate=4.0, seconds=150.0)
    opts = SimOptions(startup=Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0),
                      autoscale_interval_s=5.0)  # fmt: skip
    run, _ = simulate(pool, trace, opts)
    fc = run.meta.extra["forecast"]
    assert isinstance(fc, dict)
    assert (fc["horizon_s"], fc["acting"]) == (60.0, False)
    assert fc["evaluations"] > 10
    assert 0.0 <= fc["error_median"] <= fc["error_p90"] < 0.2


def _one_pod(target_ms: float | None, max_num_seqs: int = 256) -> Any:
    objectives = [{"signal": "ttft", "percentile": 99, "targetMs": target_ms}] if target_ms else []
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim", "args": {"maxNumSeqs": max_num_seqs}},
        "replicas": {"min": 1, "max": 1},
        "autoscaling": {"objectives": objectives, "window": "30s"},
    }
    return pool_config(spec_document("p", spec))


def test_requests_without_a_deadline_are_admitted_against_the_pools_objective_as_live() -> None:
    """The live router admits a request that names no deadline against the pool's TTFT
    objective (preheat up and the Kubernetes discovery set its defaultTtftTargetMs from
    it): the simulated router does the same, so an overloaded pool refuses what it cannot
    start in time instead of queueing it for seconds. 0 turns the default target off."""
    pool = _one_pod(500.0)
    trace = _steady(rate=40.0, seconds=5.0)  # ~4k-token prompts: far past one GPU, 200 of
    # them: under the router's bound on requests in flight (the pod's 256 slots)
    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0)
    run, _ = simulate(pool, trace, SimOptions(startup=fast))
    counts = count_outcomes(run.requests)
    assert counts["rejected"] > 0
    assert counts["ok"] > 0
    refused = next(r for r in run.requests if r.outcome == "rejected")
    assert "exceeds the deadline of 500 ms" in refused.error, refused.error
    served = [r.ttft_ms for r in run.requests if r.outcome == "ok" and r.ttft_ms is not None]
    queued, _ = simulate(pool, trace, SimOptions(startup=fast, default_ttft_target_ms=0.0))
    late = [r.ttft_ms for r in queued.requests if r.outcome == "ok" and r.ttft_ms is not None]
    assert count_outcomes(queued.requests)["rejected"] == 0  # no target: every one queues
    assert max(late) > 5 * max(served)  # and waits seconds where admission kept it short


def test_the_routers_bound_on_requests_in_flight_refuses_past_it_as_live() -> None:
    """The live router's concurrency bound (core.routing.admission.admit) holds in the
    simulator: with maxInFlight 3 and no default target, a burst of ten is served three
    at a time and the rest refused with the bound's explanation."""
    pool = _one_pod(None)
    burst = [dataclasses.replace(r, arrival_s=0.001 * r.index) for r in _steady(10.0, 1.0)]
    run, _ = simulate(pool, burst, SimOptions(default_ttft_target_ms=0.0, max_in_flight=3))
    counts = count_outcomes(run.requests)
    assert counts["ok"] == 3, counts
    assert counts["rejected"] == 7, counts
    refused = next(r for r in run.requests if r.outcome == "rejected")
    assert "at its concurrency limit (3 of 3 requests in flight" in refused.error, refused.error
