"""Step 4: cooldowns after any scale event, max step per direction, min/max bounds."""

from __future__ import annotations

from preheat.core.autoscaling.types import PolicyState
from preheat.core.pool import AutoscalingConfig


def cooldown_left(state: PolicyState, now: float, config: AutoscalingConfig, up: bool) -> float:
    """Seconds before a scale in that direction is allowed (0: allowed now). Both
    cooldowns run from the last scale event, whichever its direction."""
    if state.last_scale_at is None:
        return 0.0
    rule = config.scale_up if up else config.scale_down
    elapsed = now - state.last_scale_at  # compared as elapsed >= cooldown, the definition
    return 0.0 if elapsed >= rule.cooldown_s else rule.cooldown_s - elapsed


def step_limited(current: int, target: int, config: AutoscalingConfig) -> int:
    if target > current:
        return min(target, current + max(config.scale_up.max_step, 1))
    if target < current:
        return max(target, current - max(config.scale_down.max_step, 1))
    return target


def bounded(target: int, lowest: int, highest: int) -> int:
    return max(lowest, min(highest, target))
