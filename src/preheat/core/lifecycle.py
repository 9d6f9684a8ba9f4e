"""Worker lifecycle: loading -> warming -> standby <-> active -> draining -> stopped."""

from __future__ import annotations

import enum


class LifecycleState(enum.Enum):
    LOADING = "loading"
    WARMING = "warming"
    STANDBY = "standby"
    ACTIVE = "active"
    DRAINING = "draining"
    STOPPED = "stopped"


_ALLOWED: dict[LifecycleState, frozenset[LifecycleState]] = {
    LifecycleState.LOADING: frozenset({LifecycleState.WARMING, LifecycleState.DRAINING}),
    LifecycleState.WARMING: frozenset(
        {LifecycleState.STANDBY, LifecycleState.ACTIVE, LifecycleState.DRAINING}
    ),
    LifecycleState.STANDBY: frozenset({LifecycleState.ACTIVE, LifecycleState.DRAINING}),
    LifecycleState.ACTIVE: frozenset({LifecycleState.STANDBY, LifecycleState.DRAINING}),
    LifecycleState.DRAINING: frozenset({LifecycleState.STOPPED}),
    LifecycleState.STOPPED: frozenset(),
}

WARM_STATES = frozenset({LifecycleState.STANDBY, LifecycleState.ACTIVE})
"""States in which the engine is loaded and warmed (readiness = warm)."""


def can_transition(src: LifecycleState, dst: LifecycleState) -> bool:
    """True when ``src -> dst`` is a legal lifecycle move (staying put is always legal)."""
    return src == dst or dst in _ALLOWED[src]


def transition_error(src: LifecycleState, dst: LifecycleState) -> str | None:
    """A human-readable reason why ``src -> dst`` is refused, or None when it is allowed."""
    if can_transition(src, dst):
        return None
    allowed = ", ".join(sorted(s.value for s in _ALLOWED[src])) or "nothing"
    return (
        f"cannot go from {src.value} to {dst.value}; from {src.value} a worker may go to {allowed}"
    )
