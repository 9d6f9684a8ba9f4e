"""Pure pod decisions: deletion cost, victim choice for scale-down, role assignment."""

from __future__ import annotations

import pytest

from preheat.core.control.roles import (
    MAX_DELETION_COST,
    MIN_DELETION_COST,
    SESSION_COST,
    PodView,
    assign_roles,
    choose_victims,
    deletion_cost,
    deletion_costs,
)


def pod(
    name: str,
    role: str = "active",
    *,
    warm: bool = True,
    cache: int = 0,
    sessions: int = 0,
    busy: int = 0,
    created: float = 0.0,
) -> PodView:
    return PodView(name, role, warm, cache, sessions, busy, created)


@pytest.mark.parametrize(
    ("p", "cost"),
    [
        (pod("a", warm=False), 0),
        (pod("a", "standby", cache=50), 51),
        (pod("a", "standby", cache=50, sessions=3), 51),  # a standby's sessions do not count
        (pod("a", cache=50, sessions=3), 50 + 3 * SESSION_COST + 1),
        (pod("a", cache=10**12), MAX_DELETION_COST - 1),
        (pod("a", busy=1), MAX_DELETION_COST),
    ],
)
def test_deletion_cost(p: PodView, cost: int) -> None:
    assert deletion_cost(p) == cost


VICTIMS = [
    (
        "least cache goes first",
        [pod("a", cache=900), pod("b", cache=100), pod("c", cache=500)],
        1,
        ("b",),
    ),
    (
        "sessions outweigh cache",
        [pod("a", cache=900), pod("b", cache=100, sessions=2)],
        1,
        ("a",),
    ),
    (
        "a pod not yet warm goes before any warm one",
        [pod("a", cache=1), pod("b", "standby", warm=False)],
        1,
        ("b",),
    ),
    ("a standby before an active", [pod("a", cache=10), pod("s", "standby", cache=10)], 1, ("s",)),
    (
        "never a pod with work in flight, even if it is the cheapest",
        [pod("a", busy=1), pod("b", cache=800, sessions=5), pod("c", cache=900)],
        2,
        ("c", "b"),
    ),
    ("fewer when only busy pods remain", [pod("a", busy=2), pod("b")], 2, ("b",)),
    ("draining pods are already going", [pod("d", "draining"), pod("b", cache=5)], 1, ("b",)),
    ("ties: the newest goes", [pod("old", created=1), pod("new", created=9)], 1, ("new",)),
    ("zero or fewer: none", [pod("a")], 0, ()),
]


@pytest.mark.parametrize(
    ("pods", "count", "expected"), [v[1:] for v in VICTIMS], ids=[v[0] for v in VICTIMS]
)
def test_choose_victims(pods: list[PodView], count: int, expected: tuple[str, ...]) -> None:
    assert choose_victims(pods, count) == expected


def test_victims_get_the_lowest_annotation() -> None:
    pods = [pod("a", cache=7), pod("b", cache=3)]
    assert deletion_costs(pods, choose_victims(pods, 1)) == {"a": 8, "b": MIN_DELETION_COST}


def roles(plan_roles: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return dict(plan_roles)


def test_growing_promotes_standbys_first_and_refills_behind_them() -> None:
    pods = [pod("a1"), pod("a2"), pod("s1", "standby", cache=5), pod("s2", "standby")]
    plan = assign_roles(pods, active=4, standby=2)
    assert roles(plan.roles) == {"a1": "active", "a2": "active", "s1": "active", "s2": "active"}
    assert dict(plan.changes) == {"s1": "active", "s2": "active"}
    assert plan.new_pods == 2  # the new standbys
    assert plan.victims == ()
    assert "2 promoted" in plan.reason


def test_growing_past_the_standbys_starts_new_pods() -> None:
    plan = assign_roles([pod("a1"), pod("s1", "standby")], active=3, standby=1)
    assert dict(plan.changes) == {"s1": "active"}
    assert plan.new_pods == 2


def test_warming_pods_count_toward_the_total() -> None:
    pods = [pod("a1"), pod("w1", "standby", warm=False)]
    plan = assign_roles(pods, active=2, standby=0)
    assert plan.new_pods == 0
    assert plan.changes == ()  # w1 gets promoted once warm, on a later reconcile


def test_new_pods_come_up_unlabelled_and_become_standby() -> None:
    plan = assign_roles([pod("a1"), pod("n1", "")], active=1, standby=1)
    assert dict(plan.changes) == {"n1": "standby"}


def test_shrinking_removes_the_cheapest_and_keeps_the_standby() -> None:
    pods = [
        pod("a1", cache=100, sessions=4),
        pod("a2", cache=10),
        pod("a3", cache=500),
        pod("s1", "standby", cache=1),
    ]
    plan = assign_roles(pods, active=2, standby=1)
    assert plan.victims == ("s1",)  # the cheapest pod goes ...
    assert roles(plan.roles) == {
        "a1": "active",
        "a3": "active",
        "a2": "standby",
    }  # ... a2 stands by
    assert dict(plan.changes) == {"a2": "standby"}
    assert plan.new_pods == 0


def test_shrinking_never_removes_a_busy_pod() -> None:
    pods = [pod("a1", busy=3), pod("a2", cache=900, sessions=9)]
    plan = assign_roles(pods, active=1, standby=0)
    assert plan.victims == ("a2",)
    assert roles(plan.roles) == {"a1": "active"}


def test_steady_state_changes_nothing() -> None:
    pods = [pod("a1"), pod("a2"), pod("s1", "standby")]
    plan = assign_roles(pods, active=2, standby=1)
    assert plan.changes == ()
    assert plan.victims == ()
    assert plan.new_pods == 0


def test_draining_pods_are_left_alone() -> None:
    plan = assign_roles([pod("d1", "draining"), pod("a1")], active=2, standby=0)
    assert "d1" not in roles(plan.roles)
    assert plan.new_pods == 1
