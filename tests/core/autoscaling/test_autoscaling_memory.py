"""The policy's memory across a restart (core.autoscaling.memory): compression is exact
for both windows, a restored policy decides as the one that never stopped, and what is
too old or from the future is dropped."""

from __future__ import annotations

from dataclasses import replace

import pytest
from autoscalingkit import Driver, config, signals
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.autoscaling import Cause, Direction, PolicyState, forecast, stabilize
from preheat.core.autoscaling.forecast import HoltWinters
from preheat.core.autoscaling.memory import Memory, compress, remember, restore
from preheat.core.pool import AutoscalingConfig, PredictiveConfig

WALL = 1_800_000_000.0  # the wall clock at the policy's 0


@settings(max_examples=200)
@given(
    recs=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=40),
    window=st.floats(min_value=0.0, max_value=50.0),
    later=st.floats(min_value=0.0, max_value=60.0),
)
def test_compression_keeps_every_window_min_and_max(
    recs: list[int], window: float, later: float
) -> None:
    history = tuple((float(i), r) for i, r in enumerate(recs))
    short = compress(history)
    now = history[-1][0] + later
    full_w, short_w = stabilize.window(history, now, window), stabilize.window(short, now, window)
    assert (min(full_w), max(full_w)) == (min(short_w), max(short_w))
    assert len(short) <= len(history)


def test_remember_is_on_the_wall_clock_and_restore_puts_it_back() -> None:
    cfg = config(down=(300.0, 0.0, 4))
    state = PolicyState(
        history=((100.0, 5), (115.0, 5), (130.0, 2)),
        since=100.0,
        last_scale_at=100.0,
        last_direction=Direction.UP,
    )
    mem = remember(state, now=130.0, wall_now=WALL + 130.0, config=cfg)
    assert mem == Memory(WALL + 100.0, ((WALL + 115.0, 5), (WALL + 130.0, 2)), WALL + 100.0,
                         Direction.UP)  # fmt: skip
    # a new process whose monotonic clock reads 7 when the wall clock reads WALL + 160
    back = restore(PolicyState(), mem, now=7.0, wall_now=WALL + 160.0, config=cfg)
    assert back.history == ((-38.0, 5), (-23.0, 2))
    assert back.since == -53.0
    assert (back.last_scale_at, back.last_direction) == (-53.0, Direction.UP)
    assert remember(PolicyState(), 0.0, WALL, cfg) is None  # nothing evaluated yet


def test_history_older_than_the_windows_restores_nothing() -> None:
    cfg = config(down=(300.0, 0.0, 4))
    mem = Memory(WALL, ((WALL, 5), (WALL + 10.0, 3)), WALL, Direction.UP)
    fresh = PolicyState()
    assert restore(fresh, mem, now=0.0, wall_now=WALL + 311.0, config=cfg) is fresh
    # entries from the future (the wall clock went back) are dropped, the rest kept
    back = restore(fresh, mem, now=0.0, wall_now=WALL + 5.0, config=cfg)
    assert back.history == ((-5.0, 5),)
    assert back.last_scale_at == -5.0


def _ticks(d: Driver, start: float, end: float, ttft: float, shift: float = 0.0) -> None:
    t = start
    while t <= end:
        d.tick(t - shift, signals(t - shift, ttft), active=d.desired)
        t += 15.0


