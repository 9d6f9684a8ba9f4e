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
- Nothing in the window (the gap was longer than the history's horizon): nothing is
  restored, and the window unseen since start-up holds the current size, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from preheat.core.autoscaling import stabilize
from preheat.core.autoscaling.types import Direction, PolicyState
from preheat.core.pool import AutoscalingConfig

__all__ = ["MAX_ENTRIES", "Memory", "compress", "remember", "restore"]

MAX_ENTRIES = 100  # a history longer than this (after compression) keeps its newest


@dataclass(frozen=True)
class Memory:
    """The part of :class:`PolicyState` a restarted driver needs, on the wall clock
    (seconds since the epoch)."""

    since: float  # the first evaluation
    history: tuple[tuple[float, int], ...]  # (time, recommendation), oldest first
    last_scale_at: float | None = None
    last_direction: Direction = Direction.HOLD


def compress(history: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """Of each run of equal consecutive recommendations, the last entry (then the newest
    :data:`MAX_ENTRIES`)."""
    out = [e for i, e in enumerate(history) if i + 1 == len(history) or history[i + 1][1] != e[1]]
    return tuple(out[-MAX_ENTRIES:])


def remember(state: PolicyState, now: float, wall_now: float) -> Memory | None:
    """``state``'s history, first evaluation and last scale on the wall clock (``now`` on
    the policy's clock is ``wall_now``); None before the first evaluation."""
    if state.since is None:
        return None
    shift = wall_now - now
    return Memory(
        since=state.since + shift,
        history=tuple((t + shift, r) for t, r in compress(state.history)),
        last_scale_at=None if state.last_scale_at is None else state.last_scale_at + shift,
        last_direction=state.last_direction,
    )


def restore(
    state: PolicyState,
    memory: Memory,
    now: float,
    wall_now: float,
    config: AutoscalingConfig,
) -> PolicyState:
    """``state`` (a fresh process's) with ``memory`` put back on its clock (``now`` is
    ``wall_now``). Entries older than the windows' horizon or later than ``now`` (a clock
    that went back) are dropped; with none left, ``state`` is returned unchanged."""
    shift = now - wall_now
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
