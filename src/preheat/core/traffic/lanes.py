"""The router's wait queue: which held request goes next, and whether one more may wait.

When the router must hold requests (no routable endpoint yet), it serves them by class
priority (lower first), then by deadline (earliest first; a request without one after
those with one), then by arrival; never FIFO across classes. Each class has its own bound
(its ``maxQueue``, else the router's ``--max-queue``), so a flood of batch requests cannot
take the places interactive requests need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NO_CLASS_PRIORITY = 1  # a request of a pool without classes waits as standard


@dataclass(frozen=True, slots=True)
class Held:
    """One waiting request, as the order sees it."""

    key: int  # unique, e.g. a sequence number
    priority: int  # its class's (lower first)
    deadline: float  # absolute, on the caller's clock; math.inf: none
    arrival: float
    klass: str = ""


def order_key(h: Held) -> tuple[int, float, float, int]:
    return (h.priority, h.deadline, h.arrival, h.key)


def serve_order(held: Iterable[Held]) -> list[Held]:
    """``held`` in the order they are served: priority, then earliest deadline, then
    arrival (then key, so the order is total)."""
    return sorted(held, key=order_key)


def may_wait(waiting: Mapping[str, int], klass: str, bound: int) -> bool:
    """True when one more request of ``klass`` may join the queue: fewer than ``bound`` of
    its class wait (``bound`` 0: none may)."""
    return waiting.get(klass, 0) < bound


def deadline_of(received: float, ttft_ms: float | None) -> float:
    """The absolute time by which a request wants its first token (math.inf: none)."""
    if ttft_ms is None or ttft_ms <= 0:
        return math.inf
    return received + ttft_ms / 1e3