def test_a_restored_policy_holds_and_releases_as_the_uninterrupted_one() -> None:
    """Spike, then a lull; a restart 120 s into the lull. The restored policy scales down
    when the uninterrupted one does (the spike leaves the 300 s window), not 300 s after
    the restart as a fresh one would."""
    cfg = config(down=(300.0, 0.0, 4))

    def spike_then_lull(d: Driver, until: float) -> None:
        _ticks(d, 0.0, 0.0, 400.0)
        _ticks(d, 15.0, 60.0, 1200.0)  # 3x over: up
        _ticks(d, 75.0, until, 100.0)  # far under: the window holds

    whole = Driver(cfg=cfg, desired=2)
    spike_then_lull(whole, 600.0)
    first_down = next(t for t, dec in whole.decisions if dec.direction is Direction.DOWN)
    assert 300.0 < first_down <= 375.0

    before = Driver(cfg=cfg, desired=2)
    spike_then_lull(before, 180.0)
    mem = remember(before.state, now=180.0, wall_now=WALL + 180.0, config=cfg)
    assert mem is not None
    # the restart: a new process, its clock 1000 s behind (any monotonic clock), 20 s gap
    shift = 1000.0
    after = Driver(cfg=cfg, desired=before.desired)
    after.state = restore(PolicyState(), mem, 200.0 - shift, WALL + 200.0, cfg)
    _ticks(after, 210.0, 600.0, 100.0, shift)
    down = next(t + shift for t, dec in after.decisions if dec.direction is Direction.DOWN)
    assert down == first_down

    fresh = Driver(cfg=cfg, desired=before.desired)  # what a restart did before
    _ticks(fresh, 210.0, 600.0, 100.0, shift)
    held = [dec for _, dec in fresh.decisions[:5]]
    assert all(dec.cause is Cause.STABILIZING for dec in held)
    assert "window began at start-up" in held[0].reason
    fresh_down = next(t + shift for t, dec in fresh.decisions if dec.direction is Direction.DOWN)
    assert fresh_down >= 210.0 + 300.0 > down


def test_a_new_pool_holds_its_starting_size_for_one_scale_down_window() -> None:
    """Proposal 0007, revised twice: a policy without history (a new pool, or a restart
    that lost it) holds the starting size until it has seen one whole scale-down window; a
    first window far under target is not the pool's steady state (the diurnal day's first
    30 s said 14 of 16 pods, and the climb after it cost 2,300 misses)."""
    cfg = config(down=(300.0, 0.0, 4))
    d = Driver(cfg=cfg, desired=4)
    for t in (0.0, 100.0, 200.0, 299.0):
        d.tick(t, signals(t, 100.0), active=4)  # far under target: asks for 1
        assert d.desired == 4
    assert all("window began at start-up" in dec.reason for _, dec in d.decisions)
    d.tick(300.0, signals(300.0, 100.0), active=4)
    assert d.desired == 1
    assert d.decisions[-1][1].cause is Cause.SCALE_DOWN


DAY = 1440.0  # a short season, so that a test learns a whole one
HW = HoltWinters(period_s=DAY)


def _with_period(period_s: float = DAY) -> AutoscalingConfig:
    cfg = config(down=(300.0, 0.0, 4))
    return replace(cfg, predictive=PredictiveConfig(enabled=True, period_s=period_s))


def _learned(until: float, start: float = 0.0) -> forecast.Forecast:
    """A forecast of a day with a busy second half (100 vs 20 req/s), observed every 30 s."""
    times = range(int(start), int(until), 30)
    samples = [(t, 100.0 if (t % DAY) >= DAY / 2 else 20.0) for t in times]
    f = forecast.learn(None, ((float(t), y) for t, y in samples), HW)
    assert f is not None
    return f


@settings(max_examples=50)
@given(
    at=st.floats(min_value=DAY + 30.0, max_value=3 * DAY),
    gap=st.floats(min_value=0.0, max_value=DAY / 24 - 1.0),
    clock=st.floats(min_value=-1e6, max_value=1e6),
)
def test_a_restored_forecast_predicts_as_the_one_that_never_stopped(
    at: float, gap: float, clock: float
) -> None:
    """The season is learned over a whole period, so it must survive a restart: after a
    gap shorter than one seasonal slot the restored forecast (on any new clock) predicts
    what the uninterrupted one does, season and trend included."""
    cfg = _with_period()
    f = _learned(at)
    state = PolicyState(history=((f.t, 3),), since=0.0, forecast=f)
    mem = remember(state, now=f.t, wall_now=WALL + f.t, config=cfg)
    assert mem is not None
    assert mem.forecast is not None
    assert mem.forecast.pending == ()
    shift = clock - (WALL + f.t + gap)  # the new process's clock reads `clock` at the restart
    back = restore(PolicyState(), mem, clock, WALL + f.t + gap, cfg, HW)
    assert back.forecast is not None
    assert forecast.seasonal(back.forecast, HW)
    for h in (60.0, DAY / 3, DAY / 2):
        assert forecast.predict(back.forecast, h, HW) == pytest.approx(
            forecast.predict(f, h, HW), abs=1e-6
        )
    assert back.forecast.t == pytest.approx(f.t + WALL + shift)


