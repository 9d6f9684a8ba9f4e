"""The real operator against an emulated API server (kmock over HTTP on loopback).

Each test starts ``preheat.operator.main.serve`` (kopf, standalone, namespaced) in its own
thread and loop, and stops it; kmock serves in the test's loop. See ``kmockkit`` for what
the helper adds to kmock 0.8 (versions, uids, generation, garbage collection, pods).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from typing import Any

import kmock
from kmockkit import (
    DEPLOYMENTS,
    EVENTS,
    NAMESPACE,
    PDBS,
    PODS,
    POOLS,
    SECRETS,
    SERVICES,
    OperatorProcess,
    PreheatKube,
    add_pods,
    children,
    condition,
    create_pool,
    delete_pool,
    events,
    eventually,
    get,
    kube_fixture,  # noqa: F401
    live,
    no_leaked_tasks_fixture,  # noqa: F401
    operator_fixture,  # noqa: F401
    operator_requests,
    patch_pool,
    pool_of_request,
    requests_by_pool,
    settled,
)
from poolkit import ROOT, load_example

from preheat.api.pool import to_config
from preheat.core.manifests import (
    ANNOTATION_DELETION_COST,
    LABEL_NAME,
    LABEL_POOL,
    LABEL_ROLE,
    WORKER_NAME,
    BuildOptions,
    Owner,
    desired_children,
    needs_update,
)

RES = {"Deployment": DEPLOYMENTS, "Service": SERVICES, "PodDisruptionBudget": PDBS}


def minimal(name: str = "sim-tiny", **replicas: Any) -> dict[str, Any]:
    pool = copy.deepcopy(load_example(ROOT / "examples" / "pool-minimal.yaml"))
    pool["metadata"] = {"name": name, "namespace": NAMESPACE}
    pool["spec"]["replicas"].update(replicas)
    return pool


def desired_for(server: PreheatKube, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    pool = get(server, POOLS, NAMESPACE, name)
    config = to_config(pool["spec"], name=name, namespace=NAMESPACE)
    owner = Owner(name=name, uid=pool["metadata"]["uid"])
    return {
        (RES[c["kind"]], c["metadata"]["name"]): c
        for c in desired_children(config, owner, BuildOptions())
    }


def owned_by(server: PreheatKube, name: str) -> dict[tuple[str, str], Any]:
    return {k: v for k, v in children(server, NAMESPACE).items() if k[1] == f"{name}-workers"}


def converged(server: PreheatKube, name: str) -> bool:
    want = desired_for(server, name)
    got = owned_by(server, name)
    return set(got) == set(want) and not any(needs_update(want[k], got[k]) for k in want)


def made_by_operator(server: PreheatKube) -> list[tuple[str, str]]:
    """(resource, name) of every child and workers' Secret in the namespace."""
    return [
        (str(kmock.resource(res)), name)
        for res in (*RES.values(), SECRETS)
        for name in live(server, res, NAMESPACE)
    ]


def pool_status(server: PreheatKube, name: str) -> dict[str, Any]:
    return dict((get(server, POOLS, NAMESPACE, name) or {}).get("status") or {})


def counts(active: int, standby: int, warming: int = 0, draining: int = 0) -> dict[str, int]:
    return {"active": active, "standby": standby, "warming": warming, "draining": draining}


async def test_create_pool_makes_owned_children_and_status(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    await create_pool(kube, minimal(warmStandby=1))
    await eventually(lambda: converged(kube, "sim-tiny"))
    pool = get(kube, POOLS, NAMESPACE, "sim-tiny")
    got = owned_by(kube, "sim-tiny")
    assert {k[0] for k in got} == {DEPLOYMENTS, SERVICES, PDBS}
    for obj in got.values():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == pool["metadata"]["uid"]
        assert ref["kind"] == "InferencePool"
        assert ref["controller"] is True
    assert got[(DEPLOYMENTS, "sim-tiny-workers")]["spec"]["replicas"] == 2  # 1 active + 1 standby

    # No pods yet (kmock has no controllers): the status says so.
    await eventually(lambda: pool_status(kube, "sim-tiny").get("observedGeneration") == 1)
    assert pool_status(kube, "sim-tiny")["replicas"] == counts(0, 0)
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Ready")["status"] == "False"
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Degraded")["status"] == "False"
    assert pool_status(kube, "sim-tiny")["selector"]

    # Two warm pods appear: one is promoted to active, one stays standby; status counts them.
    await add_pods(kube, NAMESPACE, "sim-tiny", 2, ready=True)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(1, 1))
    pool = get(kube, POOLS, NAMESPACE, "sim-tiny")
    assert condition(pool, "Ready")["status"] == "True"
    assert condition(pool, "Scaling")["reason"] == "Stable"
    pods = live(kube, PODS, NAMESPACE)
    assert sorted(p["metadata"]["labels"][LABEL_ROLE] for p in pods.values()) == [
        "active",
        "standby",
    ]
    assert all(ANNOTATION_DELETION_COST in p["metadata"]["annotations"] for p in pods.values())
    reasons = {e["reason"] for e in events(kube, NAMESPACE, "sim-tiny")}
    assert {"Created", "RolesAssigned"} <= reasons


