"""Step 3: per-direction stabilization windows over the recommendation history (HPA).

Scale-up follows the *lowest* recommendation over its window (a blip does not scale up;
0 s = the latest), scale-down the *highest* over its window (a brief lull does not scale
down, and after a spike the pool stays up for the whole window).
"""

from __future__ import annotations

from preheat.core.pool import AutoscalingConfig

History = tuple[tuple[float, int], ...]


def record(history: History, now: float, recommendation: int, horizon_s: float) -> History:
    """``history`` plus ``(now, recommendation)``, without entries older than the horizon."""
    kept = tuple((t, r) for t, r in history if t >= now - horizon_s and t <= now)
    return (*kept, (now, recommendation))


def horizon(config: AutoscalingConfig) -> float:
    return max(config.scale_up.stabilization_s, config.scale_down.stabilization_s)


def window(history: History, now: float, seconds: float) -> list[int]:
    recent = [r for t, r in history if t >= now - seconds]
    return recent or [history[-1][1]]


def up_recommendation(history: History, now: float, config: AutoscalingConfig) -> int:
    return min(window(history, now, config.scale_up.stabilization_s))


def down_recommendation(history: History, now: float, config: AutoscalingConfig) -> int:
    return max(window(history, now, config.scale_down.stabilization_s))


def stabilized(history: History, now: float, current: int, config: AutoscalingConfig) -> int:
    """The target after both windows: up if even the lowest recent recommendation is above
    ``current``, down if even the highest is below it, else ``current``."""
    up = up_recommendation(history, now, config)
    if up > current:
        return up
    down = down_recommendation(history, now, config)
    if down < current:
        return down
    return current
