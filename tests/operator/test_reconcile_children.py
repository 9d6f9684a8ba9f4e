"""Desired children of a pool, compared with golden YAML files under golden/.

Regenerate after an intended change with ``PREHEAT_UPDATE_GOLDEN=1 pytest tests/operator``
and review the diff.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from poolkit import EXAMPLES, ROOT, load_example

from preheat.api.pool import to_config
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.manifests import (
    ANNOTATION_CONTROL_TOKEN_DIGEST,
    ANNOTATION_DELETION_COST,
    CONTROL_PORT,
    LABEL_POOL,
    LABEL_ROLE,
    BuildError,
    BuildOptions,
    NetworkPolicyOptions,
    Owner,
    build_control_secret,
    build_deployment,
    build_service,
    cache_token_patch,
    control_secret_name,
    control_token_digest,
    desired_children,
    diff,
    needs_update,
    read_cache_token,
    read_control_secret,
    selector_labels,
    selector_string,
    termination_grace_s,
    worker_args,
)
from preheat.core.pool import PoolConfig

GOLDEN = Path(__file__).parent / "golden"
KUBERNETES_VERSION = "1.33.0"  # oldest version the chart supports (preStop sleep: 1.30+)
OWNER = Owner(name="pool", uid="00000000-0000-0000-0000-000000000001")


def config_of(path: Path) -> PoolConfig:
    doc = load_example(path)
    return to_config(doc["spec"], name=doc["metadata"]["name"], namespace="serving")


def config(**spec: Any) -> PoolConfig:
    raw: dict[str, Any] = {"model": {"name": "m"}, "replicas": {"min": 1, "max": 4}, **spec}
    return to_config(raw, name="p", namespace="ns")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_children_match_golden(path: Path) -> None:
    options = BuildOptions(service_monitor="multi-zone" in path.stem)
    c = config_of(path)
    children = desired_children(c, Owner(c.name, OWNER.uid), options)
    text = yaml.safe_dump_all(children, sort_keys=False, width=100)
    golden = GOLDEN / f"{path.stem.removeprefix('pool-')}.yaml"
    if os.environ.get("PREHEAT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no {golden.name}: run with PREHEAT_UPDATE_GOLDEN=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_children_pass_kubernetes_validate_strict(path: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    for child in desired_children(config_of(path), OWNER, BuildOptions()):
        kv.validate(child, KUBERNETES_VERSION, strict=True)
    every = BuildOptions(network_policy=NetworkPolicyOptions(True, "preheat", ("monitoring",)))
    for child in desired_children(config_of(path), OWNER, every):
        kv.validate(child, KUBERNETES_VERSION, strict=True)


def test_every_child_is_owned_and_labelled() -> None:
    for path in EXAMPLES:
        for child in desired_children(config_of(path), OWNER, BuildOptions(service_monitor=True)):
            meta = child["metadata"]
            assert meta["ownerReferences"][0]["uid"] == OWNER.uid
            assert meta["ownerReferences"][0]["controller"] is True
            assert meta["labels"][LABEL_POOL] == load_example(path)["metadata"]["name"]


@pytest.mark.parametrize(
    ("spec", "active", "replicas"),
    [
        ({"replicas": {"min": 2, "max": 8, "warmStandby": 1}}, None, 3),
        ({"replicas": {"min": 2, "max": 8, "warmStandby": 1}}, 5, 6),
        ({"replicas": {"min": 2, "max": 8, "warmStandby": 1}}, 20, 9),  # clamped to max
        ({"replicas": {"min": 2, "max": 8, "warmStandby": 0}}, 0, 2),  # clamped to min
        ({"replicas": {"min": 0, "max": 8, "warmStandby": 0}}, 0, 0),
        ({"replicas": {"min": 1, "max": 8, "desired": 4, "warmStandby": 2}}, None, 6),
    ],
)
def test_replicas_are_active_plus_standby(
    spec: dict[str, Any], active: int | None, replicas: int
) -> None:
    dep = build_deployment(config(**spec), OWNER, BuildOptions(), active=active)
    assert dep["spec"]["replicas"] == replicas


VLLM_OPENAI = ["--openai-port", "8000", "--served-model-name", "m"]


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        (
            {"kind": "sim", "args": {"loadTime": "2s", "timeScale": 0.5, "seed": 3}},
            ["--sim-load-s", "2", "--sim-seed", "3", "--sim-time-scale", "0.5"],
        ),
        (
            {"kind": "vllm", "args": {"enforceEager": False, "dtype": "bfloat16"}},
            [*VLLM_OPENAI, "--vllm-dtype", "bfloat16", "--no-vllm-enforce-eager"],
        ),
        ({"kind": "vllm", "args": {"enforceEager": True}}, [*VLLM_OPENAI, "--vllm-enforce-eager"]),
    ],
)
def test_engine_args_map_to_worker_flags(engine: dict[str, Any], expected: list[str]) -> None:
    args = worker_args(config(engine=engine), BuildOptions(drain_grace_s=20))
    binds = ["--host", "0.0.0.0", "--control-host", "0.0.0.0", "--control-port", "50052"]
    assert args[:6] == binds
    args = args[6:]
    assert args[:10] == [
        "--engine",
        engine["kind"],
        "--model",
        "m",
        "--start-as",
        "standby",
        "--drain-grace-s",
        "20",
        "--log-format",
        "json",
    ]
    assert args[10:] == expected


@pytest.mark.parametrize(("kind", "ports"), [("sim", []), ("vllm", [("openai", 8000)])])
def test_vllm_workers_name_their_openai_port(kind: str, ports: list[tuple[str, int]]) -> None:
    dep = build_deployment(config(engine={"kind": kind}), OWNER, BuildOptions())
    container = dep["spec"]["template"]["spec"]["containers"][0]
    named = [(p["name"], p["containerPort"]) for p in container["ports"]]
    assert named[3:] == ports


def test_worker_flags_exist_in_the_worker() -> None:
    """Every flag the builder emits is one `preheat worker` accepts."""
    import argparse

    from preheat.core.manifests import WORKER_FLAGS
    from preheat.worker.main import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    known = {s for a in parser._actions for s in a.option_strings}
    for flags in WORKER_FLAGS.values():
        assert set(flags.values()) <= known


def test_termination_grace_covers_pre_stop_and_drain() -> None:
    options = BuildOptions(drain_grace_s=45, pre_stop_sleep_s=5)
    dep = build_deployment(config(), OWNER, options)
    pod = dep["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == termination_grace_s(options) > 50
    assert pod["containers"][0]["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}


def test_startup_probe_covers_a_slow_sim_load() -> None:
    dep = build_deployment(
        config(engine={"kind": "sim", "args": {"loadTime": "10m"}}), OWNER, BuildOptions()
    )
    probe = dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 3 * 600


def test_unknown_gpu_type_is_a_build_error_that_says_how_to_fix_it() -> None:
    with pytest.raises(BuildError) as info:
        desired_children(config(resources={"gpuType": "tpu-v5"}), OWNER, BuildOptions())
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert "unknown resources.gpuType 'tpu-v5'" in info.value.message
    assert "nvidia-h100" in info.value.message
    assert "operator.gpuTypes" in info.value.message


def test_single_zone_spread_is_soft() -> None:
    pod = build_deployment(config(topology={"zones": ["a"]}), OWNER, BuildOptions())["spec"][
        "template"
    ]["spec"]
    assert pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_zone_spread_is_hard_only_across_named_zones() -> None:
    """No zones named (nodes may carry no zone label: kind, on-premises): ScheduleAnyway, or
    every worker stays Pending; two or more named: DoNotSchedule, as ``balanced`` promises."""

    def when(topology: dict[str, Any]) -> str:
        dep = build_deployment(config(topology=topology), OWNER, BuildOptions())
        spread = dep["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
        return str(spread["whenUnsatisfiable"])

    assert when({}) == "ScheduleAnyway"
    assert when({"spread": "balanced"}) == "ScheduleAnyway"
    assert when({"zones": ["a", "b"]}) == "DoNotSchedule"
    none = build_deployment(config(topology={"spread": "none"}), OWNER, BuildOptions())
    assert "topologySpreadConstraints" not in none["spec"]["template"]["spec"]


def test_template_role_is_standby_and_selector_has_no_role() -> None:
    dep = build_deployment(config(), OWNER, BuildOptions())
    assert dep["spec"]["template"]["metadata"]["labels"][LABEL_ROLE] == "standby"
    assert LABEL_ROLE not in dep["spec"]["selector"]["matchLabels"]
    assert selector_string(config()) == "app.kubernetes.io/name=preheat-worker,preheat.dev/pool=p"


# --- needs_update ------------------------------------------------------------------------


def observed_from(desired: dict[str, Any]) -> dict[str, Any]:
    """What the API server gives back: server fields, defaults, quantities as strings."""
    obs = copy.deepcopy(desired)
    obs["metadata"].update(
        uid="u",
        resourceVersion="42",
        generation=3,
        creationTimestamp="2026-01-01T00:00:00Z",
        managedFields=[{"manager": "kopf"}],
        annotations={"deployment.kubernetes.io/revision": "2"},
    )
    obs["status"] = {"replicas": 3, "readyReplicas": 3}
    spec = obs["spec"]
    spec["progressDeadlineSeconds"] = 600
    pod = spec["template"]["spec"]
    pod.update(dnsPolicy="ClusterFirst", restartPolicy="Always", schedulerName="default-scheduler")
    c = pod["containers"][0]
    c.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):  # defaults, if unset
        for k, v in {"timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3}.items():
            c[probe].setdefault(k, v)
    return obs


def multi_zone_deployment() -> dict[str, Any]:
    path = next(p for p in EXAMPLES if "multi-zone" in p.stem)
    return build_deployment(config_of(path), OWNER, BuildOptions())


def test_server_populated_fields_need_no_update() -> None:
    desired = multi_zone_deployment()
    assert diff(desired, observed_from(desired)) == []
    assert not needs_update(desired, observed_from(desired))
    assert needs_update(desired, None)


def test_pod_labels_and_deletion_cost_annotations_elsewhere_need_no_update() -> None:
    desired = build_deployment(config(), OWNER, BuildOptions())
    obs = observed_from(desired)
    obs["metadata"]["annotations"][ANNOTATION_DELETION_COST] = "5"
    assert not needs_update(desired, obs)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda o: o["spec"].update(replicas=7), "spec.replicas"),
        (
            lambda o: o["spec"]["template"]["spec"]["containers"][0].update(image="x:1"),
            "spec.template.spec.containers[0].image",
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["args"].append("--x"),
            "spec.template.spec.containers[0].args",
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["nodeSelector"].update(extra="1"),
            "spec.template.spec.nodeSelector.extra",
        ),
        (
            lambda o: o["metadata"]["labels"].pop("preheat.dev/pool"),
            "metadata.labels.preheat.dev/pool",
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
                {"nvidia.com/gpu": "2"}
            ),
            "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
    ],
)
def test_a_change_in_a_field_we_own_needs_an_update(change: Any, where: str) -> None:
    desired = multi_zone_deployment()
    obs = observed_from(desired)
    change(obs)
    assert diff(desired, obs) == [where]
    assert needs_update(desired, obs)


def test_workers_expose_the_control_port_and_read_the_token_from_the_pools_secret() -> None:
    c = config()
    dep = build_deployment(c, OWNER, BuildOptions(), control_token_digest="abc123")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert c.engine.kind == "vllm"  # the default engine: its OpenAI API has a port too
    assert ports == {"grpc": 50051, "http": 8080, "control": CONTROL_PORT, "openai": 8000}
    env = {e["name"]: e for e in container["env"]}
    assert env["PREHEAT_CONTROL_TOKEN"] == {
        "name": "PREHEAT_CONTROL_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "p-workers-control", "key": "control-token"}},
    }
    args = container["args"]
    assert args[args.index("--control-port") + 1] == str(CONTROL_PORT)
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {ANNOTATION_CONTROL_TOKEN_DIGEST: "abc123"}
    # the Service (what clients resolve) does not carry the control port
    service = {p["name"] for p in build_service(c, OWNER)["spec"]["ports"]}
    assert service == {"grpc", "http"}


def test_the_control_secret_round_trips_and_a_broken_one_names_the_fix() -> None:
    c = config()
    secret = build_control_secret(c, OWNER, "s3cret")
    assert secret["metadata"]["name"] == control_secret_name(c) == "p-workers-control"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    assert "s3cret" not in str(secret)  # base64 in data, as the API stores it
    assert read_control_secret(secret) == "s3cret"
    for data in ({}, {"control-token": ""}, {"control-token": "***"}, {"control-token": 5}):
        broken = {**secret, "data": data}
        with pytest.raises(PreheatError, match="p-workers-control has no usable 'control-token'"):
            read_control_secret(broken)
    assert control_token_digest("a") != control_token_digest("b")
    assert "a" * 8 not in control_token_digest("a" * 40)


def test_the_cache_token_is_optional_in_the_secret_and_in_the_digest() -> None:
    c = config()
    plain = build_control_secret(c, OWNER, "ctl")
    assert read_cache_token(plain) == ""
    both = build_control_secret(c, OWNER, "ctl", "cache")
    assert read_control_secret(both) == "ctl"
    assert read_cache_token(both) == "cache"
    assert read_cache_token({**plain, **cache_token_patch("new")}) == "new"
    assert read_cache_token({"data": {"cache-token": "***"}}) == ""
    assert control_token_digest("ctl") != control_token_digest("ctl", "cache")
    assert control_token_digest("ctl", "a") != control_token_digest("ctl", "b")
    (container,) = build_deployment(c, OWNER, BuildOptions())["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["PREHEAT_CACHE_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "p-workers-control",
        "key": "cache-token",
        "optional": True,  # a pool without a cache token still starts
    }


def test_the_example_network_policy_selects_the_workers_and_their_named_ports() -> None:
    """worker/example-networkpolicy.yaml (documented in worker/README.md) matches what the
    operator builds: its pod selector selects the pool's worker pods, and every port it
    names is a container port of theirs (the control port only for the operator)."""
    doc = yaml.safe_load((ROOT / "worker" / "example-networkpolicy.yaml").read_text())
    pool = config_of(ROOT / "examples" / "pool-minimal.yaml")
    dep = build_deployment(pool, OWNER, BuildOptions())
    template = dep["spec"]["template"]
    assert doc["metadata"]["namespace"] == "serving" == pool.namespace
    selector = doc["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    (container,) = template["spec"]["containers"]
    names = {p["name"] for p in container["ports"]}
    rules = {r["ports"][0]["port"]: r.get("from", []) for r in doc["spec"]["ingress"]}
    assert set(rules) == names == {"grpc", "http", "control"}
    (operator,) = rules["control"]
    assert operator["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "preheat-operator"
    (router,) = rules["grpc"]
    assert router["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "preheat-router"
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    kv.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("sent", "stored"),
    [("0.5", "500m"), ("1024Mi", "1Gi"), ("2", "2000m"), ("1e3", "1k"), ("1.5Gi", "1536Mi")],
)
def test_quantities_the_api_server_stored_canonically_need_no_update(
    sent: str, stored: str
) -> None:
    """The API server stores ``cpu: "0.5"`` as ``500m`` and ``1024Mi`` as ``1Gi``: a text
    comparison patched every pool's Deployment (and posted an event) on every resync."""
    desired = multi_zone_deployment()
    c = desired["spec"]["template"]["spec"]["containers"][0]
    c["resources"] = {"requests": {"cpu": sent, "memory": sent}, "limits": {"memory": sent}}
    obs = observed_from(desired)
    co = obs["spec"]["template"]["spec"]["containers"][0]
    co["resources"] = {"requests": {"cpu": stored, "memory": stored}, "limits": {"memory": stored}}
    assert diff(desired, obs) == []
    co["resources"]["requests"]["cpu"] = "3"
    assert diff(desired, obs) == ["spec.template.spec.containers[0].resources.requests.cpu"]


