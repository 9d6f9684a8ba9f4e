"""The pool loop every driver runs, pure: observe -> :func:`step` -> act.

:mod:`~preheat.core.control.controller` (``step``, the counts, the signal query) and
:mod:`~preheat.core.control.roles` (role assignment, deletion costs, victims).
"""

from preheat.core.control.controller import (
    ControlState,
    Observation,
    Policy,
    cold_start,
    lifecycle_of,
    signal_query,
    step,
    tally,
)
from preheat.core.control.roles import PodView, RolePlan, assign_roles

__all__ = [
    "ControlState",
    "Observation",
    "PodView",
    "Policy",
    "RolePlan",
    "assign_roles",
    "cold_start",
    "lifecycle_of",
    "signal_query",
    "step",
    "tally",
]