async def test_editing_min_and_warm_standby_converges(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    await create_pool(kube, minimal())
    await eventually(lambda: converged(kube, "sim-tiny"))
    await add_pods(kube, NAMESPACE, "sim-tiny", 1, ready=True)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(1, 0))

    await patch_pool(
        kube, NAMESPACE, "sim-tiny", {"spec": {"replicas": {"min": 2, "warmStandby": 1}}}
    )
    deployment = (DEPLOYMENTS, "sim-tiny-workers")
    await eventually(lambda: children(kube, NAMESPACE)[deployment]["spec"]["replicas"] == 3)
    assert converged(kube, "sim-tiny")
    # The ReplicaSet would add two pods: they come up warming, then warm.
    names = await add_pods(kube, NAMESPACE, "sim-tiny", 2, ready=False, start=1)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(1, 0, 2))
    scaling = condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Scaling")
    assert (scaling["status"], scaling["reason"]) == ("True", "ScalingUp")
    from kmockkit import set_ready

    await set_ready(kube, NAMESPACE, names)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(2, 1))
    status = pool_status(kube, "sim-tiny")
    assert status["observedGeneration"] == 2
    assert status["desiredReplicas"] == 2
    assert condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Ready")["status"] == "True"

    # Shrink back: the Deployment goes to 1 and the cheapest pods get the lowest cost.
    await patch_pool(
        kube, NAMESPACE, "sim-tiny", {"spec": {"replicas": {"min": 1, "warmStandby": 0}}}
    )
    await eventually(lambda: children(kube, NAMESPACE)[deployment]["spec"]["replicas"] == 1)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(1, 0, 0, 2))
    roles = {n: p["metadata"]["labels"][LABEL_ROLE] for n, p in live(kube, PODS, NAMESPACE).items()}
    assert sorted(roles.values()) == ["active", "draining", "draining"]
    reasons = [e["reason"] for e in events(kube, NAMESPACE, "sim-tiny")]
    assert "Updated" in reasons


async def test_a_pool_at_zero_keeps_no_standby(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    """``min: 0, warmStandby: 1`` scaled to zero (as the autoscaler writes it): no pod is
    kept, the standby drains too (docs/proposals/0010-pool-at-zero.md)."""
    await create_pool(kube, minimal(min=0, desired=1, warmStandby=1))
    deployment = (DEPLOYMENTS, "sim-tiny-workers")
    await eventually(lambda: converged(kube, "sim-tiny"))
    assert children(kube, NAMESPACE)[deployment]["spec"]["replicas"] == 2
    await add_pods(kube, NAMESPACE, "sim-tiny", 2, ready=True)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(1, 1))

    await patch_pool(kube, NAMESPACE, "sim-tiny", {"spec": {"replicas": {"desired": 0}}})
    await eventually(lambda: children(kube, NAMESPACE)[deployment]["spec"]["replicas"] == 0)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(0, 0, 0, 2))
    roles = {n: p["metadata"]["labels"][LABEL_ROLE] for n, p in live(kube, PODS, NAMESPACE).items()}
    assert sorted(roles.values()) == ["draining", "draining"]
    status = pool_status(kube, "sim-tiny")
    assert status["desiredReplicas"] == 0
    assert "0/0 standby" in condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Scaling")["message"]


