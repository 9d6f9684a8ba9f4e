"""``autoscaling.predictive.headroom``: the forecast's shortfall (how far the rate a horizon
later ran above each checked forecast) read as a percentile of its histogram (pure and
property tests), and the policy sizing for the forecast over one minus it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preheat.api.pool import PoolSpecError, to_config
from preheat.core.autoscaling import PolicyState, decide
from preheat.core.autoscaling.forecast import (
    MAX_SHORTFALL,
    SHORTFALL_EDGES,
    Forecast,
    HoltWinters,
    ahead,
    learn,
    observe,
    shortfall,
)
from preheat.core.pool import PredictiveConfig
from tests.core.autoscaling.autoscalingkit import at_rate, config, ctx

NEVER = HoltWinters(period_s=math.inf)  # nothing decays: counts stay whole


def _checked(pairs: list[tuple[float, float]], hw: HoltWinters = NEVER) -> Forecast:
    """A forecast whose predictions ``(forecast, observed)`` were each checked, 15 s apart."""
    f = observe(None, 0.0, 1.0, hw)
    for i, (predicted, seen) in enumerate(pairs, start=1):
        t = 15.0 * i
        f = observe(replace(f, pending=((t, predicted),)), t, seen, hw)
    return f


def test_the_shortfall_is_a_percentile_of_the_checked_forecasts() -> None:
    # 18 forecasts at or over what came, two 25% short of it (75 against 100)
    f = _checked([(100.0, 100.0)] * 9 + [(110.0, 100.0)] * 9 + [(75.0, 100.0)] * 2)
    assert shortfall(f, 0.9) == 0.0
    assert shortfall(f, 0.95) == 0.25
    assert shortfall(f, 0.99) == 0.25


def test_no_shortfall_is_read_before_ten_forecasts_are_checked() -> None:
    f = _checked([(75.0, 100.0)] * 9)
    assert shortfall(f, 0.9) is None
    assert shortfall(_checked([(75.0, 100.0)] * 10), 0.9) == 0.25
    assert shortfall(observe(None, 0.0, 5.0), 0.9) is None


def test_a_rise_from_silence_reads_at_most_the_cap() -> None:
    f = _checked([(0.0, 50.0)] * 12)  # forecast nothing, 50 req/s came
    assert shortfall(f, 0.9) == MAX_SHORTFALL


def test_the_shortfall_forgets_over_about_a_period() -> None:
    hw = HoltWinters(period_s=3_600.0)
    short = _checked([(60.0, 100.0)] * 20, hw)  # 40% short
    assert shortfall(short, 0.9) == 0.4
    f = short
    for i in range(1, 4 * 240 + 1):  # four periods of forecasts that were right
        t = f.t + 15.0
        f = observe(replace(f, pending=((t, 100.0),)), t, 100.0, hw)
        if i == 20:
            assert shortfall(f, 0.9) == 0.4  # 20 right against 20 short: still read
    assert shortfall(f, 0.9) == 0.0
    assert sum(f.shortfalls) < 400  # about a period's worth (240) kept, not all 980


@given(
    st.lists(st.tuples(st.floats(0, 1e3), st.floats(0.01, 1e3)), min_size=10, max_size=80),
    st.sampled_from([0.5, 0.75, 0.9, 0.99]),
)
def test_the_percentile_is_the_first_bucket_edge_that_covers_that_share(
    pairs: list[tuple[float, float]], q: float
) -> None:
    f = _checked(pairs)
    s = shortfall(f, q)
    assert s is not None
    shorts = [(seen - predicted) / seen for predicted, seen in pairs]  # signed
    n = len(shorts)
    assert SHORTFALL_EDGES[0] == -1.0 <= s <= MAX_SHORTFALL
    if s < MAX_SHORTFALL:
        assert sum(x <= s for x in shorts) >= q * n - 1e-6  # it covers q of them
    i = SHORTFALL_EDGES.index(s)
    if i > 0:
        below = SHORTFALL_EDGES[i - 1]
        assert sum(x <= below for x in shorts) < q * n + 1e-6  # the edge before does not


def test_a_history_learned_with_a_horizon_teaches_the_shortfall() -> None:
    # a rate that doubles every 10 minutes: a trend follows it, and still runs short
    samples = [(-3_600.0 + 60.0 * i, 10.0 * 2 ** (i / 10)) for i in range(60)]
    taught = learn(None, samples, HoltWinters(), horizon_s=120.0)
    plain = learn(None, samples, HoltWinters())
    assert taught is not None
    assert plain is not None
    assert plain.shortfalls == ()
    assert sum(taught.shortfalls) > 50
    s = shortfall(taught, 0.9)
    assert s is not None
    assert s > 0.0
    assert (taught.level, taught.trend) == (plain.level, plain.trend)  # it only predicts


RATE = 100.0  # req/s: about 5 pods at the estimate's ~20 per pod (proposal 0014)


def _short(q: float, s: float) -> Forecast:
    """A forecast of a steady ``RATE`` whose checked predictions fell ``s`` short ``1 - q``
    of the time (and were right otherwise)."""
    right = round(100 * q)
    return _checked([(RATE, RATE)] * right + [(RATE * (1 - s), RATE)] * (100 - right))


def test_headroom_sizes_for_the_forecast_over_its_shortfall_and_says_so() -> None:
    f = _short(0.85, 0.25)  # 15 in 100 were 25% short: the p90 is 25%
    state = PolicyState(forecast=f)
    now = f.t + 15.0

    def run(pred: PredictiveConfig, rate: float = RATE) -> tuple[int | None, str]:
        cfg = replace(config(), predictive=pred)
        d, _ = decide(ctx(now, at_rate(now, rate), desired=2, cfg=cfg, max_=40, state=state))
        return d.recommendation, d.reason

    with_room, reason = run(PredictiveConfig(enabled=True, headroom=90))
    without, plain_reason = run(PredictiveConfig(enabled=True))
    sized_for, _ = run(PredictiveConfig(enabled=True), rate=RATE / 0.75)
    assert with_room is not None
    assert without is not None
    assert with_room > without
    assert with_room == sized_for  # the estimate sized for RATE / (1 - 0.25) req/s
    assert "its p90 shortfall 25%: at least 133.3 req/s" in reason, reason
    assert "shortfall" not in plain_reason
    # off: the forecast says it (decision.forecast), and nothing is sized for it
    off, off_reason = run(PredictiveConfig(enabled=False, headroom=90))
    plain, _ = run(PredictiveConfig(enabled=False))
    assert off == plain
    assert "shortfall" not in off_reason


def test_the_decision_carries_the_shortfall_read() -> None:
    f = _short(0.85, 0.25)
    now = f.t + 15.0
    for q, want in ((90.0, 0.25), (80.0, 0.0)):
        cfg = replace(config(), predictive=PredictiveConfig(enabled=True, headroom=q))
        c = ctx(now, at_rate(now, RATE), desired=2, cfg=cfg, state=PolicyState(forecast=f))
        d, state = decide(c)
        assert d.forecast is not None
        assert d.forecast.headroom == (q, want)
        assert state.forecast is not None
        # nothing was due to be checked: the counts only decayed over the 15 s, by a day's
        decay = math.exp(-15.0 / 86_400.0)
        assert sum(state.forecast.shortfalls) == pytest.approx(sum(f.shortfalls) * decay)
    cfg = replace(config(), predictive=PredictiveConfig(enabled=True))
    d, _ = decide(ctx(now, at_rate(now, RATE), desired=2, cfg=cfg, state=PolicyState(forecast=f)))
    assert d.forecast is not None
    assert d.forecast.headroom is None


def test_headroom_is_never_below_what_the_trust_alone_sizes_for() -> None:
    f = _short(1.0, 0.0)  # never short: the headroom reads 0
    now = f.t + 15.0
    for q in (0.0, 90.0):
        cfg = replace(config(), predictive=PredictiveConfig(enabled=True, trust=1.0, headroom=q))
        d, _ = decide(
            ctx(now, at_rate(now, RATE), desired=2, cfg=cfg, state=PolicyState(forecast=f))
        )
        assert d.recommendation is not None
        if q == 0.0:
            base = d.recommendation
    assert d.recommendation == base


def test_the_crd_field_reads_a_percentile_and_refuses_100() -> None:
    spec: dict[str, object] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 2},
        "autoscaling": {"predictive": {"enabled": True}},
    }
    assert to_config(spec, name="p", namespace="n").autoscaling.predictive.headroom == 0.0
    spec["autoscaling"] = {"predictive": {"enabled": True, "headroom": 90}}
    assert to_config(spec, name="p", namespace="n").autoscaling.predictive.headroom == 90.0
    for bad in (100, -1):
        spec["autoscaling"] = {"predictive": {"enabled": True, "headroom": bad}}
        with pytest.raises(PoolSpecError, match=r"autoscaling\.predictive\.headroom"):
            to_config(spec, name="p", namespace="n")


def test_the_forecast_ahead_keeps_its_histogram() -> None:
    f = _short(0.85, 0.25)
    g, said = ahead(f, 60.0, NEVER)
    assert g.shortfalls == f.shortfalls
    assert said.headroom is None  # the policy reads it, with the pool's percentile


def _keep_run(desired: int, pred: PredictiveConfig, rate: float = RATE) -> tuple[int, str]:
    """The recommendation and reason for a pool of ``desired`` at ``rate``, whose forecast's
    p90 shortfall is 50% (see :func:`_short`)."""
    f = _short(0.85, 0.5)
    now = f.t + 15.0
    cfg = replace(config(), predictive=pred)
    c = ctx(
        now, at_rate(now, rate), desired=desired, cfg=cfg, max_=40, state=PolicyState(forecast=f)
    )
    d, _ = decide(c)
    assert d.recommendation is not None
    return d.recommendation, d.reason


def test_a_keeping_headroom_stops_a_scale_down_at_it_and_starts_nothing() -> None:
    keep = PredictiveConfig(enabled=True, headroom=90, headroom_keeps=True)
    plain = PredictiveConfig(enabled=True)
    sized_for, _ = _keep_run(2, plain, rate=RATE / 0.5)  # what headroom 90 sizes for
    needs, _ = _keep_run(2, plain)
    assert sized_for > needs + 1  # room between the two for a pool to sit in
    # a large pool keeps what the forecast over its shortfall needs, and says so
    kept, reason = _keep_run(sized_for + 5, keep)
    assert kept == sized_for
    assert f"headroom keeps at least {sized_for} of {sized_for + 5}" in reason, reason
    assert "its p90 shortfall 50%: keeps pods for 200.0 req/s" in reason
    # a pool between the two keeps what it has
    kept, reason = _keep_run(needs + 1, keep)
    assert kept == needs + 1
    assert f"headroom keeps at least {needs + 1} of {needs + 1}" in reason, reason
    # a small pool grows to what the rate needs, not to the headroom
    grown, reason = _keep_run(2, keep)
    assert grown == needs
    assert "headroom keeps" not in reason
    # off: nothing kept
    off, reason = _keep_run(sized_for + 5, replace(keep, enabled=False))
    assert off == _keep_run(sized_for + 5, replace(plain, enabled=False))[0]
    assert "headroom keeps" not in reason


@given(st.integers(min_value=1, max_value=40), st.sampled_from([50.0, 80.0, 90.0]))
def test_a_keeping_headroom_is_the_plain_recommendation_raised_to_at_most_the_pool(
    desired: int, q: float
) -> None:
    """keep = max(plain, min(what the headroom sizes for, the pool)): never above the pool
    unless the plain policy is, never below the plain policy."""
    plain, _ = _keep_run(desired, PredictiveConfig(enabled=True))
    sized, _ = _keep_run(desired, PredictiveConfig(enabled=True, headroom=q))
    kept, _ = _keep_run(desired, PredictiveConfig(enabled=True, headroom=q, headroom_keeps=True))
    assert kept == max(plain, min(sized, desired))


def test_the_crd_field_reads_the_headroom_mode() -> None:
    spec: dict[str, object] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 2},
        "autoscaling": {"predictive": {"enabled": True, "headroom": 75}},
    }
    assert not to_config(spec, name="p", namespace="n").autoscaling.predictive.headroom_keeps
    spec["autoscaling"] = {"predictive": {"headroom": 75, "headroomMode": "keep"}}
    assert to_config(spec, name="p", namespace="n").autoscaling.predictive.headroom_keeps
    spec["autoscaling"] = {"predictive": {"headroom": 75, "headroomMode": "hold"}}
    with pytest.raises(PoolSpecError, match=r"autoscaling\.predictive\.headroomMode"):
        to_config(spec, name="p", namespace="n")


def test_a_forecast_that_ran_over_reads_under_itself() -> None:
    # 60 in 100 forecasts ran 25% over what came (125 against 100), 40 were right: the
    # median is under the forecast, the p90 at it (counted as 0 short, the median read 0%
    # and kept the forecast's whole bias)
    f = _checked([(125.0, 100.0)] * 60 + [(100.0, 100.0)] * 40)
    assert shortfall(f, 0.5) == -0.25
    assert shortfall(f, 0.9) == 0.0
    assert shortfall(_checked([(300.0, 100.0)] * 20), 0.5) == -1.0  # at most halves it


def test_a_keeping_headroom_keeps_no_pods_for_a_forecasts_bias() -> None:
    """A forecast that ran 25% over what came at its median keeps pods for itself over
    1.25 at ``headroom: 50``; one that was right keeps them for itself."""
    keep = PredictiveConfig(enabled=True, headroom=50, headroom_keeps=True)

    def said(history: list[tuple[float, float]]) -> str:
        f = _checked(history)
        now = f.t + 15.0
        cfg = replace(config(), predictive=keep)
        c = ctx(now, at_rate(now, 60.0), desired=40, cfg=cfg, max_=40,
                state=PolicyState(forecast=f))  # fmt: skip
        return decide(c)[0].reason

    biased = said([(125.0, 100.0)] * 60 + [(100.0, 100.0)] * 40)
    right = said([(100.0, 100.0)] * 100)
    assert "forecast 64.0 req/s" in biased, biased
    assert "forecast 64.0 req/s" in right, right
    assert "its p50 shortfall -25%: keeps pods for 51.2 req/s" in biased, biased
    assert "its p50 shortfall 0%: keeps pods for 64.0 req/s" in right, right
