"""``autoscaling.predictive``: the Holt-Winters forecast (pure, property and table tests) and
the policy sizing for a predicted rise, never for a predicted fall."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.api.pool import to_config
from preheat.core.autoscaling import PolicyState, decide
from preheat.core.autoscaling.forecast import (
    MAX_PENDING,
    Accuracy,
    Forecast,
    HoltWinters,
    accuracy,
    ahead,
    observe,
    offset,
    predict,
    seasonal,
    weekly,
)
from preheat.core.autoscaling.memory import remember, restore
from preheat.core.pool import PredictiveConfig
from tests.core.autoscaling.autoscalingkit import at_rate, config, ctx, signals

HW = HoltWinters()


def _feed(points: list[tuple[float, float]], hw: HoltWinters = HW) -> Forecast:
    f: Forecast | None = None
    for t, y in points:
        f = observe(f, t, y, hw)
    assert f is not None
    return f


def test_a_steady_rate_forecasts_itself() -> None:
    f = _feed([(15.0 * i, 20.0) for i in range(40)])
    assert predict(f, 60.0) == pytest.approx(20.0)
    assert f.trend == pytest.approx(0.0)


def test_a_linear_rise_is_extrapolated_over_the_horizon() -> None:
    # 10 req/s rising 0.1 req/s per second
    f = _feed([(15.0 * i, 10.0 + 1.5 * i) for i in range(60)])
    now = 10.0 + 1.5 * 59
    assert f.trend == pytest.approx(0.1, rel=0.05)
    assert predict(f, 60.0) == pytest.approx(now + 6.0, rel=0.05)


def test_the_daily_season_is_used_only_after_a_whole_day() -> None:
    hw = HoltWinters(period_s=100.0, slots=4, alpha=0.3, beta=0.0, gamma=0.5)
    # slot 2 (t in [50, 75)) is 30 over the rest's 10
    day = [(float(t), 40.0 if 50 <= t % 100 < 75 else 10.0) for t in range(0, 100, 5)]
    part = _feed(day[:-1], hw)
    assert not seasonal(part, hw)  # no season yet: level + trend only
    weeks = [(t + 100.0 * d, y) for d in range(8) for t, y in day]
    f = _feed(weeks, hw)
    # at t=795 (slot 3): 55 s ahead is slot 2 of the next day, 15 s ahead is slot 3
    assert predict(f, 55.0, hw) > predict(f, 15.0, hw) + 15.0


def test_the_season_is_read_between_the_slots_middles_not_stepped_at_their_edges() -> None:
    """An hour's offset holds at its middle and the offsets between are a straight line, so
    a forecast a cold start before the hour does not see the whole of the next hour's rise
    (on the 10x diurnal day a day-old season's steps were predicted in full a minute
    before each hour and held pods for a scale-down window)."""
    hw = HoltWinters(period_s=100.0, slots=4)
    f = Forecast(t=100.0, level=0.0, trend=0.0, season=(0.0, 0.0, 60.0, 0.0), since=0.0)
    assert offset(f, 62.5, hw) == pytest.approx(60.0)  # slot 2's middle
    assert offset(f, 37.5, hw) == pytest.approx(0.0)  # slot 1's middle
    assert offset(f, 50.0, hw) == pytest.approx(30.0)  # the edge: half way
    assert offset(f, 45.0, hw) == pytest.approx(18.0)  # 5 s before it
    assert offset(f, 112.5 + 0.0, hw) == pytest.approx(0.0)  # the next period, slot 0
    assert offset(f, 99.0, hw) == pytest.approx(offset(f, -1.0, hw))  # wraps around
    # no step anywhere: 0.5 s never moves it by more than the steepest slope allows
    steps = [abs(offset(f, t / 2 + 0.5, hw) - offset(f, t / 2, hw)) for t in range(400)]
    assert max(steps) <= 60.0 / 25.0 * 0.5 + 1e-9


def test_one_day_at_the_evaluation_interval_teaches_the_season() -> None:
    """The defaults, observed every 15 s as the operator does: a day whose rate doubles at
    noon (10 -> 20 req/s). At 11:30 the next day the forecast an hour ahead sees the rise
    (it said 10.0 when the season was learned against the level, which follows the rate
    within a few evaluations), ten minutes ahead a sixth of it (the season is read in a
    straight line between the hours' middles, 11:30 and 12:30), and into the afternoon it
    stays up."""

    def rate(t: float) -> float:
        return 20.0 if (t % 86_400.0) >= 43_200.0 else 10.0

    f = _feed([(15.0 * i, rate(15.0 * i)) for i in range(int((86_400 + 41_400) / 15))])
    assert seasonal(f, HW)
    assert predict(f, 600.0) == pytest.approx(10.0 + 10.0 / 6, abs=1.0)
    assert predict(f, 600.0) < predict(f, 1_800.0) < predict(f, 3_600.0)
    assert predict(f, 3_600.0) > 15.0
    assert predict(f, 6 * 3_600.0) > 15.0


def test_the_season_learns_at_the_same_pace_whatever_the_interval() -> None:
    """gamma is per period: a day observed every 5 s or every 60 s learns the same offsets
    (within a few percent)."""

    def rate(t: float) -> float:
        return 20.0 if (t % 86_400.0) >= 43_200.0 else 10.0

    learned = []
    for step in (5.0, 60.0):
        f = _feed([(step * i, rate(step * i)) for i in range(int(2 * 86_400 / step))])
        learned.append(f.season)
    for a, b in zip(*learned, strict=True):
        assert a == pytest.approx(b, abs=0.25)


def _workweek(t: float) -> float:
    """Five days whose rate doubles from noon, then two flat days (a week of 7 periods of
    100 s: noon is t % 100 >= 50, the weekend is days 5 and 6)."""
    day = int(t // 100.0) % 7
    return 20.0 if day < 5 and (t % 100.0) >= 50.0 else 10.0


WEEKLY = HoltWinters(period_s=100.0, slots=4, alpha=0.5, beta=0.0, gamma=0.5, weekly=True)


def test_one_day_of_history_teaches_the_whole_of_its_shape_not_gamma_of_it() -> None:
    """A slot's first pass has no earlier day to keep a share of: its offset is the pass's
    mean deviation in full. After one day whose rate doubles at noon (10 -> 20 req/s, every
    15 s), the next day's afternoon offset is 10 req/s over the morning's (until
    2026-12-02 it was 5: ``gamma`` 0.5 of the only day seen), and a second, equal day
    changes it little. ``gamma`` 0 still learns nothing."""

    def rate(t: float) -> float:
        return 20.0 if (t % 86_400.0) >= 43_200.0 else 10.0

    def spread(f: Forecast) -> float:  # the afternoon's offset over the morning's
        return sum(f.season[12:]) / 12 - sum(f.season[:12]) / 12

    one = _feed([(15.0 * i, rate(15.0 * i)) for i in range(int(86_400 / 15))])
    assert spread(one) == pytest.approx(10.0, abs=1.0)
    two = _feed([(15.0 * i, rate(15.0 * i)) for i in range(int(2 * 86_400 / 15))])
    assert spread(two) == pytest.approx(spread(one), abs=1.0)
    flat = replace(HW, gamma=0.0)
    none = _feed([(15.0 * i, rate(15.0 * i)) for i in range(int(86_400 / 15))], flat)
    assert none.season == (0.0,) * HW.slots


def test_a_weekly_season_foresees_the_weekend_the_daily_one_does_not() -> None:
    """After three weeks, on Saturday at 40 (before noon) the forecast 15 s ahead: the daily
    season alone expects the weekday's afternoon doubling (yesterday's, Friday's), the
    weekly one knows Saturdays stay flat; on the Monday after, both expect the rise."""
    daily = replace(WEEKLY, weekly=False)
    saturday = 100.0 * (3 * 7 + 5) + 40.0
    points = [(float(t), _workweek(float(t))) for t in range(0, int(saturday) + 1, 5)]
    fw, fd = _feed(points, WEEKLY), _feed(points, daily)
    assert weekly(fw, WEEKLY)
    assert not weekly(fd, daily)
    assert predict(fd, 15.0, daily) > 15.0  # Friday's afternoon, wrongly
    assert predict(fw, 15.0, WEEKLY) == pytest.approx(10.0, abs=2.5)
    monday = 100.0 * (3 * 7 + 7) + 40.0
    more = [(float(t), _workweek(float(t))) for t in range(int(saturday) + 5, int(monday) + 1, 5)]
    fw, fd = _feed(points + more, WEEKLY), _feed(points + more, daily)
    assert predict(fw, 15.0, WEEKLY) > 15.0
    assert predict(fw, 15.0, WEEKLY) >= predict(fd, 15.0, daily) - 1.0


@settings(max_examples=30)
@given(st.lists(st.floats(min_value=0.0, max_value=500.0), min_size=2, max_size=200))
def test_a_weekly_season_changes_nothing_before_seven_periods(rates: list[float]) -> None:
    """Until the weekly history covers seven periods, the forecast with a weekly season
    predicts exactly what the one without does (the daily season learns alone)."""
    daily = replace(WEEKLY, weekly=False)
    step = 7 * 100.0 / 200  # 200 observations fit in a week
    fw: Forecast | None = None
    fd: Forecast | None = None
    for i, y in enumerate(rates):
        fw, fd = observe(fw, step * i, y, WEEKLY), observe(fd, step * i, y, daily)
        assert not weekly(fw, WEEKLY)
        for h in (15.0, 60.0, 250.0):
            assert predict(fw, h, WEEKLY) == pytest.approx(predict(fd, h, daily), abs=1e-9)


def test_turning_the_weekly_season_on_or_off_starts_it_again() -> None:
    daily = replace(WEEKLY, weekly=False)
    points = [(float(t), _workweek(float(t))) for t in range(0, 1_000, 5)]
    fd = _feed(points, daily)
    assert fd.week == ()
    assert fd.week_since is None
    on = observe(fd, 1_000.0, 10.0, WEEKLY)  # weekly turned on: learned from now
    assert len(on.week) == 28
    assert on.week_since == fd.t
    assert not weekly(on, WEEKLY)
    assert on.since == fd.since  # the daily season is kept
    unknown = observe(replace(on, week_since=None), 1_005.0, 10.0, WEEKLY)
    assert unknown.week_since == on.t  # offsets of no known age: learned again
    assert sum(1 for w in unknown.week if w != 0.0) <= 1  # only this observation's slot
    off = observe(_feed(points, WEEKLY), 1_000.0, 10.0, daily)
    assert off.week == ()
    assert off.week_since is None


def test_the_forecasts_error_is_kept_for_the_reason() -> None:
    f = _feed([(0.0, 10.0), (15.0, 10.0)])
    f = replace(f, pending=((30.0, 12.0),))
    f = observe(f, 30.0, 10.0)
    assert f.error == pytest.approx(0.2)
    assert f.pending == ()


def test_a_prediction_is_checked_by_the_first_observation_at_or_after_its_time() -> None:
    """Horizon 60 s, an evaluation every 20 s: the forecast made at t is checked at t + 60
    (not at the next evaluation, which a horizon longer than the interval never meets)."""
    f = observe(None, 0.0, 10.0)
    f, said = ahead(f, 60.0)
    assert (said.rate, said.horizon_s, said.error) == (10.0, 60.0, None)
    for t in (20.0, 40.0):
        f = observe(f, t, 10.0)
        f, said = ahead(f, 60.0)
        assert said.error is None  # nothing due yet
    assert [at for at, _ in f.pending] == [60.0, 80.0, 100.0]
    f = observe(f, 65.0, 12.5)  # the one for 60 s is due: 10 against 12.5
    assert f.error == pytest.approx(0.2)
    assert [at for at, _ in f.pending] == [80.0, 100.0]
    f, said = ahead(f, 60.0)
    assert said.error == pytest.approx(0.2)
    assert said.describe() == f"forecast {said.rate:.1f} req/s in 60 s, last forecast off by 20%"


def test_a_rise_the_trend_follows_makes_the_error_shrink() -> None:
    f: Forecast | None = None
    errors = []
    for i in range(40):
        t = 15.0 * i
        f = observe(f, t, 10.0 + 0.1 * t)
        f, said = ahead(f, 60.0)
        errors.append(said.error)
    assert errors[5] is not None
    assert errors[-1] is not None
    assert errors[-1] < 0.02 < errors[5]


@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=60), st.floats(1, 600))
def test_pending_predictions_stay_bounded_and_errors_are_finite(
    rates: list[float], h: float
) -> None:
    f: Forecast | None = None
    for i, y in enumerate(rates):
        f = observe(f, 15.0 * i, y)
        f, said = ahead(f, h)
        assert said.error is None or (said.error >= 0 and math.isfinite(said.error))
    assert f is not None
    assert len(f.pending) <= MAX_PENDING


@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=40), st.floats(0, 3600))
def test_the_forecast_is_never_negative_and_finite(rates: list[float], h: float) -> None:
    f = _feed([(15.0 * i, y) for i, y in enumerate(rates)])
    v = predict(f, h)
    assert v >= 0
    assert math.isfinite(v)


def test_bad_smoothing_is_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        HoltWinters(alpha=1.5)


def _run(pred: PredictiveConfig) -> tuple[list[int], str]:
    cfg = replace(config(), predictive=pred)
    state = None
    desired = 2
    reason = ""
    for i in range(12):
        now = 15.0 * i
        # +5 req/s every 15 s: steep enough that 60 s ahead needs more pods than now at
        # the estimate's ~20 req/s per pod at p95 <= 400 ms (proposal 0014)
        c = ctx(now, at_rate(now, 10.0 + 5.0 * i), desired=desired, cfg=cfg, max_=40)
        if state is not None:
            c = replace(c, state=state)
        d, state = decide(c)
        desired, reason = d.active, d.reason
    return [desired], reason


def test_predictive_sizes_ahead_of_a_rise_and_says_so() -> None:
    off, _ = _run(PredictiveConfig(enabled=False))
    on, reason = _run(PredictiveConfig(enabled=True, horizon_s=60.0, trust=1.0))
    assert on[0] > off[0]
    assert "forecast " in reason
    assert "req/s in 60 s" in reason


def test_the_decision_carries_the_forecast_whether_or_not_it_acts() -> None:
    for enabled in (False, True):
        cfg = replace(config(), predictive=PredictiveConfig(enabled=enabled, horizon_s=30.0))
        d, state = decide(ctx(0.0, at_rate(0.0, 10.0), desired=2, cfg=cfg, max_=40))
        assert d.forecast is not None
        assert (d.forecast.rate, d.forecast.horizon_s, d.forecast.error) == (10.0, 30.0, None)
        d, state = decide(replace(ctx(30.0, at_rate(30.0, 8.0), desired=2, cfg=cfg), state=state))
        assert d.forecast is not None
        assert d.forecast.error == pytest.approx(0.25)
        assert ("last forecast off by 25%" in d.reason) is enabled, d.reason
    d, _ = decide(ctx(0.0, signals(0.0, 100.0), desired=2))  # no router figures: none
    assert d.forecast is None


def test_the_measured_cold_start_outlives_the_pods_that_measured_it() -> None:
    """Once measured, the horizon stays the pool's cold start when the pods that measured
    it leave (a pool scaled down to the pods it started with, which measured none)."""
    unset = replace(config(), predictive=PredictiveConfig(enabled=True))
    first = ctx(0.0, at_rate(0.0, 10.0), desired=2, cfg=unset, max_=40)
    first = replace(first, counts=replace(first.counts, cold_start_s=95.5))
    _, state = decide(first)
    assert state.cold_start_s == 95.5
    later = replace(ctx(15.0, at_rate(15.0, 10.0), desired=2, cfg=unset, max_=40), state=state)
    assert later.counts.cold_start_s is None  # none of the pods now measured one
    d, state = decide(later)
    assert d.forecast is not None
    assert d.forecast.horizon_s == 95.5 + 15.0 + 15.0  # + the interval, + half the window
    assert "(the pods' cold start 95.5 s + 15 s to the next evaluation" in d.reason
    assert state.cold_start_s == 95.5
    # a new measurement replaces it
    newer = replace(ctx(30.0, at_rate(30.0, 10.0), desired=2, cfg=unset, max_=40), state=state)
    newer = replace(newer, counts=replace(newer.counts, cold_start_s=40.0))
    d, state = decide(newer)
    assert d.forecast is not None
    assert (d.forecast.horizon_s, state.cold_start_s) == (40.0 + 30.0, 40.0)


def test_the_measured_cold_start_outlives_a_restart() -> None:
    """The cold start goes into the policy's memory (the operator keeps it in
    ``status.policyHistory``) and a restarted policy forecasts as far ahead, whatever the
    gap: the pods that measured it may have left, and a fresh policy would look its
    default 60 s ahead until a new pod's start is seen."""
    wall = 1_800_000_000.0
    unset = replace(config(), predictive=PredictiveConfig(enabled=True))
    first = ctx(0.0, at_rate(0.0, 10.0), desired=2, cfg=unset, max_=40)
    _, state = decide(replace(first, counts=replace(first.counts, cold_start_s=240.0)))
    mem = remember(state, now=0.0, wall_now=wall, config=unset)
    assert mem is not None
    assert mem.cold_start_s == 240.0
    # a day later (the scale-down window long gone), on a new process's clock
    restored = restore(PolicyState(), mem, now=5.0, wall_now=wall + 86_400.0, config=unset)
    assert restored.history == ()
    assert restored.cold_start_s == 240.0
    after = replace(ctx(5.0, at_rate(5.0, 10.0), desired=2, cfg=unset, max_=40), state=restored)
    d, _ = decide(after)
    assert d.forecast is not None
    # the interval since the remembered forecast (a day) is bounded by the window
    assert d.forecast.horizon_s == 240.0 + 30.0 + 15.0
    assert "in 285 s (the pods' cold start 240 s + 30 s to the next evaluation" in d.reason
    d, _ = decide(ctx(5.0, at_rate(5.0, 10.0), desired=2, cfg=unset, max_=40))  # no memory
    assert d.forecast is not None
    assert d.forecast.horizon_s == 60.0
    # the pods' own measurement, when there is one, wins over the remembered one
    now = replace(after, counts=replace(after.counts, cold_start_s=50.0))
    d, state = decide(now)
    assert d.forecast is not None
    assert (d.forecast.horizon_s, state.cold_start_s) == (50.0 + 30.0 + 15.0, 50.0)


