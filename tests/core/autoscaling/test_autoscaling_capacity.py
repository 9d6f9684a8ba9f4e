"""The capacity estimate and the bounded latency step (pure; table and property tests)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.autoscaling import Demand, Mix, PolicyTuning, ServiceCost, decide
from preheat.core.autoscaling.capacity import combine, pod_rate, predicted_ttft_ms, replicas_for
from preheat.core.autoscaling.recommend import needed
from preheat.core.pool import Objective, Signal
from preheat.engine.costmodel import CostModel
from tests.core.autoscaling.autoscalingkit import ctx, signals

COST = ServiceCost()
AZURE = Mix(requests=100, prompt_tokens=1155, cached_tokens=0, output_tokens=211)


@pytest.mark.parametrize("tokens", [16, 256, 1024, 2048, 4096, 8192])
def test_the_prefill_fit_is_within_10_percent_of_the_engine_cost_model(tokens: int) -> None:
    engine = CostModel.default()
    assert COST.prefill_ms(tokens) == pytest.approx(engine.prefill_ms(tokens), rel=0.1)


@pytest.mark.parametrize(("batch", "context"), [(1, 500), (16, 1500), (64, 1500), (200, 4000)])
def test_the_decode_fit_is_within_10_percent_of_the_engine_cost_model(
    batch: int, context: int
) -> None:
    engine = CostModel.default()
    assert COST.step_ms(batch, context) == pytest.approx(
        engine.decode_step_ms(batch, context), rel=0.1
    )


def test_one_pod_takes_more_at_a_looser_target_and_less_for_longer_prompts() -> None:
    tight = pod_rate(COST, AZURE, 300.0, 99.0)
    loose = pod_rate(COST, AZURE, 500.0, 99.0)
    assert 0 < tight < loose
    longer = replace(AZURE, prompt_tokens=4000)
    assert pod_rate(COST, longer, 500.0, 99.0) < loose
    cached = replace(longer, cached_tokens=3000)  # a prefix-cache hit is not prefilled
    assert pod_rate(COST, cached, 500.0, 99.0) > pod_rate(COST, longer, 500.0, 99.0)


def test_a_prompt_whose_prefill_alone_misses_the_target_gets_no_rate() -> None:
    huge = replace(AZURE, prompt_tokens=40_000)
    assert pod_rate(COST, huge, 300.0, 99.0) == 0.0
    assert replicas_for(5.0, COST, huge, 300.0, 99.0, highest=12) == 12


def test_replicas_for_is_the_rate_over_one_pods_rate_within_bounds() -> None:
    per_pod = pod_rate(COST, AZURE, 500.0, 99.0)
    assert replicas_for(per_pod * 3.5, COST, AZURE, 500.0, 99.0, highest=32) == 4
    assert replicas_for(per_pod * 100, COST, AZURE, 500.0, 99.0, highest=32) == 32
    assert replicas_for(0.01, COST, AZURE, 500.0, 99.0, highest=32) == 1
    assert replicas_for(0.0, COST, AZURE, 500.0, 99.0, highest=32) is None
    assert replicas_for(5.0, COST, replace(AZURE, requests=0), 500.0, 99.0, highest=32) is None


mixes = st.builds(
    Mix,
    st.just(10.0),
    st.floats(1, 20_000),
    st.just(0.0),
    st.floats(1, 2_000),
)


@settings(max_examples=60, deadline=None)
@given(mixes, st.floats(0.01, 50), st.floats(0.01, 50))
def test_predicted_ttft_never_falls_as_the_rate_rises(mix: Mix, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert predicted_ttft_ms(COST, mix, lo, 99.0) <= predicted_ttft_ms(COST, mix, hi, 99.0)


@settings(max_examples=60, deadline=None)
@given(mixes, st.floats(100, 5_000), st.floats(50, 99.9))
def test_at_the_pod_rate_the_prediction_meets_the_target(
    mix: Mix, target: float, pct: float
) -> None:
    rate = pod_rate(COST, mix, target, pct)
    if rate > 0:
        assert predicted_ttft_ms(COST, mix, rate, pct) <= target + 1e-6


@given(st.integers(1, 64), st.floats(0, 1000), st.floats(0.1, 10))
def test_the_latency_step_is_bounded_by_the_factor(
    serving: int, ratio: float, factor: float
) -> None:
    obj = Objective(Signal.TTFT, 95.0, 400.0)
    n = needed(obj, 400.0 * ratio, serving, factor)
    assert n is not None
    assert n <= math.ceil(round(serving * factor, 9))
    assert n == math.ceil(round(serving * min(ratio, factor), 9))


@given(
    st.integers(1, 64) | st.none(),
    st.integers(0, 200) | st.none(),
    st.integers(0, 64),
    st.booleans(),
)
def test_combine_keeps_the_model_as_floor_and_caps_a_backlogs_feedback(
    model: int | None, feedback: int | None, serving: int, late: bool
) -> None:
    got = combine(model, feedback, serving, late)
    if model is None:
        assert got == feedback
        return
    assert got is not None
    assert got >= model
    if feedback is not None and late:
        assert got <= max(model, 2 * model, serving + 1)
    if feedback is not None and not late:
        assert got == max(model, feedback)


def test_the_policy_sizes_from_the_rate_when_latency_is_still_fine() -> None:
    """A rate rise the served latency has not felt yet: the estimate scales up now."""
    per_pod = pod_rate(COST, AZURE, 400.0, 95.0)
    sig = replace(
        signals(0.0, 200.0),
        demand=Demand(arrival_rate=per_pod * 5.5, refused_rate=0.0, window_s=60.0),
        mix=AZURE,
    )
    dec, _ = decide(ctx(0.0, sig, desired=3))
    assert dec.active == 6
    assert "capacity: " in dec.reason
    assert "needs 6" in dec.reason
    # feedback only (no cost model): 200 ms under 400 ms asks for less
    off, _ = decide(ctx(0.0, sig, desired=3, tuning=PolicyTuning(cost=None)))
    assert off.active <= 3
    assert "capacity" not in off.reason


def test_a_backlog_asks_for_no_more_than_twice_the_model() -> None:
    """Late by 10x on 2 pods: feedback alone would ask for 6 (the step bounded at 3x); the
    model for the rate says 1, so the backlog gets max(2 x 1, 2 + 1) = 3."""
    sig = replace(
        signals(0.0, 4000.0),
        demand=Demand(arrival_rate=1.0, refused_rate=0.0, window_s=60.0),
        mix=AZURE,
    )
    dec, _ = decide(ctx(0.0, sig, desired=2))
    assert dec.active == 3
    bare, _ = decide(ctx(0.0, sig, desired=2, tuning=PolicyTuning(cost=None)))
    assert bare.active == 6  # ceil(2 x min(10, 3))
