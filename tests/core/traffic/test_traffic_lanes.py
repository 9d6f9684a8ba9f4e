"""The router's wait queue: class priority, then earliest deadline, never FIFO across
classes; each class within its own bound."""

from __future__ import annotations

import math

from preheat.core.traffic.lanes import Held, deadline_of, may_wait, serve_order


def test_held_requests_are_served_by_priority_then_deadline_then_arrival() -> None:
    held = [
        Held(key=1, priority=2, deadline=5.0, arrival=0.0, klass="batch"),  # first in
        Held(key=2, priority=0, deadline=9.0, arrival=1.0, klass="interactive"),
        Held(key=3, priority=0, deadline=3.0, arrival=2.0, klass="interactive"),
        Held(key=4, priority=1, deadline=math.inf, arrival=0.5, klass="standard"),
        Held(key=5, priority=1, deadline=8.0, arrival=3.0, klass="standard"),
        Held(key=6, priority=0, deadline=3.0, arrival=1.5, klass="interactive"),
    ]
    assert [h.key for h in serve_order(held)] == [6, 3, 2, 5, 4, 1]


def test_each_class_waits_within_its_own_bound() -> None:
    waiting = {"batch": 3, "interactive": 0}
    assert not may_wait(waiting, "batch", 3)  # batch is full ...
    assert may_wait(waiting, "interactive", 3)  # ... and interactive still has its places
    assert may_wait(waiting, "standard", 1)
    assert not may_wait({}, "batch", 0)


def test_a_deadline_is_the_receipt_plus_the_ttft_target() -> None:
    assert deadline_of(10.0, 500.0) == 10.5
    assert deadline_of(10.0, None) == math.inf
    assert deadline_of(10.0, 0.0) == math.inf