def test_a_pool_name_too_long_for_its_service_is_a_build_error() -> None:
    """The operator shows a BuildError as Degraded with its message (reconciler.py)."""
    long = to_config(
        {"model": {"name": "m"}, "replicas": {"max": 1}}, name="p" * 59, namespace="ns"
    )
    with pytest.raises(BuildError) as info:
        desired_children(long, OWNER, BuildOptions())
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert "its Service 'pppp" in info.value.message
    assert "at most 55 characters (this one has 59)" in info.value.message


def test_workers_run_without_privilege_escalation_or_capabilities() -> None:
    """What vLLM tolerates (no escalation, every capability dropped, the runtime's default
    seccomp profile); root and a writable root filesystem stay, see WORKER_SECURITY_CONTEXT."""
    pod = build_deployment(config(), OWNER, BuildOptions())["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_worker_pods_take_the_operators_pod_settings_and_the_pools_over_them() -> None:
    """Pull secrets, ServiceAccount, runtime and priority classes, extra env and env-from
    Secrets (a model hub's token): the operator's config for every pool, a pool's spec.pod
    over it (by name for variables; secrets from both)."""
    from preheat.core.pool import EnvVar, PodConfig

    defaults = PodConfig(
        image_pull_secrets=("regcred",),
        service_account="workers",
        runtime_class="nvidia",
        env=(EnvVar("HF_HOME", value="/cache"), EnvVar("LOG", value="info")),
        env_from_secrets=("hub",),
    )
    pool = config(
        pod={
            "imagePullSecrets": [{"name": "team-regcred"}],
            "priorityClassName": "inference-high",
            "env": [
                {"name": "LOG", "value": "debug"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}},
            ],
            "envFrom": [{"secretRef": {"name": "team"}}],
        }
    )
    dep = build_deployment(pool, OWNER, BuildOptions(worker_pod=defaults))
    spec = dep["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "team-regcred"}]
    assert spec["serviceAccountName"] == "workers"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "inference-high"
    assert spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_HOME"] == {"name": "HF_HOME", "value": "/cache"}
    assert env["LOG"] == {"name": "LOG", "value": "debug"}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "t"}}
    assert "PREHEAT_CONTROL_TOKEN" in env  # the operator's own stay
    assert c["envFrom"] == [{"secretRef": {"name": "hub"}}, {"secretRef": {"name": "team"}}]
    plain = build_deployment(config(), OWNER, BuildOptions())["spec"]["template"]["spec"]
    assert not {"imagePullSecrets", "serviceAccountName", "runtimeClassName"} & set(plain)


