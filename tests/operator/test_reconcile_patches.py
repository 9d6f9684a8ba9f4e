"""The operator's memory of its own pod patches (``Reconciler.written``): kept while kopf's
index shows a pod's older version, and dropped when the index catches up, when the pod is
gone, or when the pool is deleted. A pod deleted before the index showed our patch (a
scale-down's victim, relabelled ``draining`` and removed by its ReplicaSet at once) used to
leave its record for the life of the operator."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from preheat.core.manifests import ANNOTATION_DELETION_COST, LABEL_ROLE
from preheat.operator.metrics import Metrics
from preheat.operator.reconciler import PodWrite, Reconciler
from tests.operator.test_reconcile_generation import FakeKube, no_kopf_events, pool

__all__ = ["no_kopf_events"]  # the autouse fixture, used here too


def pod(name: str, version: str, write: PodWrite | None = None) -> dict[str, Any]:
    """A running pod of pool ``p`` without an IP yet (labelled only: no worker to tell),
    with ``write``'s role and deletion cost when given (the index shows that patch)."""
    labels = {"preheat.dev/pool": "p"}
    annotations = {}
    if write is not None:
        labels[LABEL_ROLE] = write.role
        annotations[ANNOTATION_DELETION_COST] = write.cost
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": version,
            "labels": labels,
            "annotations": annotations,
        },
        "status": {"phase": "Running"},
    }


async def test_a_patch_record_goes_with_its_pod_and_with_the_pool() -> None:
    kube = FakeKube()
    reconciler = Reconciler(kube=kube, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    await reconciler.reconcile(pool(1, 0), lambda: [pod("w-0", "5")], children=True)
    patches = reconciler.written[("ns", "p")]
    assert set(patches) == {"w-0"}  # labelled; the index still shows version 5

    # the index has not caught up: the next reconcile sees our patch, and keeps the record
    await reconciler.reconcile(pool(1, 1), lambda: [pod("w-0", "5")], children=False)
    assert set(reconciler.written[("ns", "p")]) == {"w-0"}

    # the pod was deleted before the index showed the patch: its record goes
    await reconciler.reconcile(pool(1, 1), lambda: [], children=False)
    assert reconciler.written[("ns", "p")] == {}

    # a newer version in the index: the record goes, and the pod is read as the index says
    await reconciler.reconcile(pool(1, 1), lambda: [pod("w-1", "7")], children=False)
    shown = reconciler.written[("ns", "p")]["w-1"]
    await reconciler.reconcile(pool(1, 1), lambda: [pod("w-1", "8", shown)], children=False)
    assert reconciler.written[("ns", "p")] == {}  # and nothing patched again

    reconciler.forget(("ns", "p"))
    assert ("ns", "p") not in reconciler.written
