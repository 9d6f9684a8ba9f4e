"""The request mix from the workers' counters: parsed from /metrics, windowed like the
histograms (increase between the newest scrape and the one at the window's start)."""

from __future__ import annotations

import pytest

from preheat.autoscaler.scrape import Scrape, Served, parse_scrape, served_mix

METRICS = """\
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 8
vllm:request_success_total{finished_reason="length",model_name="m"} 2
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 12000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 3000
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 640
"""


def test_parse_scrape_sums_the_request_counters_over_labels() -> None:
    s = parse_scrape(1.0, METRICS)
    assert s.served == Served(10.0, 12000.0, 3000.0, 640.0)


def test_a_worker_without_the_counters_has_no_served() -> None:
    assert parse_scrape(1.0, "vllm:num_requests_waiting 3\n").served is None


def _s(t: float, n: float, prompt: float, cached: float, out: float) -> Scrape:
    return Scrape(t, True, served=Served(n, prompt, cached, out))


def test_served_mix_is_the_windows_increase_per_request_summed_over_workers() -> None:
    history = {
        "a": [_s(0, 0, 0, 0, 0), _s(30, 10, 10_000, 1_000, 500), _s(60, 20, 20_000, 2_000, 1000)],
        "b": [_s(30, 5, 1_000, 0, 100), _s(60, 15, 11_000, 0, 1100)],
    }
    mix = served_mix(history, 60.0, 30.0)
    assert mix is not None
    # a: +10 requests, +10,000 prompt, +1,000 cached, +500 out; b: +10, +10,000, 0, +1,000
    assert mix.requests == 20
    assert mix.prompt_tokens == pytest.approx(1000.0)
    assert mix.cached_tokens == pytest.approx(50.0)
    assert mix.output_tokens == pytest.approx(75.0)


def test_served_mix_is_none_without_finished_requests_or_counters() -> None:
    idle = {"a": [_s(0, 5, 10, 0, 5), _s(30, 5, 10, 0, 5)]}
    assert served_mix(idle, 30.0, 30.0) is None
    bare = {"a": [Scrape(0, True), Scrape(30, True)]}
    assert served_mix(bare, 30.0, 30.0) is None


def test_a_counter_reset_counts_what_was_counted_since() -> None:
    history = {"a": [_s(0, 100, 100_000, 0, 1000), _s(30, 4, 4_000, 0, 40)]}
    mix = served_mix(history, 30.0, 30.0)
    assert mix is not None
    assert (mix.requests, mix.prompt_tokens, mix.output_tokens) == (4, 1000.0, 10.0)


def test_the_prometheus_source_asks_for_the_counters_increase_over_the_window() -> None:
    from preheat.autoscaler.prometheus import queries
    from preheat.autoscaler.source import SignalQuery
    from preheat.core.pool import Objective, Signal

    q = queries(SignalQuery((Objective(Signal.TTFT, 95.0, 400.0),), window_s=60.0), 'job="w"')
    assert q.served == (
        'sum(increase(vllm:request_success_total{job="w"}[60s]))',
        'sum(increase(vllm:prompt_tokens_total{job="w"}[60s]))',
        'sum(increase(vllm:prefix_cache_hits_total{job="w"}[60s]))',
        'sum(increase(vllm:generation_tokens_total{job="w"}[60s]))',
    )


def _answer(v: float) -> list[dict[str, object]]:
    return [{"metric": {}, "value": [0, str(v)]}]


def test_the_prometheus_answers_make_the_mix() -> None:
    from preheat.autoscaler.prometheus import _mix

    answers = {f"served:{k}": _answer(v) for k, v in enumerate((20.0, 20_000.0, 2_000.0, 1_500.0))}
    mix = _mix(answers)
    assert mix is not None
    assert (mix.requests, mix.prompt_tokens, mix.cached_tokens, mix.output_tokens) == (
        20.0,
        1000.0,
        100.0,
        75.0,
    )
    assert _mix({}) is None
    assert _mix({**answers, "served:0": _answer(float("nan"))}) is None
    assert _mix({**answers, "served:0": _answer(0.0)}) is None
