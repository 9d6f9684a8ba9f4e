"""A hand-built run whose figures are known exactly (see test_report_summary.py)."""

from __future__ import annotations

import pytest

from preheat.report.record import ReplicaSample, RequestOutcome, Run, RunMeta, ScaleEvent


def known_run(simulated: bool = False) -> Run:
    ok = [
        # (ttft, e2e, itl, cached of 100 prompt tokens)
        (100.0, 1000.0, [10.0, 20.0], 0),
        (200.0, 2000.0, [30.0], 50),
        (300.0, 3000.0, [], 50),
        (400.0, 4000.0, [40.0], 100),
    ]
    requests = [
        RequestOutcome(
            request_id=f"r{i}",
            t_s=float(i),
            outcome="ok",
            ttft_ms=ttft,
            e2e_ms=e2e,
            itl_ms=itl,
            prompt_tokens=100,
            cached_tokens=cached,
            output_tokens=len(itl) + 1,
            session_id=f"s{i % 2}",
            endpoint="w0",
            stages_ms={"queue": 1.0, "prefill": ttft - 1.0},
        )
        for i, (ttft, e2e, itl, cached) in enumerate(ok)
    ]
    requests.append(RequestOutcome("r4", 4.0, "rejected", error="RESOURCE_EXHAUSTED: full"))
    requests.append(RequestOutcome("r5", 5.0, "error", error="UNAVAILABLE: worker gone"))
    events = [
        ScaleEvent(10.0, "scale_up", "ttft p95 612ms > 400ms", "pool", "", 2, 3),
        ScaleEvent(10.0, "promote", "standby first", "pool", "w2"),
        ScaleEvent(30.0, "scale_down", "idle", "pool", "", 3, 2),
    ]
    replicas = [
        ReplicaSample(0.0, active=2, standby=1),
        ReplicaSample(10.0, active=3, standby=0, starting=1),
        ReplicaSample(30.0, active=2, standby=1),
    ]
    meta = RunMeta(
        name="known",
        simulated=simulated,
        duration_s=40.0,
        target="127.0.0.1:1",
        ttft_objective_ms=250.0,
        e2e_objective_ms=3000.0,
    )
    return Run(meta, requests, events, replicas)


@pytest.fixture
def run_known() -> Run:
    return known_run()
