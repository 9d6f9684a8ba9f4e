"""``preheat release-pools`` (the chart's post-delete hook): which finalizer it takes off.
The whole hook runs in the cluster tier (test_cluster_box.py, helm uninstall)."""

from __future__ import annotations

from preheat.operator.release import FINALIZER, finalizers_without


def test_only_the_operators_finalizer_is_taken_off() -> None:
    pool = {"metadata": {"finalizers": ["example.com/backup", FINALIZER]}}
    assert finalizers_without(pool) == ["example.com/backup"]


def test_a_pool_without_it_is_left_alone() -> None:
    assert finalizers_without({"metadata": {"finalizers": ["example.com/backup"]}}) is None
    assert finalizers_without({"metadata": {}}) is None
