"""summarize() on a hand-built run whose figures are known, and the table that prints them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from preheat.report.record import ReplicaSample, RequestOutcome, Run, RunMeta
from preheat.report.summary import replica_seconds, summarize
from preheat.report.table import render_comparison, render_table


def test_counts(run_known: Run) -> None:
    s = summarize(run_known)
    assert (s.requests, s.ok, s.rejected, s.error) == (6, 4, 1, 1)
    assert s.errors_by_message == {"UNAVAILABLE": 1}


def test_latency_quantiles_over_ok_requests(run_known: Run) -> None:
    s = summarize(run_known)
    assert s.ttft_ms.count == 4
    assert s.ttft_ms.p50 == pytest.approx(250.0)  # midway between 200 and 300
    assert s.ttft_ms.p99 == pytest.approx(397.0)  # 300 + 0.97 * 100
    assert s.e2e_ms.p50 == pytest.approx(2500.0)
    assert s.itl_ms.count == 4  # gaps pooled over requests: 10, 20, 30, 40
    assert s.itl_ms.p50 == pytest.approx(25.0)


def test_slo_attainment_counts_rejected_and_failed_as_misses(run_known: Run) -> None:
    s = summarize(run_known)
    assert s.ttft_attainment == pytest.approx(2 / 6)  # ttft <= 250: 100, 200
    assert s.e2e_attainment == pytest.approx(3 / 6)  # e2e <= 3000: 1000, 2000, 3000
    assert s.slo_attainment == pytest.approx(2 / 6)


def test_no_objective_means_no_attainment(run_known: Run) -> None:
    meta = replace(run_known.meta, ttft_objective_ms=0.0, e2e_objective_ms=0.0)
    s = summarize(replace(run_known, meta=meta))
    assert s.slo_attainment is None
    assert "no objective" in render_table(s)


def test_cache_hit_rate_is_cached_over_prompt_tokens(run_known: Run) -> None:
    s = summarize(run_known)
    assert (s.cached_tokens, s.prompt_tokens) == (200, 400)
    assert s.cache_hit_rate == pytest.approx(0.5)


def test_replica_seconds_integrate_a_step_function_to_the_run_end(run_known: Run) -> None:
    s = summarize(run_known)
    # active: 2 x 10 s + 3 x 20 s + 2 x 10 s (last sample holds to duration 40 s)
    assert s.replica_seconds == pytest.approx(
        {"active": 100.0, "standby": 20.0, "starting": 20.0, "draining": 0.0}
    )
    assert s.peak_replicas == 4


def test_replica_seconds_sort_samples_and_never_extend_backwards() -> None:
    samples = [ReplicaSample(5.0, active=1), ReplicaSample(0.0, active=2)]
    assert replica_seconds(samples, end_s=1.0)["active"] == pytest.approx(10.0)


def test_scaling_events_are_scale_ups_and_downs(run_known: Run) -> None:
    s = summarize(run_known)
    assert s.scaling_events == 2
    assert s.events_by_kind == {"promote": 1, "scale_down": 1, "scale_up": 1}


def test_an_empty_run_summarizes_without_numbers() -> None:
    s = summarize(Run(RunMeta(name="empty"), [], [], []))
    assert s.requests == 0
    assert s.ttft_ms.p50 is None
    assert s.cache_hit_rate is None
    assert s.slo_attainment is None
    text = render_table(s)
    assert "requests 0" in text


def test_duration_falls_back_to_the_last_request_end() -> None:
    reqs = [RequestOutcome("a", 2.0, "ok", ttft_ms=1.0, e2e_ms=500.0)]
    s = summarize(Run(RunMeta(name="x"), reqs, [], []))
    assert s.duration_s == pytest.approx(2.5)


def test_table_shows_the_figures(run_known: Run) -> None:
    text = render_table(summarize(run_known))
    assert text.splitlines()[0] == "Run known"
    ttft_row = next(line for line in text.splitlines() if line.strip().startswith("TTFT"))
    assert ttft_row.split() == ["TTFT", "4", "250.0", "385.0", "397.0", "250.0"]
    assert "TTFT <= 250 ms 33.3%" in text
    assert "e2e <= 3000 ms 50.0%" in text
    assert "cache hit rate: 50.0%" in text
    assert "active 100.0" in text
    assert "scaling events: 2 (scale_up 1, scale_down 1); other: promote 1" in text


def test_simulated_runs_say_so(run_known: Run) -> None:
    sim = replace(run_known, meta=replace(run_known.meta, simulated=True))
    assert render_table(summarize(sim)).startswith("SIMULATED run known")


def test_comparison_has_one_row_per_run(run_known: Run) -> None:
    s = summarize(run_known)
    text = render_comparison([s, s], ["a", "b"])
    rows = text.splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["a", "b"]


def test_stages_are_summarized_per_stage(run_known: Run) -> None:
    s = summarize(run_known)
    assert set(s.stages_ms) == {"queue", "prefill"}
    assert s.stages_ms["queue"].p50 == pytest.approx(1.0)
    assert s.stages_ms["prefill"].p50 == pytest.approx(249.0)
    prefill = next(line for line in render_table(s).splitlines() if "prefill" in line)
    assert prefill.split()[:3] == ["prefill", "4", "249.0"]


def test_by_endpoint(run_known: Run) -> None:
    reqs = list(run_known.requests)
    reqs[3] = replace(reqs[3], endpoint="w1")  # the 400 ms one, fully cached
    s = summarize(replace(run_known, requests=reqs))
    assert list(s.by_endpoint) == ["w0", "w1"]
    w0, w1 = s.by_endpoint["w0"], s.by_endpoint["w1"]
    assert (w0.requests, w0.ttft_ms.p50) == (3, 200.0)
    assert w0.cache_hit_rate == pytest.approx(1 / 3)
    assert (w1.requests, w1.ttft_ms.p50, w1.cache_hit_rate) == (1, 400.0, 1.0)
    rows = [line.split() for line in render_table(s).splitlines() if line.startswith("  w")]
    assert rows == [["w0", "3", "200.0", "290.0", "33.3%"], ["w1", "1", "400.0", "400.0", "100.0%"]]


def test_itl_runs_from_a_simulator_weigh_like_the_expanded_gaps(run_known: Run) -> None:
    reqs = list(run_known.requests)
    # request 0's gaps [10, 20] as runs, plus two more 20s: ITL samples 10, 20, 20, 20, 30, 40
    reqs[0] = replace(reqs[0], itl_ms=[], itl_runs_ms=[[10.0, 1], [20.0, 3]])
    s = summarize(replace(run_known, requests=reqs))
    assert s.itl_ms.count == 6
    assert s.itl_ms.p50 == pytest.approx(20.0)
    assert s.itl_ms.mean == pytest.approx(140 / 6)


def test_the_load_generators_own_account_is_shown(run_known: Run) -> None:
    extra = {"load": {"sent": 5, "dropped": 1, "late": 2, "max_lag_ms": 140.4, "not_sent": 3}}
    s = summarize(replace(run_known, meta=replace(run_known.meta, extra=extra)))
    assert s.load_generator["dropped"] == 1
    assert (
        "load generator: 5 sent, 1 dropped at its concurrency cap, 2 late (max lag 140 ms), "
        "3 not sent (stopped)"
    ) in render_table(s)
    assert "load generator" not in render_table(summarize(run_known))
