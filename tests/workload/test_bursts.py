"""The bursty trace: span selection, rescaling, Poisson arrivals following the curve, Azure
sizes, determinism given the seed."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from preheat.workload.bursts import (
    BurstSpec,
    RateCurve,
    arrivals,
    bursty_trace,
    rate_curve,
    read_servegen_rates,
    requests_on_curve,
    select_span,
    write_preheat_jsonl,
)
from preheat.workload.superpose import superpose
from preheat.workload.traces import (
    MAX_TRACE_REQUESTS,
    TraceError,
    TraceOptions,
    TraceRequest,
    load_trace,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SERVEGEN = DATA / "servegen_aggregate_rate_10min.csv"
AZURE = DATA / "azure_llm_2023_conv.csv"


def test_select_span_prefers_a_climb_in_the_middle_and_skips_gaps() -> None:
    rates = [10.0] * 40
    rates[1] = 100.0  # a peak too close to the start of any span holding it
    rates[20] = 60.0  # a climb in the middle of spans 13..18
    rates[30] = 0.5  # a gap: spans holding it are skipped
    i = select_span(rates, 8)
    assert i <= 20 < i + 8
    assert 2 <= 20 - i < 6
    assert not i <= 30 < i + 8


def test_select_span_without_candidates_says_so() -> None:
    with pytest.raises(ValueError, match="no span of 4 windows"):
        select_span([5.0, 0.0, 5.0, 0.0, 5.0], 4)
    with pytest.raises(ValueError, match="at least"):
        select_span([1.0, 2.0], 4)


def test_rate_curve_keeps_the_shape_and_hits_the_mean() -> None:
    rates = [10.0] * 10 + [10.0, 20.0, 40.0, 20.0] + [10.0] * 10
    spec = BurstSpec(windows=8, window_s=30.0, mean_rps=5.0)
    c = rate_curve(rates, spec)
    assert statistics.fmean(c.rates_rps) == pytest.approx(5.0)
    assert c.peak_to_mean == pytest.approx(
        max(c.source_rates_rps) / statistics.fmean(c.source_rates_rps)
    )
    assert c.rate_at(-1.0) == 0.0
    assert c.rate_at(8 * 30.0) == 0.0


def test_arrivals_follow_the_piecewise_rate() -> None:
    spec = BurstSpec(windows=4, window_s=100.0, mean_rps=25.0)
    c = rate_curve([10.0, 10.0, 60.0, 20.0], spec)  # scaled to 10, 10, 60, 20 req/s
    times = arrivals(c, random.Random(7))
    assert times == sorted(times)
    counts = [sum(1 for t in times if i * 100 <= t < (i + 1) * 100) for i in range(4)]
    for n, rate in zip(counts, c.rates_rps, strict=True):
        expected = rate * 100
        assert abs(n - expected) < 5 * expected**0.5, (counts, c.rates_rps)


def test_bursty_trace_is_deterministic_given_the_seed(tmp_path: Path) -> None:
    spec = BurstSpec(windows=8, window_s=10.0, mean_rps=5.0, seed=3)
    a, curve = bursty_trace(spec, SERVEGEN, AZURE)
    b, _ = bursty_trace(spec, SERVEGEN, AZURE)
    c, _ = bursty_trace(BurstSpec(windows=8, window_s=10.0, mean_rps=5.0, seed=4), SERVEGEN, AZURE)
    assert a == b
    assert a != c
    assert curve.workload == "language/m-small"
    assert all(0 <= r.arrival_s < spec.duration_s for r in a)
    assert [r.index for r in a] == list(range(len(a)))
    # sizes are Azure rows, in the trace's order from a seeded offset (wrapping around)
    azure = load_trace(AZURE, TraceOptions(fmt="azure"))
    start = next(i for i, r in enumerate(azure) if r.line == a[0].line)
    for k, r in enumerate(a):
        row = azure[(start + k) % len(azure)]
        assert (r.input_tokens, r.output_tokens) == (row.input_tokens, row.output_tokens)
    # the file round-trips through the trace loader
    out = tmp_path / "bursty.jsonl"
    write_preheat_jsonl(a, out)
    back = load_trace(out)
    assert [(r.input_tokens, r.output_tokens) for r in back] == [
        (r.input_tokens, r.output_tokens) for r in a
    ]
    assert back[-1].arrival_s == pytest.approx(a[-1].arrival_s - a[0].arrival_s, abs=1e-3)


def test_bad_inputs_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mean_rps must be > 0"):
        BurstSpec(mean_rps=0)
    with pytest.raises(TraceError, match="no windows for workload 'nope'"):
        read_servegen_rates(SERVEGEN, "nope")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match="CSV header"):
        read_servegen_rates(bad, "x")


def test_a_curve_that_would_make_more_requests_than_memory_holds_is_refused_first(
    tmp_path: Path,
) -> None:
    # `preheat bench traces --diurnal-peak-rps 1e9` generated until the machine ran out of
    # memory (35 trillion requests); the expected count is checked before any is made, so
    # not even the Azure file is read (a path that does not exist is not reached)
    curve = RateCurve("w", 0, (1.0, 3.0), (1e9, 3e9), 600.0)
    with pytest.raises(ValueError, match=r"about 2,400,000,000,000 requests; at most 20,000,000"):
        requests_on_curve(curve, tmp_path / "absent.csv", seed=0)
    # at the bound it goes on, to the Azure file
    fits = RateCurve("w", 0, (1.0,), (MAX_TRACE_REQUESTS / 600.0,), 600.0)
    with pytest.raises(TraceError, match=r"absent\.csv"):
        requests_on_curve(fits, tmp_path / "absent.csv", seed=0)


def test_superposed_copies_over_the_bound_are_refused_before_they_are_made() -> None:
    one = [TraceRequest(arrival_s=float(i), input_tokens=8, output_tokens=2) for i in range(10)]
    assert len(superpose(one, 3)) == 30
    with pytest.raises(ValueError, match=r"2,000,001 copies of 10 requests would make about"):
        superpose(one, 2_000_001)
