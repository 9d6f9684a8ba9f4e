"""Step 2: panic mode. A latency percentile at ``threshold`` times its target or more
(over the window, or over the short panic window when the source gives it) enters panic
until ``now + panic.window_s``: scale up at once (no up-stabilization, no cooldown; the
max step and max bound still hold) and never down while it lasts."""

from __future__ import annotations

from preheat.core.autoscaling.types import SignalValue
from preheat.core.pool import Objective, PanicConfig


def worst(sv: SignalValue) -> float | None:
    """The larger of the window's and the short window's value."""
    vals = [v for v in (sv.value, sv.short_value) if v is not None]
    return max(vals) if vals else None


def triggered(
    panic: PanicConfig, observed: list[tuple[Objective, SignalValue]]
) -> tuple[Objective, float] | None:
    """The objective (and its value) furthest past ``threshold x target``; None: calm."""
    if not panic.enabled:
        return None
    best: tuple[Objective, float] | None = None
    for obj, sv in observed:
        v = worst(sv)
        if not obj.signal.is_latency or v is None or obj.target <= 0:
            continue
        if v >= panic.threshold * obj.target and (
            best is None or v / obj.target > best[1] / best[0].target
        ):
            best = (obj, v)
    return best


def panic_until(
    previous: float | None, now: float, panic: PanicConfig, fired: bool
) -> float | None:
    if fired:
        return now + panic.window_s
    if previous is not None and now < previous:
        return previous
    return None