def test_the_horizon_is_the_pods_measured_cold_start_unless_set() -> None:
    """``autoscaling.predictive.horizon`` unset: the forecast looks as far ahead as the
    pool's pods took from creation to warm (``ReplicaCounts.cold_start_s``: the control
    loop's median over its pods), plus the time to the next evaluation (the time since the
    last, up to a window) and half the demand window (the observed rate is the window's
    mean, about half a window old); 60 s until one is measured; set, it is what it says."""
    unset = replace(config(), predictive=PredictiveConfig(enabled=True))
    measured = replace(ctx(0.0, at_rate(0.0, 10.0), desired=2, cfg=unset, max_=40))
    measured = replace(measured, counts=replace(measured.counts, cold_start_s=95.5))
    d, _ = decide(measured)
    assert d.forecast is not None
    assert d.forecast.horizon_s == 95.5 + 15.0  # a first evaluation: + half the window
    assert "forecast 10.0 req/s in 110.5 s (the pods' cold start 95.5 s + 15 s the " in d.reason
    d, _ = decide(ctx(0.0, at_rate(0.0, 10.0), desired=2, cfg=unset, max_=40))
    assert d.forecast is not None
    assert d.forecast.horizon_s == 60.0  # none measured yet
    assert "in 60 s" in d.reason
    assert "cold start" not in d.reason
    fixed = replace(
        config(),
        predictive=PredictiveConfig(enabled=True, horizon_s=30.0, horizon_measured=False),
    )
    d, _ = decide(replace(measured, autoscaling=fixed))
    assert d.forecast is not None
    assert d.forecast.horizon_s == 30.0
    assert "cold start" not in d.reason


