"""Table tests of the operator's pure parts: status/conditions, merge patches, config."""

from __future__ import annotations

from typing import Any

import pytest

from preheat.operator.kube import merge_patch
from preheat.operator.options import OperatorConfigError, parse_config
from preheat.operator.status import ObservedPod, compute_status, observe_pod, status_changed

NOW = "2026-11-22T00:00:00Z"


def pod(role: str = "standby", ready: bool = True, terminating: bool = False) -> ObservedPod:
    return ObservedPod(name=f"p-{role}-{ready}", role=role, ready=ready, terminating=terminating)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


@pytest.mark.parametrize(
    ("pods", "active", "standby", "counts", "ready", "scaling"),
    [
        ([], 1, 0, (0, 0, 0, 0), ("False", "WaitingForWarmPods"), ("True", "ScalingUp")),
        ([pod("active")], 1, 0, (1, 0, 0, 0), ("True", "ActiveWarm"), ("False", "Stable")),
        (
            [pod("active"), pod("standby", ready=False)],
            1,
            1,
            (1, 0, 1, 0),
            ("True", "ActiveWarm"),
            ("True", "RefillingStandby"),
        ),
        (
            [pod("active"), pod("active", terminating=True)],
            1,
            0,
            (1, 0, 0, 1),
            ("True", "ActiveWarm"),
            ("True", "ScalingDown"),
        ),
        (
            [pod("active"), pod("standby"), pod("standby")],
            1,
            1,
            (1, 2, 0, 0),
            ("True", "ActiveWarm"),
            ("True", "ScalingDown"),
        ),
        ([pod("draining")], 0, 0, (0, 0, 0, 1), ("True", "ActiveWarm"), ("True", "ScalingDown")),
    ],
)
def test_counts_and_conditions(
    pods: list[ObservedPod],
    active: int,
    standby: int,
    counts: tuple[int, int, int, int],
    ready: tuple[str, str],
    scaling: tuple[str, str],
) -> None:
    status = compute_status(
        pods=pods,
        want_active=active,
        want_standby=standby,
        selector="s",
        generation=3,
        previous=None,
        now=NOW,
    )
    assert tuple(status["replicas"].values()) == counts
    got = conditions(status)
    assert got["Ready"] == ready
    assert got["Scaling"] == scaling
    assert got["Degraded"] == ("False", "AsExpected")
    assert status["observedGeneration"] == 3
    assert status["desiredReplicas"] == active


