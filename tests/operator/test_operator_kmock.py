"""The real operator against an emulated API server (kmock over HTTP on loopback)."""

from __future__ import annotations

import copy
from typing import Any

from kmockkit import (
    DEPLOYMENTS,
    NAMESPACE,
    PDBS,
    POOLS,
    SERVICES,
    OperatorProcess,
    PreheatKube,
    add_pods,
    children,
    condition,
    create_pool,
    eventually,
    get,
    kube,  # noqa: F401  (fixture)
    no_leaked_tasks,  # noqa: F401  (fixture)
    operator,  # noqa: F401  (fixture)
)
from poolkit import ROOT, load_example

from preheat.api.pool import to_config
from preheat.core.reconcile import BuildOptions, Owner, desired_children, needs_update


def minimal(name: str = "sim-tiny", **replicas: Any) -> dict[str, Any]:
    pool = copy.deepcopy(load_example(ROOT / "examples" / "pool-minimal.yaml"))
    pool["metadata"] = {"name": name, "namespace": NAMESPACE}
    pool["spec"]["replicas"].update(replicas)
    return pool


def desired_for(kube: PreheatKube, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    pool = get(kube, POOLS, NAMESPACE, name)
    config = to_config(pool["spec"], name=name, namespace=NAMESPACE)
    owner = Owner(name=name, uid=pool["metadata"]["uid"])
    res = {"Deployment": DEPLOYMENTS, "Service": SERVICES, "PodDisruptionBudget": PDBS}
    return {
        (res[c["kind"]], c["metadata"]["name"]): c
        for c in desired_children(config, owner, BuildOptions())
    }


async def test_create_pool_makes_owned_children_and_status(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    await create_pool(kube, minimal(warmStandby=1))
    got = await eventually(
        lambda: len(children(kube, NAMESPACE)) == 3 and children(kube, NAMESPACE)
    )
    pool = get(kube, POOLS, NAMESPACE, "sim-tiny")
    want = desired_for(kube, "sim-tiny")
    assert set(got) == set(want)
    for key, obj in got.items():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == pool["metadata"]["uid"]
        assert ref["kind"] == "InferencePool" and ref["controller"] is True
        assert not needs_update(want[key], obj), key
    assert got[(DEPLOYMENTS, "sim-tiny-workers")]["spec"]["replicas"] == 2  # 1 active + 1 standby

    # No pods yet (kmock has no controllers): the status says so.
    def status() -> Any:
        return get(kube, POOLS, NAMESPACE, "sim-tiny").get("status", {})

    await eventually(lambda: status().get("observedGeneration") == 1)
    assert status()["replicas"] == {"active": 0, "standby": 0, "warming": 0, "draining": 0}
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Ready")["status"] == "False"
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Degraded")["status"] == "False"

    # Two warm pods appear: one is promoted to active, one stays standby; status counts them.
    await add_pods(kube, NAMESPACE, "sim-tiny", 2, ready=True)
    await eventually(
        lambda: status().get("replicas") == {"active": 1, "standby": 1, "warming": 0, "draining": 0}
    )
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Ready")["status"] == "True"
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Scaling")["reason"] == "Stable"