def test_predictive_never_sizes_below_the_observed_rate() -> None:
    cfg = replace(config(), predictive=PredictiveConfig(enabled=True, trust=1.0))
    state = None
    got = []
    for i in range(12):
        now = 15.0 * i
        rate = max(1.0, 60.0 - 5.0 * i)  # falling
        c = ctx(now, at_rate(now, rate), desired=10, cfg=cfg, max_=40)
        plain = ctx(now, at_rate(now, rate), desired=10, max_=40)
        if state is not None:
            c = replace(c, state=state)
        d, state = decide(c)
        base, _ = decide(plain)
        got.append((d.recommendation, base.recommendation))
    assert all(a is not None and b is not None and a >= b for a, b in got)


def test_the_crd_field_is_off_by_default_and_reads_horizon_and_trust() -> None:
    spec: dict[str, object] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 2},
    }
    assert to_config(spec, name="p", namespace="n").autoscaling.predictive.enabled is False
    spec["autoscaling"] = {"predictive": {"enabled": True, "horizon": "2m", "trust": 0.8}}
    p = to_config(spec, name="p", namespace="n").autoscaling.predictive
    assert (p.enabled, p.horizon_s, p.trust, p.weekly) == (True, 120.0, 0.8, False)
    spec["autoscaling"] = {"predictive": {"enabled": True}}
    p = to_config(spec, name="p", namespace="n").autoscaling.predictive
    assert p.horizon_measured  # the pods' measured cold start, 60 s until one is measured
    assert (p.horizon(None), p.horizon(42.0)) == (60.0, 42.0)
    spec["autoscaling"] = {"predictive": {"enabled": True, "horizon": "90s"}}
    p = to_config(spec, name="p", namespace="n").autoscaling.predictive
    assert (p.horizon_measured, p.horizon(None), p.horizon(42.0)) == (False, 90.0, 90.0)
    spec["autoscaling"] = {"predictive": {"enabled": True, "weekly": True}}
    assert to_config(spec, name="p", namespace="n").autoscaling.predictive.weekly is True