def test_transition_time_kept_while_status_holds_and_degraded_carries_the_message() -> None:
    from preheat.operator.status import Problem

    first = compute_status(
        pods=[], want_active=1, want_standby=0, selector="s", generation=1, previous=None, now="t1"
    )
    again = compute_status(
        pods=[], want_active=1, want_standby=0, selector="s", generation=1, previous=first, now="t2"
    )
    assert again == first
    assert not status_changed(again, first)
    bad = compute_status(
        pods=[],
        want_active=None,
        want_standby=0,
        selector="s",
        generation=2,
        previous=first,
        now="t3",
        problem=Problem("BuildFailed", "unknown resources.gpuType 'x'"),
    )
    degraded = next(c for c in bad["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "BuildFailed")
    assert degraded["lastTransitionTime"] == "t3"
    assert "gpuType" in degraded["message"]
    ready = next(c for c in bad["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "t1"  # was False, still False
    assert status_changed(bad, first)


def test_observe_pod_reads_role_readiness_cost_and_deletion() -> None:
    raw = {
        "metadata": {
            "name": "w-1",
            "labels": {"preheat.dev/role": "active"},
            "annotations": {"controller.kubernetes.io/pod-deletion-cost": "7"},
            "resourceVersion": "12",
            "deletionTimestamp": "x",
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    p = observe_pod(raw)
    assert (p.role, p.ready, p.terminating, p.deletion_cost) == ("active", True, True, "7")
    assert p.state == "draining"
    assert p.view().role == "draining"
    assert p.ready_after is None  # no creation or transition time: not measured


def test_a_ready_pods_cold_start_is_creation_to_ready() -> None:
    """``ready_after`` (the measured cold start the forecast's horizon defaults to): the
    Ready condition's lastTransitionTime less creationTimestamp, while Ready; None while
    not Ready, or when a time is missing, unreadable or out of order."""

    def pod(created: str, ready: str, since: str) -> dict[str, Any]:
        cond = {"type": "Ready", "status": ready, "lastTransitionTime": since}
        return {"metadata": {"name": "w", "creationTimestamp": created},
                "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                           "lastTransitionTime": created}, cond]}}  # fmt: skip

    p = observe_pod(pod("2026-11-29T10:00:00Z", "True", "2026-11-29T10:00:55Z"))
    assert p.ready_after == 55.0
    assert p.view().ready_after == 55.0
    assert (
        observe_pod(pod("2026-11-29T10:00:00Z", "False", "2026-11-29T10:00:55Z")).ready_after
        is None
    )
    assert observe_pod(pod("2026-11-29T10:00:00Z", "True", "soon")).ready_after is None
    assert observe_pod(pod("", "True", "2026-11-29T10:00:55Z")).ready_after is None
    assert (
        observe_pod(pod("2026-11-29T10:01:00Z", "True", "2026-11-29T10:00:55Z")).ready_after is None
    )


@pytest.mark.parametrize(
    ("desired", "observed", "patch"),
    [
        ({"a": 1}, {"a": 2, "b": 3}, {"a": 1}),  # fields we do not own are left alone
        (
            {"spec": {"nodeSelector": {"x": "1"}}},
            {"spec": {"nodeSelector": {"x": "1", "old": "2"}}},
            {"spec": {"nodeSelector": {"x": "1", "old": None}}},  # exact maps drop keys
        ),
        ({"l": [1]}, {"l": [1, 2]}, {"l": [1]}),  # lists replace
    ],
)
def test_merge_patch(desired: Any, observed: Any, patch: Any) -> None:
    assert merge_patch(desired, observed) == patch


def test_config_file_keys_map_to_build_options() -> None:
    build, namespaces, monitor = parse_config(
        {
            "workerImage": "w:1",
            "watchNamespaces": ["a", "b"],
            "gpuTypes": {"t4": {"gpu": "T4"}},
            "drainGraceSeconds": 40,
            "preStopSleepSeconds": 3,
            "workerServiceMonitor": "auto",
        }
    )
    assert build.worker_image == "w:1"
    assert dict(build.gpu_types) == {"t4": {"gpu": "T4"}}
    assert (build.drain_grace_s, build.pre_stop_sleep_s) == (40, 3)
    assert namespaces == ("a", "b")
    assert monitor == "auto"


def test_config_file_problems_are_reported_together() -> None:
    with pytest.raises(OperatorConfigError) as e:
        parse_config({"bogus": 1, "drainGraceSeconds": -1, "workerServiceMonitor": "maybe"})
    for words in ("bogus", "drainGraceSeconds", "workerServiceMonitor"):
        assert words in e.value.message


def test_chart_config_parses() -> None:
    """The chart's ConfigMap keys are exactly what parse_config reads (rendered by hand)."""
    text = (
        "workerImage: preheat-worker:0.1.0\nwatchNamespaces: []\n"
        'gpuTypes: {"nvidia-l4": {"nvidia.com/gpu.product": "NVIDIA-L4"}}\n'
        'drainGraceSeconds: 30\npreStopSleepSeconds: 5\nworkerServiceMonitor: "auto"\n'
    )
    import yaml

    build, namespaces, _ = parse_config(yaml.safe_load(text))
    assert namespaces == ()
    assert "nvidia-l4" in build.gpu_types


def test_an_unschedulable_pod_shows_in_scaling_with_the_schedulers_message() -> None:
    """A worker the scheduler cannot place (no GPU node, a spread that cannot hold) is not
    'warming' forever without a word: Scaling says Unschedulable with the scheduler's
    message."""
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    raw = {
        "metadata": {"name": "w-2", "labels": {"preheat.dev/role": "standby"}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }
    stuck = observe_pod(raw)
    assert stuck.unschedulable == message
    assert stuck.state == "warming"
    status = compute_status(
        pods=[pod("active"), stuck],
        want_active=1,
        want_standby=1,
        selector="s",
        generation=1,
        previous=None,
        now=NOW,
    )
    (scaling,) = [c for c in status["conditions"] if c["type"] == "Scaling"]
    assert (scaling["status"], scaling["reason"]) == ("True", "Unschedulable")
    assert "1 pod(s) cannot be scheduled (w-2: 0/3 nodes are available" in scaling["message"]
    scheduled = {**raw, "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert observe_pod(scheduled).unschedulable == ""


def test_a_crash_looping_worker_makes_the_pool_degraded_with_its_last_words() -> None:
    """A worker that refuses to start (engine args that slipped past the operator, issue 20)
    exits with its reason on stderr; with FallbackToLogsOnError that is the termination
    message, and the pool goes Degraded quoting it instead of 'warming' forever."""
    refusal = "starting\ninvalid engine args: unknown key 'maxNumSeq' (did you mean maxNumSeqs?)"
    raw = {
        "metadata": {"name": "w-3", "labels": {"preheat.dev/role": "standby"}},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "worker",
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 2, "message": refusal}},
                }
            ],
        },
    }
    looping = observe_pod(raw)
    assert looping.crash == (
        "container worker exited 2: invalid engine args: unknown key 'maxNumSeq' "
        "(did you mean maxNumSeqs?)"
    )
    status = compute_status(
        pods=[looping], want_active=1, want_standby=0, selector="s", generation=1,
        previous=None, now=NOW,
    )  # fmt: skip
    (degraded,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "WorkerCrashLooping")
    assert "w-3: container worker exited 2: invalid engine args" in degraded["message"]
    running = {
        **raw,
        "status": {"containerStatuses": [{"name": "worker", "state": {"running": {}}}]},
    }
    assert observe_pod(running).crash == ""
