"""status.observedGeneration never goes back: a pod event's reconcile reads the pool from
kopf's index before it holds the pool's lock, so its body can predate the status the spec
reconcile just wrote. Found by the cluster tier (tests/cluster): the pool stayed at the old
observedGeneration until the next resync (60 s)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from preheat.operator import reconciler as reconciler_module
from preheat.operator.metrics import Metrics
from preheat.operator.reconciler import Reconciler


@pytest.fixture(autouse=True)
def no_kopf_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Events go through kopf's poster, which needs a running operator."""
    monkeypatch.setattr(reconciler_module, "_event", lambda *a, **k: None)


class FakeKube:
    """Objects by (kind path, name); status patches recorded."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.statuses: list[dict[str, Any]] = []

    async def get(self, kind: Any, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(f"{kind.plural}/{name}"))

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        from preheat.operator.kube import kind_of

        self.objects[f"{kind_of(obj).plural}/{obj['metadata']['name']}"] = copy.deepcopy(obj)
        return obj

    async def patch(self, kind: Any, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "1"}}

    async def patch_status(self, namespace: str, name: str, status: Any) -> dict[str, Any]:
        self.statuses.append(copy.deepcopy(dict(status)))
        return {}


def pool(generation: int, observed: int) -> dict[str, Any]:
    return {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "generation": generation},
        "spec": {
            "model": {"name": "m"},
            "engine": {"kind": "sim"},
            "replicas": {"min": 1, "max": 2},
        },
        "status": {"observedGeneration": observed},
    }


async def test_a_stale_body_does_not_take_observed_generation_back() -> None:
    kube = FakeKube()
    reconciler = Reconciler(kube=kube, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    await reconciler.reconcile(pool(2, 1), list, children=True)  # the spec change
    assert kube.statuses[-1]["observedGeneration"] == 2
    # a pod event that read the pool before that status was written
    await reconciler.reconcile(pool(2, 1), lambda: [], children=False)
    assert all(s["observedGeneration"] == 2 for s in kube.statuses), kube.statuses
    assert all(
        c.get("observedGeneration") == 2 for s in kube.statuses for c in s.get("conditions", [])
    )


async def test_without_a_children_reconcile_the_status_keeps_what_it_says() -> None:
    kube = FakeKube()
    reconciler = Reconciler(kube=kube, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    await reconciler.reconcile(pool(3, 2), lambda: [], children=False)
    assert kube.statuses[-1]["observedGeneration"] == 2  # generation 3 not applied yet
    reconciler.forget(("ns", "p"))
    assert ("ns", "p") not in reconciler.applied