def test_a_long_gap_drops_the_trend_and_another_period_drops_the_season() -> None:
    cfg = _with_period()
    f = replace(_learned(2 * DAY), trend=0.5)
    state = PolicyState(since=0.0, forecast=f)
    mem = remember(state, now=f.t, wall_now=WALL + f.t, config=cfg)
    assert mem is not None
    # a gap of more than a slot (60 s here): the season and level stay, the slope goes
    later = restore(PolicyState(), mem, 0.0, WALL + f.t + 61.0, cfg, HW)
    assert later.forecast is not None
    assert later.forecast.trend == 0.0
    assert later.forecast.season == f.season
    assert later.forecast.level == f.level
    # a gap of days: the history window is long gone, the forecast is still restored
    days = restore(PolicyState(), mem, 0.0, WALL + f.t + 5 * DAY, cfg, HW)
    assert days.history == ()
    assert days.forecast is not None
    assert forecast.seasonal(days.forecast, HW)
    # predictive.period changed since: the level stays, the season is learned again
    week = _with_period(7 * DAY)
    other = restore(PolicyState(), mem, 0.0, WALL + f.t + 1.0, week, HW)
    assert other.forecast is not None
    assert other.forecast.level == f.level
    assert set(other.forecast.season) == {0.0}
    assert not forecast.seasonal(other.forecast, replace(HW, period_s=7 * DAY))
    # a forecast from the future (the wall clock went back) is not restored
    back = restore(PolicyState(), mem, 0.0, WALL + f.t - 10.0, cfg, HW)
    assert back.forecast is None


def test_a_weekly_season_is_kept_and_starts_again_when_turned_on_or_off() -> None:
    """``predictive.weekly``: its offsets and since-when survive a restart on another
    clock (the restored forecast predicts as the one that never stopped, weekly offsets
    in use); a restart that turns it on or off starts it again and keeps the daily."""
    weekly_hw = replace(HW, weekly=True)
    on_cfg = PredictiveConfig(enabled=True, period_s=DAY, weekly=True)
    cfg = replace(_with_period(), predictive=on_cfg)
    times = range(0, int(8 * DAY), 30)
    f = forecast.learn(None, ((float(t), 20.0 + (t // DAY) % 7) for t in times), weekly_hw)
    assert f is not None
    assert forecast.weekly(f, weekly_hw)
    mem = remember(PolicyState(since=0.0, forecast=f), now=f.t, wall_now=WALL + f.t, config=cfg)
    assert mem is not None
    back = restore(PolicyState(), mem, -5_000.0, WALL + f.t + 10.0, cfg, weekly_hw)
    assert back.forecast is not None
    assert forecast.weekly(back.forecast, weekly_hw)
    assert back.forecast.week == f.week
    for h in (60.0, DAY / 2, 3 * DAY):
        assert forecast.predict(back.forecast, h, weekly_hw) == pytest.approx(
            forecast.predict(f, h, weekly_hw), abs=1e-6
        )
    off = restore(PolicyState(), mem, 0.0, WALL + f.t + 10.0, _with_period(), HW)
    assert off.forecast is not None
    assert off.forecast.week == ()
    assert off.forecast.week_since is None
    assert off.forecast.season == f.season
    plain = remember(
        PolicyState(since=0.0, forecast=forecast.learn(None, [(0.0, 5.0), (30.0, 6.0)], HW)),
        now=30.0,
        wall_now=WALL + 30.0,
        config=_with_period(),
    )
    assert plain is not None
    on = restore(PolicyState(), plain, 0.0, WALL + 40.0, cfg, weekly_hw)
    assert on.forecast is not None
    assert len(on.forecast.week) == 7 * 24
    assert on.forecast.week_since == on.forecast.t