def test_a_pools_network_policy_admits_the_control_plane_and_the_scrapers_only() -> None:
    """networkPolicy.enabled: the pool's workers take every port from the release's operator
    and routers, the metrics port from the scrapers' namespaces, and nothing else."""
    options = NetworkPolicyOptions(True, "preheat", ("monitoring",))
    assert not any(
        c["kind"] == "NetworkPolicy" for c in desired_children(config(), OWNER, BuildOptions())
    )
    children = desired_children(config(), OWNER, BuildOptions(network_policy=options))
    (policy,) = [c for c in children if c["kind"] == "NetworkPolicy"]
    assert policy["metadata"]["name"] == "p-workers"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": selector_labels(config())}
    assert spec["policyTypes"] == ["Ingress"]
    control, scrape = spec["ingress"]
    assert control["from"] == [
        {
            "podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "preheat"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "preheat"}},
        }
    ]
    assert sorted(p["port"] for p in control["ports"]) == [8000, 8080, 50051, 50052]
    assert scrape["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert scrape["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    sim = config(engine={"kind": "sim"})
    (sim_policy,) = [
        c
        for c in desired_children(sim, OWNER, BuildOptions(network_policy=options))
        if c["kind"] == "NetworkPolicy"
    ]
    assert 8000 not in [p["port"] for p in sim_policy["spec"]["ingress"][0]["ports"]]
