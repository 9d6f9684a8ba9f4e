"""Step 3: per-direction stabilization windows over the recommendation history (HPA).

Scale-up follows the *lowest* recommendation over its window (a blip does not scale up;
0 s = the latest), scale-down the *highest* over its window (a brief lull does not scale
down, and after a spike the pool stays up for the whole window).

Unlike HPA, the part of the scale-down window before the policy's first evaluation
(``since``: a fresh pool, or an operator that restarted and lost its history) counts as
recommending the current size: a restart during a lull after a spike does not shed the
replicas the window was holding.

With ``autoscaling.predictive`` on and a season learned, the window holds no more than the
forecast says the window ahead needs (``ceiling``; proposal 0019): what the window guards
against, demand coming back before a new pod could serve it, is what the forecast predicts.
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


def unseen(now: float, since: float | None, config: AutoscalingConfig) -> bool:
    """Whether part of the scale-down window lies before the first evaluation."""
    return since is not None and now - since < config.scale_down.stabilization_s


def stabilized(
    history: History,
    now: float,
    current: int,
    config: AutoscalingConfig,
    *,
    since: float | None = None,
) -> int:
    """The target after both windows: up if even the lowest recent recommendation is above
    ``current``, down if even the highest is below it (and the whole down window was seen
    since ``since``), else ``current``."""
    up = up_recommendation(history, now, config)
    if up > current:
        return up
    held = down_recommendation(history, now, config)
    if unseen(now, since, config):
        held = max(held, current)
    return held if held < current else current


def ceiled(target: int, current: int, ceiling: int | None) -> int:
    """:func:`stabilized`'s ``target`` with what the down window (and its unseen part)
    holds bounded by ``ceiling`` (the pods the arrival-rate forecast says the next window
    needs, with the latest recommendation; None: no limit). The window stands for demand
    that may come back; where the forecast says it does not, it holds no more than it says.
    A scale-up is not the window's, and is left alone."""
    if ceiling is None or target > current:
        return target
    return min(target, ceiling)
