"""The latency budget: per stage quantiles and the stage that owns the tail, from literal
requests (live names and the simulator's)."""

from __future__ import annotations

import pytest

from preheat.report.budget import latency_budget, render_budget, request_stages
from preheat.report.record import RequestOutcome, Run, RunMeta
from preheat.report.summary import summarize
from preheat.report.table import render_table


def req(i: int, *, router: float, network: float, queue: float, prefill: float, decode: float,
        outcome: str = "ok") -> RequestOutcome:  # fmt: skip
    ttft = router + network + queue + prefill
    return RequestOutcome(
        request_id=f"r{i}",
        t_s=float(i),
        outcome=outcome,  # type: ignore[arg-type]
        ttft_ms=ttft,
        e2e_ms=ttft + decode,
        stages_ms={
            "router": router,
            "network": network,
            "queue": queue,
            "prefill": prefill,
            "decode": decode,
            "server_ttft": queue + prefill,
            "outside_engine": router + network,
        },
    )


def test_stage_quantiles_and_the_tails_owner() -> None:
    # 95 fast requests; 5 slow ones whose TTFT is mostly queueing, whose e2e is mostly decode
    fast = [req(i, router=1, network=2, queue=5, prefill=20, decode=100) for i in range(95)]
    slow = [req(95 + i, router=1, network=2, queue=400, prefill=30, decode=3000) for i in range(5)]
    b = latency_budget(fast + slow)
    assert b is not None
    assert list(b.stages) == ["router", "network", "queue", "prefill", "decode"]
    assert b.stages["queue"].count == 100
    assert b.stages["queue"].p50 == 5
    assert b.stages["queue"].p99 == 400
    assert b.stages["router"].p95 == 1
    assert b.ttft_dominant == "queue"
    assert b.ttft_tail_requests == 5
    assert b.ttft_tail["queue"] == pytest.approx(400 / 433)
    assert sum(b.ttft_tail.values()) == pytest.approx(1.0)
    assert "decode" not in b.ttft_tail  # after the first token
    assert b.e2e_dominant == "decode"
    lines = render_budget(b)
    assert any(line.split()[0] == "queue" and line.split()[-1] == "400.0" for line in lines)
    assert any("TTFT tail" in line and "queue dominates" in line for line in lines)
    assert any("e2e tail" in line and "decode dominates" in line for line in lines)


def test_failed_requests_and_requests_without_stages_are_left_out() -> None:
    ok = req(0, router=1, network=1, queue=1, prefill=1, decode=1)
    failed = req(1, router=9, network=9, queue=9, prefill=9, decode=9, outcome="error")
    bare = RequestOutcome(request_id="b", t_s=0, outcome="ok", ttft_ms=5, e2e_ms=6)
    b = latency_budget([ok, failed, bare])
    assert b is not None
    assert b.stages["queue"].count == 1
    assert b.stages["queue"].p99 == 1
    assert latency_budget([bare]) is None


def test_the_simulators_names_and_a_run_without_a_router() -> None:
    assert request_stages({"route": 0.5, "network": 2.0, "queue": 3.0, "server_ttft": 9.0}) == {
        "router": 0.5,
        "network": 2.0,
        "queue": 3.0,
    }
    direct = RequestOutcome(
        request_id="d", t_s=0, outcome="ok", ttft_ms=30, e2e_ms=90,
        stages_ms={"queue": 10, "prefill": 20, "decode": 60, "server_ttft": 30},
    )  # fmt: skip
    b = latency_budget([direct])
    assert b is not None
    assert list(b.stages) == ["queue", "prefill", "decode"]
    assert b.ttft_dominant == "prefill"


def test_the_report_table_prints_the_budget() -> None:
    requests = [req(i, router=1, network=2, queue=5 * i, prefill=20, decode=100) for i in range(40)]
    text = render_table(summarize(Run(RunMeta(name="t"), requests, [], [])))
    assert "latency budget" in text
    assert "TTFT tail (slowest 5%" in text
