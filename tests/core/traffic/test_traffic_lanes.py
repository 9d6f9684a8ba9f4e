"""The router's wait queue: class priority, then tenants by turns (start-time fair queuing
by weight), then earliest deadline, never FIFO across classes; each class within its own
bound."""

from __future__ import annotations

import dataclasses
import math

import pytest

from preheat.core.traffic.lanes import (
    NO_TURNS,
    Held,
    Turns,
    deadline_of,
    head,
    may_wait,
    serve_order,
    served,
    settle,
    tags,
)


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


# --- fair queuing over tenants within a priority (issue 18, item 3) ---------------------


def _burst(
    tenant: str, n: int, *, start_key: int, priority: int = 1, at: float = 0.0
) -> list[Held]:
    return [
        Held(
            key=start_key + i,
            priority=priority,
            deadline=math.inf,
            arrival=at + i * 0.01,
            klass="standard",
            tenant=tenant,
        )
        for i in range(n)
    ]


def test_a_small_tenant_is_served_second_not_behind_a_big_tenants_burst() -> None:
    big = _burst("A", 10, start_key=1)  # A's ten arrived first
    small = _burst("B", 1, start_key=100, at=1.0)
    order = [h.tenant for h in serve_order(big + small)]
    assert order.index("B") == 1  # second, not eleventh
    assert order == ["A", "B"] + ["A"] * 9


def test_tenants_take_turns_in_proportion_to_their_weights() -> None:
    heavy = [dataclasses.replace(h, weight=2.0) for h in _burst("heavy", 12, start_key=1)]
    light = _burst("light", 12, start_key=100, at=0.5)
    first = [h.tenant for h in serve_order(heavy + light)][:12]
    assert (first.count("heavy"), first.count("light")) == (8, 4)  # 2:1


def test_class_priority_still_comes_before_a_tenants_turn() -> None:
    big_batch = _burst("A", 5, start_key=1, priority=2)
    big_interactive = _burst("A", 3, start_key=10, priority=0, at=2.0)
    small_batch = _burst("B", 1, start_key=20, priority=2, at=1.0)
    order = serve_order(big_batch + big_interactive + small_batch)
    assert [h.key for h in order[:3]] == [10, 11, 12]  # all of A's interactive first
    assert [h.tenant for h in order[3:5]] == ["A", "B"]  # then batch, by turns


def test_within_a_tenant_the_earliest_deadline_goes_first() -> None:
    mine = [
        Held(key=1, priority=0, deadline=9.0, arrival=0.0, tenant="A"),
        Held(key=2, priority=0, deadline=3.0, arrival=1.0, tenant="A"),
        Held(key=3, priority=0, deadline=5.0, arrival=2.0, tenant="B"),
    ]
    # A's first turn is its earliest deadline; B's first turn ties with it (deadline 5 > 3)
    assert [h.key for h in serve_order(mine)] == [2, 3, 1]


def test_requests_without_a_tenant_queue_as_one_anonymous_tenant() -> None:
    anonymous = _burst("", 4, start_key=1)
    named = _burst("B", 1, start_key=50, at=1.0)
    assert [h.tenant for h in serve_order(anonymous + named)] == ["", "B", "", "", ""]


def _drain(
    held: list[Held], arrivals: dict[int, list[Held]], turns: Turns = NO_TURNS
) -> list[Held]:
    """Serves the queue one request at a time as the router does (head, served, settle),
    adding ``arrivals[i]`` just before the i-th request leaves."""
    out: list[Held] = []
    queue = list(held)
    i = 0
    while queue or arrivals.get(i):
        queue += arrivals.pop(i, [])
        nxt = head(queue, turns)
        assert nxt is not None
        h, tag = nxt
        turns = served(turns, h, tag)
        queue.remove(h)
        turns = settle(turns, queue)
        out.append(h)
        i += 1
    assert turns == NO_TURNS  # an empty queue forgets its turns
    return out


def test_a_tenant_that_keeps_sending_is_not_starved_by_an_older_backlog() -> None:
    # A's backlog of 10 is older than anything B sends; B sends one more each time its last
    # one left: it must keep getting every other turn (stateless tags would let A's older
    # requests win every tie and B would wait behind all of A)
    backlog = _burst("A", 10, start_key=1)
    arrivals = {i: _burst("B", 1, start_key=100 + i, at=5.0 + i) for i in (0, 2, 4, 6)}
    order = [h.tenant for h in _drain(backlog, arrivals)]
    assert order[:8] == ["A", "B"] * 4


def test_the_order_at_once_is_the_order_one_at_a_time() -> None:
    held = (
        [dataclasses.replace(h, weight=3.0) for h in _burst("A", 7, start_key=1)]
        + _burst("B", 4, start_key=20, at=0.3)
        + [dataclasses.replace(h, weight=0.5) for h in _burst("C", 3, start_key=40, at=0.1)]
        + _burst("A", 2, start_key=60, priority=0, at=0.7)
    )
    assert [h.key for h in _drain(held, {})] == [h.key for h in serve_order(held)]


def test_turns_carry_over_while_the_queue_is_not_empty() -> None:
    a = _burst("A", 3, start_key=1)
    nxt = head(a)
    assert nxt is not None
    turns = served(NO_TURNS, *nxt)
    rest = a[1:]
    turns = settle(turns, rest)
    assert turns != NO_TURNS
    late = _burst("B", 1, start_key=9, at=9.0)
    # A was just served: B, newly come, goes before A's second
    assert [h.tenant for h in serve_order(rest + late, turns)] == ["B", "A", "A"]
    assert tags(rest + late, turns)[9] == 0.0


def test_a_weight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="weight must be > 0"):
        Held(key=1, priority=0, deadline=math.inf, arrival=0.0, weight=0.0)
