"""What the policy must remember across a driver's restart, pure.

The scale-down window is the highest recommendation over ``scaleDown.stabilization``, read
from :attr:`PolicyState.history`; the cooldowns run from ``last_scale_at``. That state is in
the driver's memory, on the driver's clock (the operator's is monotonic, so its numbers
mean nothing to the next process). Without it, a restarted operator holds the current size
for one whole window (:mod:`~.stabilize`, proposal 0007) whatever the window had seen.

:func:`remember` takes that part of the state onto the wall clock (seconds since the
epoch), for the driver to keep where it survives (the operator: the pool's
``status.policyHistory``); :func:`restore` puts it back on the new process's clock.

- The history is kept run-compressed: of consecutive equal recommendations only the last
  is kept. That is exact for both windows: whenever any entry of a run is inside a window
  ending now, its last entry is too (the windows read a min or a max, never a count).
- What happened while no one evaluated (the restart's gap) is not known. The policy
  treats it as it treats a stretch of stale metrics: no recommendation in it. The
  remembered entries keep their own times, so they leave the window when they would have.
- Nothing in the window (the gap was longer than the history's horizon): no window is
  restored, and the window unseen since start-up holds the current size, as before.
- The arrival-rate forecast (:mod:`~.forecast`: level, trend, the season's offsets and
  since when it has been learning) is kept too: its season is used only once its history
  covers a whole period (a day), so a forecast that started again at every restart would
  never use it. It is restored whatever the gap (a season learned yesterday still holds);
  a gap longer than one seasonal slot drops the trend (a slope measured before it says
  nothing of now), and a forecast learned for another period (``predictive.period``
  changed) keeps its level and starts its season again (the weekly one too, and that one
  also when ``predictive.weekly`` was turned on or off). Its pending predictions (kept
  only to measure its error) are not.
- The pool's last measured cold start (:attr:`PolicyState.cold_start_s`: the predictive
  horizon when ``predictive.horizon`` is not set) is kept too, whatever the gap: it is a
  property of the pool's image and model, not of the moment, and the pods that measured it
  may have left by the restart (a restarted operator would otherwise forecast its default
  horizon ahead until a new pod's start is seen).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from preheat.core.autoscaling import stabilize
from preheat.core.autoscaling.forecast import Forecast, HoltWinters
from preheat.core.autoscaling.types import Direction, PolicyState
from preheat.core.pool import AutoscalingConfig

__all__ = ["MAX_ENTRIES", "Memory", "compress", "remember", "restore"]

DEFAULT_SMOOTHING = HoltWinters()
MAX_ENTRIES = 100  # a history longer than this (after compression) keeps its newest


@dataclass(frozen=True)
class Memory:
    """The part of :class:`PolicyState` a restarted driver needs, on the wall clock
    (seconds since the epoch)."""

    since: float  # the first evaluation
    history: tuple[tuple[float, int], ...]  # (time, recommendation), oldest first
    last_scale_at: float | None = None
    last_direction: Direction = Direction.HOLD
    # the forecast (its times on the wall clock, no pending predictions) and the season
    # length it was learned for; None: no arrival rate seen yet
    forecast: Forecast | None = None
    forecast_period_s: float = 0.0
    # the pool's last measured cold start, seconds (None: none measured)
    cold_start_s: float | None = None


def compress(history: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """Of each run of equal consecutive recommendations, the last entry (then the newest
    :data:`MAX_ENTRIES`)."""
    out = [e for i, e in enumerate(history) if i + 1 == len(history) or history[i + 1][1] != e[1]]
    return tuple(out[-MAX_ENTRIES:])


def _moved(f: Forecast, shift: float) -> Forecast:
    """``f`` with its times ``shift`` seconds later, without pending predictions."""
    week_since = None if f.week_since is None else f.week_since + shift
    return replace(
        f,
        t=f.t + shift,
        since=f.since + shift,
        epoch=f.epoch + shift,
        week_since=week_since,
        pending=(),
    )


def remember(
    state: PolicyState, now: float, wall_now: float, config: AutoscalingConfig
) -> Memory | None:
    """``state``'s history, first evaluation, last scale, forecast and cold start on the wall clock
    (``now`` on the policy's clock is ``wall_now``; ``config``: the pool's, whose
    ``predictive.period`` the forecast was learned for); None before the first evaluation."""
    if state.since is None:
        return None
    shift = wall_now - now
    f = state.forecast
    return Memory(
        since=state.since + shift,
        history=tuple((t + shift, r) for t, r in compress(state.history)),
        last_scale_at=None if state.last_scale_at is None else state.last_scale_at + shift,
        last_direction=state.last_direction,
        forecast=None if f is None else _moved(f, shift),
        forecast_period_s=0.0 if f is None else config.predictive.period_s,
        cold_start_s=state.cold_start_s,
    )


def _restored_forecast(
    memory: Memory, shift: float, now: float, config: AutoscalingConfig, hw: HoltWinters
) -> Forecast | None:
    """The remembered forecast on the new clock (None: none, or one from the future)."""
    f = memory.forecast
    if f is None or f.t + shift > now + 1e-3:  # (a ms: the wall clock's float rounding)
        return None
    f = _moved(f, shift)
    period = config.predictive.period_s
    if memory.forecast_period_s != period or len(f.season) != hw.slots:
        f = replace(f, season=(0.0,) * hw.slots, since=f.t)
    if memory.forecast_period_s != period or len(f.week) != hw.week_slots:
        week_since = f.t if hw.weekly else None
        f = replace(f, week=(0.0,) * hw.week_slots, week_since=week_since)
    if now - f.t > period / hw.slots:
        f = replace(f, trend=0.0)
    return f


def restore(
    state: PolicyState,
    memory: Memory,
    now: float,
    wall_now: float,
    config: AutoscalingConfig,
    hw: HoltWinters = DEFAULT_SMOOTHING,
) -> PolicyState:
    """``state`` (a fresh process's) with ``memory`` put back on its clock (``now`` is
    ``wall_now``). Entries older than the windows' horizon or later than ``now`` (a clock
    that went back) are dropped; with none left, only the forecast and the cold start are
    restored (``hw``: the policy's smoothing, for its number of seasonal slots)."""
    shift = now - wall_now
    f = _restored_forecast(memory, shift, now, config, hw)
    if f is not None:
        state = replace(state, forecast=f)
    if memory.cold_start_s is not None and state.cold_start_s is None:
        state = replace(state, cold_start_s=memory.cold_start_s)
    horizon = stabilize.horizon(config)
    kept = tuple((t + shift, r) for t, r in memory.history if now - horizon <= t + shift <= now)
    if not kept:
        return state
    since = min(memory.since + shift, kept[0][0])
    last = memory.last_scale_at
    last_at = None if last is None or last + shift > now else last + shift
    return replace(
        state,
        history=kept,
        since=since,
        last_scale_at=last_at,
        last_direction=memory.last_direction if last_at is not None else Direction.HOLD,
    )
