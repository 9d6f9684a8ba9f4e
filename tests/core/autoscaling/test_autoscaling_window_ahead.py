"""``autoscaling.predictive`` and the scale-down window: with a season learned, the window
holds no more than the pods for the forecast's peak over the window ahead (proposal 0019).
The forecast's peak (pure, a property test), the stabilization's ceiling (pure), and the
policy's decision with a forecast that says the demand does or does not come back."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.autoscaling import PolicyState, decide
from preheat.core.autoscaling.forecast import (
    SHORTFALL_EDGES,
    Forecast,
    HoltWinters,
    peak,
    predict,
)
from preheat.core.autoscaling.stabilize import ceiled, stabilized
from preheat.core.pool import PredictiveConfig
from tests.core.autoscaling.autoscalingkit import at_rate, config, ctx

PERIOD = 2400.0  # 24 slots of 100 s
HW = HoltWinters(period_s=PERIOD)


def _forecast(
    t: float,
    level: float,
    season: tuple[float, ...],
    *,
    learned_s: float = 2 * PERIOD,
    short: dict[float, float] | None = None,
) -> Forecast:
    """A forecast at ``t``; ``short``: its shortfall histogram, counts by bucket edge."""
    counts = tuple((short or {}).get(edge, 0.0) for edge in SHORTFALL_EDGES)
    return Forecast(t, level, 0.0, season, t - learned_s, base=level, shortfalls=counts)


#: a forecast checked 100 times: 80 exact, 20 short by up to 20% of what came (p90: 20%)
CHECKED = {0.0: 80.0, 0.2: 20.0}


@settings(max_examples=200, deadline=None)
@given(
    season=st.lists(st.floats(-50.0, 50.0), min_size=24, max_size=24),
    trend=st.floats(-0.1, 0.1),
    t=st.floats(0.0, 10 * PERIOD),
    within=st.floats(0.0, 2 * PERIOD),
)
def test_the_peak_is_the_highest_prediction_over_the_window(
    season: list[float], trend: float, t: float, within: float
) -> None:
    f = replace(_forecast(t, 100.0, tuple(season)), trend=trend)
    grid = [predict(f, within * i / 2000.0, HW) for i in range(2001)]
    top = peak(f, within, HW)
    assert top >= max(grid) - 1e-9  # no point of the window is higher
    # and it is a point of it: no higher than the grid by more than the prediction's slope
    # (the trend, and at most 100 req/s of offset per 100-s slot) across one grid step
    slope = abs(trend) + 100.0 / (PERIOD / 24)
    assert top <= max(grid) + slope * within / 2000.0 + 1e-9


def test_without_a_season_the_peak_is_the_higher_end() -> None:
    season = tuple(100.0 if i == 3 else 0.0 for i in range(24))
    young = _forecast(0.0, 40.0, season, learned_s=PERIOD / 2)  # half a period: no season
    assert peak(replace(young, trend=0.01), 300.0, HW) == pytest.approx(43.0)
    assert peak(replace(young, trend=-0.01), 300.0, HW) == pytest.approx(40.0)
    learned = _forecast(0.0, 40.0, season)
    assert peak(learned, 300.0, HW) == pytest.approx(90.0)  # halfway to slot 3's middle
    assert peak(learned, 400.0, HW) == pytest.approx(140.0)  # slot 3's middle, at 350 s


def test_the_ceiling_bounds_the_down_window_and_its_unseen_part_only() -> None:
    cfg = config(down=(300.0, 0.0, 100))
    history = ((100.0, 10), (200.0, 4))
    held = stabilized(history, 250.0, 10, cfg)
    assert held == 10  # the window holds its highest
    assert ceiled(held, 10, 6) == 6
    assert ceiled(held, 10, 12) == 10  # never above current
    assert ceiled(held, 10, None) == 10
    unseen = stabilized(((200.0, 4),), 250.0, 10, cfg, since=150.0)
    assert unseen == 10  # unseen: current
    assert ceiled(unseen, 10, 6) == 6
    # the up window is not the ceiling's
    up = stabilized(((200.0, 14),), 250.0, 10, cfg)
    assert up == 14
    assert ceiled(up, 10, 6) == 14


NOW = 10_000.0  # slot 4 of the period (400-500 s into it)


def _after_a_peak(
    pred: PredictiveConfig,
    season: tuple[float, ...],
    *,
    learned_s: float = 2 * PERIOD,
    short: dict[float, float] | None = CHECKED,
) -> tuple[int, str]:
    """10 pods, held by the window after a peak of 200 req/s a minute ago; 40 req/s now."""
    cfg = replace(config(down=(300.0, 0.0, 100)), predictive=pred)
    f = _forecast(NOW - 15.0, 40.0, season, learned_s=learned_s, short=short)
    state = PolicyState(history=((NOW - 60.0, 10), (NOW - 15.0, 3)), since=NOW - 3600.0, forecast=f)
    d, _ = decide(ctx(NOW, at_rate(NOW, 40.0), desired=10, cfg=cfg, max_=40, state=state))
    return d.active, d.reason


ON = PredictiveConfig(enabled=True, period_s=PERIOD)
FLAT = (0.0,) * 24
#: the demand comes back 200 s from now (slots 5-7 of the period: 500-800 s into it)
BACK = tuple(160.0 if i in (5, 6, 7) else 0.0 for i in range(24))


def test_a_forecast_that_says_the_demand_does_not_come_back_sheds_what_the_window_held() -> None:
    off, why = _after_a_peak(PredictiveConfig(enabled=False, period_s=PERIOD), FLAT)
    assert off == 10
    assert why.endswith("stabilizing (down)")
    on, why = _after_a_peak(ON, FLAT)
    assert on < 10
    # 40 req/s over its p90 shortfall (20%): 50 req/s
    assert (
        "the forecast's peak over the next 300 s 40.0 req/s, over its p90 shortfall 20%: "
        f"50.0 req/s needs {on}, the scale-down window holds no more" in why
    )
    exact, _ = _after_a_peak(ON, FLAT, short={0.0: 100.0})
    assert exact <= on
    # a forecast that has run far short of what came holds more of what the window held
    wild, _ = _after_a_peak(ON, FLAT, short={0.0: 50.0, 0.75: 50.0})
    assert on < wild


def test_a_forecast_that_says_the_demand_comes_back_within_the_window_holds_it() -> None:
    shed, _ = _after_a_peak(ON, FLAT)
    held, why = _after_a_peak(ON, BACK)
    assert held > shed
    # the pods 200 req/s needs, as many as the window held (the peak a minute ago)
    assert held == 10
    assert "the scale-down window holds no more" not in why


def test_a_forecast_without_a_season_or_a_checked_error_does_not_bound_the_window() -> None:
    held, why = _after_a_peak(ON, FLAT, learned_s=PERIOD / 2)
    assert held == 10
    assert why.endswith("stabilizing (down)")
    held, why = _after_a_peak(ON, FLAT, short=None)  # none of its predictions checked yet
    assert held == 10
    assert why.endswith("stabilizing (down)")


def test_the_unseen_window_of_a_fresh_policy_is_bounded_by_a_learned_season() -> None:
    """A policy that starts (a new operator, the simulator's first evaluation) with a
    season learned (restored from the pool's status, or read from a history) sheds the
    starting size the forecast does not need; without a forecast it holds a window."""
    cfg = replace(config(down=(300.0, 0.0, 100)), predictive=ON)
    fresh = PolicyState(forecast=_forecast(NOW - 15.0, 40.0, FLAT, short=CHECKED))
    d, _ = decide(ctx(NOW, at_rate(NOW, 40.0), desired=16, cfg=cfg, max_=40, state=fresh))
    assert d.active < 16
    assert "the scale-down window holds no more" in d.reason
    d, _ = decide(ctx(NOW, at_rate(NOW, 40.0), desired=16, cfg=cfg, max_=40))
    assert d.active == 16
    assert d.reason.endswith("window began at start-up)")
