"""The autoscaling policy: ``decide(ctx) -> (Decision, PolicyState)``, pure (no clock, no
I/O); the operator, ``preheat up`` and the simulator drive it unchanged."""

from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.policy import decide, missing_signals
from preheat.core.autoscaling.types import (
    Cause,
    Context,
    Decision,
    Demand,
    Direction,
    Mix,
    Plan,
    PolicyState,
    PolicyTuning,
    ReplicaCounts,
    SignalQuery,
    Signals,
    SignalValue,
)

__all__ = [
    "Cause",
    "Context",
    "Decision",
    "Demand",
    "Direction",
    "Mix",
    "Plan",
    "PolicyState",
    "PolicyTuning",
    "ReplicaCounts",
    "ServiceCost",
    "SignalQuery",
    "SignalValue",
    "Signals",
    "decide",
    "missing_signals",
]