def test_accuracy_is_the_errors_median_and_p90_by_nearest_rank() -> None:
    assert accuracy([]) is None
    acc = accuracy([0.3, 0.1, 0.2, 0.5, 0.4, 0.0, 0.9, 0.6, 0.8, 0.7])
    assert acc == Accuracy(10, 0.4, 0.8)
    assert acc.describe(60.0) == (
        "forecast 60 s ahead: off by 40% (median), 80% (p90) over 10 evaluations"
    )
    assert accuracy([0.25]) == Accuracy(1, 0.25, 0.25)


def test_the_control_loop_measures_the_cold_start_as_the_pods_median() -> None:
    from preheat.core.control import cold_start, tally
    from preheat.core.control.roles import PodView

    pods = [
        PodView("a", "active", True, ready_after=50.0),
        PodView("b", "active", True, ready_after=70.0),
        PodView("c", "active", True, ready_after=400.0),  # a node that pulled the image
        PodView("d", "standby", True, ready_after=55.0),
        PodView("e", "active", True),  # warm before the driver saw it start
        PodView("f", "", False),  # starting
    ]
    assert cold_start(pods) == 55.0  # the lower middle of 50, 55, 70, 400
    assert tally(pods).cold_start_s == 55.0
    assert cold_start(pods[4:]) is None