async def test_deleting_a_pool_removes_everything(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    await create_pool(kube, minimal())
    await create_pool(kube, minimal("other"))
    await eventually(lambda: converged(kube, "sim-tiny") and converged(kube, "other"))
    await delete_pool(kube, NAMESPACE, "sim-tiny")
    await eventually(lambda: get(kube, POOLS, NAMESPACE, "sim-tiny") is None)
    await eventually(lambda: not owned_by(kube, "sim-tiny"))
    assert converged(kube, "other")  # the other pool is untouched
    assert set(children(kube, NAMESPACE)) == set(owned_by(kube, "other"))


async def test_bad_pools_are_degraded_with_an_event_and_others_keep_reconciling(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    gpu = minimal("bad-gpu")
    gpu["spec"]["resources"] = {"gpuType": "nvidia-b300"}  # valid schema, unknown type
    invalid = minimal("bad-spec", min=5, max=2)  # CEL would refuse it; kmock does not
    args = minimal("bad-args")  # engine args vLLM does not have / would refuse
    args["spec"]["engine"] = {
        "kind": "sim",
        "args": {"maxNumBatchedTokenz": 1, "quantization": "fp9"},
    }
    await create_pool(kube, gpu)
    await create_pool(kube, invalid)
    await create_pool(kube, args)
    await create_pool(kube, minimal("good"))

    await eventually(lambda: converged(kube, "good"))
    for name, reason, words in (
        ("bad-gpu", "BuildFailed", "unknown resources.gpuType 'nvidia-b300'"),
        ("bad-spec", "InvalidSpec", "min"),
        (
            "bad-args",
            "InvalidSpec",
            "engine.args.maxNumBatchedTokenz: not an engine argument of vLLM 0.32.0 (did you "
            "mean maxNumBatchedTokens?)",
        ),
        ("bad-args", "InvalidSpec", "engine.args.quantization: 'fp9' is not one of"),
    ):
        await eventually(
            lambda name=name: (
                condition(get(kube, POOLS, NAMESPACE, name), "Degraded").get("status") == "True"
            )
        )
        degraded = condition(get(kube, POOLS, NAMESPACE, name), "Degraded")
        assert degraded["reason"] == reason
        assert words in degraded["message"]
        assert condition(get(kube, POOLS, NAMESPACE, name), "Ready")["status"] == "False"
        assert not owned_by(kube, name)  # nothing half-applied
        await eventually(
            lambda name=name, reason=reason: any(
                e["type"] == "Warning" and e["reason"] == reason
                for e in events(kube, NAMESPACE, name)
            )
        )

    # Fixing the spec recovers the pool.
    await patch_pool(
        kube, NAMESPACE, "bad-gpu", {"spec": {"resources": {"gpuType": "nvidia-h100"}}}
    )
    await eventually(lambda: converged(kube, "bad-gpu"))
    await eventually(
        lambda: condition(get(kube, POOLS, NAMESPACE, "bad-gpu"), "Degraded")["status"] == "False"
    )


async def test_restart_mid_reconcile_converges_to_the_same_objects(
    kube: PreheatKube, no_leaked_tasks: None
) -> None:
    """Crash the operator right after its first child write, restart it: same objects.

    After the first Deployment is created the operator is told to stop and every further
    write of its reconciler fails (503), as if it had died mid-reconcile (kopf's own
    bookkeeping goes through, so that it stops promptly).
    """
    op = OperatorProcess()
    stopped: list[str] = []

    def stop_after_first_create(request: Any) -> None:
        agent = str(request.headers.get("User-Agent", ""))
        from_reconciler = not agent.startswith(("kmock/", "kopf/"))
        if stopped and from_reconciler and request.method in ("POST", "PATCH"):
            raise kmock.KubernetesError(503, "ServiceUnavailable", "operator crashed (test)")
        if request.method == "POST" and "deployments" in str(request.url) and not stopped:
            stopped.append(str(request.url))
            op.stop_flag.set()

    kube.on_request = stop_after_first_create
    await op.start()
    for i in range(3):
        await create_pool(kube, minimal(f"p{i}", warmStandby=1))
    await eventually(lambda: stopped)
    await op.stop()
    await settled(kube)  # its last writes are refused too, not served once the hook is gone
    kube.on_request = None
    partial = len(children(kube, NAMESPACE))
    made = set(made_by_operator(kube))  # the children and the workers' Secrets
    mark = len(kube.log)

    await op.start()
    try:
        await eventually(lambda: all(converged(kube, f"p{i}") for i in range(3)))
        first = copy.deepcopy(children(kube, NAMESPACE))
        await op.stop()
        await op.start()  # a third run: nothing to do, nothing changes
        await eventually(lambda: all(pool_status(kube, f"p{i}") for i in range(3)))
    finally:
        await op.stop()
    assert set(children(kube, NAMESPACE)) == set(first)
    for key, obj in children(kube, NAMESPACE).items():
        assert obj["metadata"]["resourceVersion"] == first[key]["metadata"]["resourceVersion"]
    created = [
        (str(r.resource), str((r.data or {}).get("metadata", {}).get("name")))
        for r in operator_requests(kube.log[mark:])
        if r.method == "POST" and str(r.resource) != str(kmock.resource(EVENTS))
    ]
    assert partial == 1
    # after the crash: each missing object (3 children and a Secret per pool) created once;
    # how many Secrets the first run made before it stopped depends on its handlers' order
    assert len(made_by_operator(kube)) == 3 * 4
    assert sorted(created) == sorted(set(made_by_operator(kube)) - made)


async def test_200_pools_reconcile_with_bounded_api_calls(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    n = int(os.environ.get("PREHEAT_TEST_POOLS", "200"))
    started = time.monotonic()
    for i in range(n):
        await create_pool(kube, minimal(f"pool-{i:03d}"))

    def all_observed() -> bool:  # one pass over the store per poll (the store is shared)
        pools = live(kube, POOLS, NAMESPACE)
        return len(pools) == n and all(
            (p.get("status") or {}).get("observedGeneration") == 1 for p in pools.values()
        )

    await eventually(all_observed, within=240, interval=0.5)
    elapsed = time.monotonic() - started
    assert len(children(kube, NAMESPACE)) == 3 * n
    per_pool = requests_by_pool(operator_requests(kube.log))
    shared = per_pool.pop(None, 0)
    worst = max(per_pool.values())
    one = [
        f"{r.method.value} {r.resource.plural if r.resource else ''}"
        + (f"/{r.subresource}" if r.subresource else "")
        for r in operator_requests(kube.log)
        if pool_of_request(r) == "pool-000"
    ]
    print(
        f"\n{n} pools: {elapsed:.1f}s to converge; operator API calls per pool: "
        f"min {min(per_pool.values())}, max {worst}, total {sum(per_pool.values())}; "
        f"not per pool (discovery, list, watch): {shared}; pool-000: {sorted(one)}"
    )
    # create: 3 GET + 3 POST + 1 status PATCH + kopf's finalizer and last-handled PATCHes
    # + 3 Events ("Created") + the control Secret's GET and POST = 14 expected; a bound,
    # independent of the number of pools.
    assert worst <= 16
    assert shared <= 30


async def test_health_and_metrics_endpoints(kube: PreheatKube, no_leaked_tasks: None) -> None:
    import aiohttp

    from preheat.process.ports import ReservedPort

    reserved = ReservedPort()  # held while the operator binds and serves it
    port = reserved.port
    op = OperatorProcess()
    op.options = dataclasses.replace(op.options, health_port=port)
    await op.start()
    try:
        await create_pool(kube, minimal(warmStandby=1))
        await eventually(lambda: converged(kube, "sim-tiny"))
        await eventually(lambda: pool_status(kube, "sim-tiny").get("observedGeneration") == 1)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                text = await resp.text()
    finally:
        await op.stop()
        reserved.release()
    line = 'preheat_pool_replicas{namespace="serving",pool="sim-tiny",state="active"} 0.0'
    assert line in text
    # Deployment, Service, PDB and the control-token Secret
    assert 'preheat_operator_actions_total{action="create"} 4.0' in text


async def test_kopf_run_with_the_handlers_module(
    kube: PreheatKube, no_leaked_tasks: None, monkeypatch: Any
) -> None:
    """``kopf run --standalone -n NS -m preheat.operator.handlers`` under kopf's KopfRunner."""
    import asyncio

    from kopf.testing import KopfRunner

    monkeypatch.setenv("PREHEAT_OPERATOR_CONFIG", "")
    args = ["run", "--standalone", "-n", NAMESPACE, "-m", "preheat.operator.handlers"]
    runner = KopfRunner(args, timeout=30)
    await asyncio.to_thread(runner.__enter__)
    try:
        await create_pool(kube, minimal())
        await eventually(lambda: converged(kube, "sim-tiny"))
    finally:
        await asyncio.to_thread(runner.__exit__, None, None, None)
    assert runner.exit_code == 0, runner.output


async def test_the_pods_watch_asks_the_api_server_for_workers_only(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    """A cluster-wide operator must not stream every pod of the cluster: its pods list and
    watch carry the workers' label selector, so the API server filters them."""
    await create_pool(kube, minimal())
    await eventually(lambda: converged(kube, "sim-tiny"))
    pod_reads = [
        r for r in operator_requests(kube.log) if r.method == "GET" and r.url.path.endswith("/pods")
    ]
    assert pod_reads, "the operator never listed or watched pods"
    for r in pod_reads:
        assert r.params.get("labelSelector") == f"{LABEL_NAME}={WORKER_NAME},{LABEL_POOL}", r.url


async def test_an_api_refusal_is_a_degraded_condition_with_the_apis_message(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    """RBAC's 403 (or validation's 422) on a child: the pool says so in its Degraded
    condition and a Warning Event with the API's message, not only in the operator's log;
    once the API takes the child, the pool recovers."""

    def forbid_pdbs(request: Any) -> kmock.KubernetesError | None:
        if request.method == "POST" and request.url.path.endswith("/poddisruptionbudgets"):
            return kmock.KubernetesError(
                status=403,
                reason="Forbidden",
                message='poddisruptionbudgets.policy is forbidden: User "system:serviceaccount:'
                'preheat:op" cannot create resource "poddisruptionbudgets"',
            )
        return None

    kube.refuse = forbid_pdbs
    await create_pool(kube, minimal())
    await eventually(
        lambda: (
            condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Degraded").get("status") == "True"
        )
    )
    degraded = condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Degraded")
    assert degraded["reason"] == "APIRefused"
    assert "HTTP 403" in degraded["message"]
    assert "cannot create resource" in degraded["message"]
    assert "RBAC" in degraded["message"]
    await eventually(
        lambda: any(
            e["type"] == "Warning" and e["reason"] == "APIRefused"
            for e in events(kube, NAMESPACE, "sim-tiny")
        )
    )
    kube.refuse = None
    await patch_pool(kube, NAMESPACE, "sim-tiny", {"spec": {"replicas": {"max": 3}}})
    await eventually(lambda: converged(kube, "sim-tiny"))
    await eventually(
        lambda: (
            condition(get(kube, POOLS, NAMESPACE, "sim-tiny"), "Degraded").get("status") == "False"
        )
    )


async def test_a_scale_down_marks_its_victim_before_the_deployment_shrinks(
    kube: PreheatKube, operator: OperatorProcess
) -> None:
    """2 -> 1 active: the victim is labelled draining with the lowest deletion cost before
    the Deployment's replicas go down, so the ReplicaSet deletes it and not the worker that
    stays (shrinking first let a ReplicaSet that deletes at once cut the last active one)."""
    await create_pool(kube, minimal(min=1, max=3, desired=2, warmStandby=0))
    await eventually(lambda: converged(kube, "sim-tiny"))
    await add_pods(kube, NAMESPACE, "sim-tiny", 2, ready=True)
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(2, 0))
    mark = len(kube.log)
    await patch_pool(kube, NAMESPACE, "sim-tiny", {"spec": {"replicas": {"desired": 1}}})
    await eventually(lambda: converged(kube, "sim-tiny"))
    await eventually(lambda: pool_status(kube, "sim-tiny").get("replicas") == counts(1, 0, 0, 1))

    def is_patch(r: Any, suffix: str) -> bool:
        return bool(r.method == "PATCH" and r.url.path.endswith(suffix))

    later = operator_requests(kube.log[mark:])
    drained = next(
        i
        for i, r in enumerate(later)
        if is_patch(r, "")
        and "/pods/" in r.url.path
        and ((r.data or {}).get("metadata") or {}).get("labels", {}).get(LABEL_ROLE) == "draining"
    )
    shrunk = next(
        i
        for i, r in enumerate(later)
        if is_patch(r, "/deployments/sim-tiny-workers")
        and ((r.data or {}).get("spec") or {}).get("replicas") == 1
    )
    assert drained < shrunk, "the Deployment shrank before its victim was marked"
    victim = later[drained]
    cost = victim.data["metadata"]["annotations"][ANNOTATION_DELETION_COST]
    assert int(cost) == min(
        int(p["metadata"]["annotations"][ANNOTATION_DELETION_COST])
        for p in live(kube, PODS, NAMESPACE).values()
    )
