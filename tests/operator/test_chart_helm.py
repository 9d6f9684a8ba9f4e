"""The Helm chart: `helm lint`, and `helm template --include-crds` through
`kubernetes-validate --strict` for the default values and for every optional feature on.

The helm binary comes from `scripts/get_helm.sh .cache/tools` (or $PREHEAT_HELM, or PATH);
without it these tests skip and say so. ServiceMonitor and PrometheusRule (monitoring.coreos.com)
have no schema in kubernetes-validate: those objects are checked for shape here instead (the
rules' PromQL in tests/dashboards).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from poolkit import CHART_CRD_PATH, CRD_PATH, ROOT

from preheat.api.pool import to_config
from preheat.core.manifests import BuildOptions, Owner, build_deployment, build_service_monitor
from preheat.operator.options import autoscaler_env, parse_config

CHART = ROOT / "charts" / "preheat"
# the chart says kubeVersion >=1.30: validate on the oldest, a middle and a recent one
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0", "1.35.0")
ALL_ON = [
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "grafana.dashboard.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "tracing.enabled=true",
    "--set",
    "networkPolicy.enabled=true",
    "--set",
    "operator.watchNamespaces={serving,batch}",
    "--set",
    "router.service.type=LoadBalancer",
    "--set",
    "router.auth.apiKeys.secretName=router-api-keys",
    "--set",
    "router.auth.pickToken.secretName=router-pick-token",
    "--set",
    "router.auth.tenantHeader=x-tenant",
    "--set",
    "operator.autoscaler.prometheusUrl=http://prometheus.monitoring:9090",
    "--set-string",
    r'operator.autoscaler.routerSelector=namespace="{namespace}"\,pool="{pool}"',
]
VALUE_SETS = {"defaults": [], "all-on": ALL_ON}


def helm_binary() -> str | None:
    for candidate in (os.environ.get("PREHEAT_HELM"), str(ROOT / ".cache" / "tools" / "helm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("helm")


HELM = helm_binary()
needs_helm = pytest.mark.skipif(
    HELM is None,
    reason="no helm binary: run `scripts/get_helm.sh .cache/tools` or set PREHEAT_HELM",
)


def helm(*args: str) -> str:
    assert HELM is not None
    done = subprocess.run(
        [HELM, *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def render(extra: list[str]) -> list[dict[str, Any]]:
    text = helm("template", "pre", str(CHART), "--namespace", "preheat", "--include-crds", *extra)
    return [d for d in yaml.safe_load_all(text) if d]


def test_chart_crd_is_byte_equal_to_crds() -> None:
    assert CHART_CRD_PATH.read_bytes() == CRD_PATH.read_bytes()


@needs_helm
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint(values: list[str]) -> None:
    out = helm("lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in out


@needs_helm
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_template_passes_kubernetes_validate_strict(values: list[str], version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    docs = render(values)
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "Service", "ClusterRole"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            if doc["kind"] == "PrometheusRule":  # tests/dashboards checks its rules
                assert doc["spec"]["groups"]
                continue
            assert doc["kind"] == "ServiceMonitor"
            assert doc["spec"]["endpoints"][0]["port"] == "http"
            assert doc["spec"]["selector"]["matchLabels"]
            continue
        kv.validate(doc, version, strict=True)


@needs_helm
def test_optional_objects_follow_their_values() -> None:
    def kinds(values: list[str]) -> list[tuple[str, str]]:
        return sorted((d["kind"], d["metadata"]["name"]) for d in render(values))

    default = kinds([])
    all_on = kinds(ALL_ON)
    assert not [k for k in default if k[0] == "ServiceMonitor"]
    assert [k for k in all_on if k[0] == "ServiceMonitor"] == [
        ("ServiceMonitor", "pre-preheat-operator"),
        ("ServiceMonitor", "pre-preheat-router"),
    ]
    assert ("ConfigMap", "pre-preheat-dashboard") in all_on
    assert ("ConfigMap", "pre-preheat-dashboard") not in default
    assert ("PrometheusRule", "pre-preheat-slo") in all_on
    assert ("PrometheusRule", "pre-preheat-slo") not in default
    roles = [d for d in render(ALL_ON) if d["kind"] == "Role"]
    # each reads (the operator and the uninstall hook: write) pools there
    for who in ("operator", "router", "release-pools"):
        mine = [r for r in roles if r["metadata"]["name"].endswith(f"-{who}")]
        assert sorted(r["metadata"]["namespace"] for r in mine) == ["batch", "serving"]
    assert len(roles) == 6
    cluster_wide = [d["metadata"]["name"] for d in render(ALL_ON) if d["kind"] == "ClusterRole"]
    assert cluster_wide == ["pre-preheat-router"]  # node zones only: nodes are not namespaced


@needs_helm
def test_deployments_run_the_control_image_with_their_subcommand() -> None:
    deps = {d["metadata"]["name"]: d for d in render([]) if d["kind"] == "Deployment"}
    for name, command in (("pre-preheat-operator", "operator"), ("pre-preheat-router", "router")):
        container = deps[name]["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == "preheat-control:0.1.0"
        assert container["args"][0] == command
        assert deps[name]["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
        assert container["securityContext"]["readOnlyRootFilesystem"]
    config = next(
        d
        for d in render([])
        if d["metadata"]["name"] == "pre-preheat-operator" and d["kind"] == "ConfigMap"
    )
    operator_yaml = yaml.safe_load(config["data"]["operator.yaml"])
    assert operator_yaml["workerImage"] == "preheat-worker:0.1.0"
    assert operator_yaml["gpuTypes"]["nvidia-h100"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }


@needs_helm
def test_every_probe_allows_more_than_kubernetes_default_second() -> None:
    """The chart's probes and the operator's worker pods: a process busy for a moment
    (a burst at the router, a long prefill on a worker) answers its probe a little late;
    Kubernetes' default timeoutSeconds of 1 took the operator out of Ready once on a busy
    node. Every probe sets it, to at least 2 s."""
    probes = []
    for doc in render(ALL_ON):
        if doc["kind"] != "Deployment":
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                if kind in c:
                    probes.append((f"{doc['metadata']['name']}/{kind}", c[kind]))
    spec = {"model": {"name": "m"}, "engine": {"kind": "sim"}, "replicas": {"max": 1}}
    owner = Owner(name="p", uid="00000000-0000-0000-0000-000000000001")
    worker = build_deployment(to_config(spec, name="p", namespace="ns"), owner, BuildOptions())
    (c,) = worker["spec"]["template"]["spec"]["containers"]
    probes += [(f"worker/{k}", c[k]) for k in ("startupProbe", "readinessProbe", "livenessProbe")]
    assert len(probes) >= 7, probes
    short = [name for name, p in probes if p.get("timeoutSeconds", 1) < 2]
    assert short == []


def _rules(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] == name:
            rules += d["rules"]
    return rules


def _allowed(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {
        v
        for r in rules
        if group in r["apiGroups"] and resource in r["resources"]
        for v in r["verbs"]
    }


@needs_helm
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rbac_is_least_privilege(values: list[str]) -> None:
    docs = render(values)
    operator = _rules(docs, "pre-preheat-operator")
    router = _rules(docs, "pre-preheat-router")
    for rule in operator + router:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    for rule in router:
        assert "secrets" not in rule["resources"]
    # what each call needs, no more (the cluster tier checks every grant is called:
    # tests/cluster/test_cluster_box.py::test_the_charts_rbac_is_what_the_pods_called)
    # the pools' token Secrets: read by name, made once, patched (cache token); never listed
    assert _allowed(operator, "", "secrets") == {"get", "create", "patch"}
    assert _allowed(operator, "preheat.dev", "inferencepools") == {"get", "list", "watch", "patch"}
    assert _allowed(operator, "preheat.dev", "inferencepools/status") == {"patch"}
    assert not _allowed(operator, "preheat.dev", "inferencepools/scale")
    # blockOwnerDeletion on the children's ownerReferences (OwnerReferencesPermissionEnforcement)
    assert _allowed(operator, "preheat.dev", "inferencepools/finalizers") == {"update"}
    assert _allowed(operator, "", "pods") == {"list", "watch", "patch"}
    for group, resource in (
        ("", "nodes"),
        ("", "namespaces"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ):
        assert not _allowed(operator, group, resource), resource
    for group, resource in (
        ("apps", "deployments"),
        ("", "services"),
        ("policy", "poddisruptionbudgets"),
        ("monitoring.coreos.com", "servicemonitors"),
    ):  # the garbage collector deletes them with their pool
        assert _allowed(operator, group, resource) == {"get", "create", "patch"}, resource
    assert _allowed(operator, "", "events") == {"create"}
    assert not _allowed(operator, "events.k8s.io", "events")
    for rule in router:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, "the router only reads"


def test_dashboard_json_queries_the_tail_metrics() -> None:
    dash = json.loads((CHART / "files" / "dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for needle in (
        "histogram_quantile(0.95, sum by (le, pool) (rate(preheat_router_ttft_seconds_bucket",
        "histogram_quantile(0.99, sum by (le, pool) (rate(preheat_router_ttft_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "preheat_pool_replicas",
        "rate(preheat_router_refused_total",  # refused demand, by reason
        "rate(preheat_router_arrivals_total",
    ):
        assert needle in exprs
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_values_sections_are_documented() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith((" ", "#")):
            documented = lines[i - 1].startswith("#") or " # " in line
            assert documented, f"values.yaml: document {line.split(':')[0]}"


@needs_helm
def test_the_operator_reads_prometheus_and_the_routers_when_configured() -> None:
    """The autoscaler's source: a direct scrape by default; with a Prometheus URL and a
    router selector, the routers' held and refused requests too (refused demand)."""

    def env(values: list[str]) -> dict[str, str]:
        """The autoscaler's settings as the operator reads them from its config file."""
        for doc in render(values):
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-operator"):
                config = yaml.safe_load(doc["data"]["operator.yaml"])
                parse_config(config)  # the operator accepts it
                return autoscaler_env(config)
        raise AssertionError("no operator ConfigMap")

    assert "PREHEAT_PROMETHEUS_URL" not in env([])
    on = env(ALL_ON)
    assert on["PREHEAT_PROMETHEUS_URL"] == "http://prometheus.monitoring:9090"
    assert on["PREHEAT_PROMETHEUS_ROUTER_SELECTOR"] == 'namespace="{namespace}",pool="{pool}"'
    assert "PREHEAT_PROMETHEUS_SELECTOR" not in on  # the operator's default
    assert (
        env(["--set", "operator.autoscaler.intervalSeconds=5"])["PREHEAT_AUTOSCALER_INTERVAL_S"]
        == "5"
    )


@needs_helm
def test_worker_service_monitors_get_the_releases_labels() -> None:
    """kube-prometheus-stack's Prometheus selects ServiceMonitors by its release label: the
    chart's metrics.serviceMonitor.labels reach the operator's config, and from there every
    pool's worker ServiceMonitor (its labels and the series' pool and role labels)."""

    def config(values: list[str]) -> dict[str, Any]:
        for doc in render(values):
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-operator"):
                loaded: dict[str, Any] = yaml.safe_load(doc["data"]["operator.yaml"])
                return loaded
        raise AssertionError("no operator ConfigMap")

    assert config([])["workerServiceMonitorLabels"] == {}
    on = config(["--set", "metrics.serviceMonitor.labels.release=kps"])
    build, _, _ = parse_config(on)
    assert build.service_monitor_labels == {"release": "kps"}
    pool = to_config({"model": {"name": "m"}, "replicas": {"max": 1}}, name="p", namespace="ns")
    monitor = build_service_monitor(pool, Owner("p", "u"), build)
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["metadata"]["labels"]["preheat.dev/pool"] == "p"
    relabel = monitor["spec"]["endpoints"][0]["relabelings"]
    assert {(r["sourceLabels"][0], r["targetLabel"]) for r in relabel} == {
        ("__meta_kubernetes_service_label_preheat_dev_pool", "pool"),
        ("__meta_kubernetes_pod_label_preheat_dev_role", "role"),
    }


@needs_helm
def test_a_change_to_the_operators_config_rolls_the_operator() -> None:
    """The operator reads its config file once: the pod's checksum/config annotation hashes
    the rendered file, so a new worker image (image.worker.tag, image.registry) or any other
    value in it replaces the operator pod; values it does not carry leave it alone."""

    def checksum(values: list[str]) -> str:
        for doc in render(values):
            if doc["kind"] == "Deployment" and doc["metadata"]["name"].endswith("-operator"):
                return str(doc["spec"]["template"]["metadata"]["annotations"]["checksum/config"])
        raise AssertionError("no operator Deployment")

    base = checksum([])
    assert checksum(["--set", "image.worker.tag=0.2.0"]) != base
    assert checksum(["--set", "image.registry=registry.example.com"]) != base
    assert checksum(["--set", "metrics.serviceMonitor.labels.release=kps"]) != base
    assert checksum(["--set", "router.replicas=3"]) == base


@needs_helm
def test_worker_pod_settings_and_image_digests_reach_the_operator() -> None:
    """image.*.digest pins an image; operator.worker.pod (pull secrets from the top-level
    imagePullSecrets when it names none) is the operator's workerPod, which its parser reads."""

    def docs(values: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        rendered = render(values)
        cm = next(
            d
            for d in rendered
            if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator")
        )
        dep = next(
            d
            for d in rendered
            if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
        )
        config: dict[str, Any] = yaml.safe_load(cm["data"]["operator.yaml"])
        return config, dep

    config, dep = docs(
        [
            "--set", "imagePullSecrets[0].name=regcred",
            "--set", "image.worker.digest=sha256:" + "a" * 64,
            "--set", "image.control.digest=sha256:" + "b" * 64,
            "--set", "operator.worker.pod.runtimeClassName=nvidia",
            "--set", "operator.worker.pod.envFrom[0].secretRef.name=hub",
        ]
    )  # fmt: skip
    assert config["workerImage"] == "preheat-worker@sha256:" + "a" * 64
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith("b" * 64)
    build, _, _ = parse_config(config)
    assert build.worker_pod.image_pull_secrets == ("regcred",)
    assert build.worker_pod.runtime_class == "nvidia"
    assert build.worker_pod.env_from_secrets == ("hub",)
    own, _ = docs(["--set", "operator.worker.pod.imagePullSecrets[0].name=workers"])
    assert parse_config(own)[0].worker_pod.image_pull_secrets == ("workers",)


@needs_helm
def test_network_policy_value_reaches_the_operator_and_its_rbac() -> None:
    """networkPolicy.enabled: the operator's config asks for a NetworkPolicy per pool that
    admits this release's namespace, and the operator may make them."""
    docs = render(
        ["--set", "networkPolicy.enabled=true", "--set", "networkPolicy.metricsNamespaces={mon}"]
    )
    cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator")
    )
    build, _, _ = parse_config(yaml.safe_load(cm["data"]["operator.yaml"]))
    assert build.network_policy.enabled
    assert build.network_policy.control_plane_namespace == "preheat"
    assert build.network_policy.metrics_namespaces == ("mon",)
    operator = _rules(docs, "pre-preheat-operator")
    assert _allowed(operator, "networking.k8s.io", "networkpolicies") == {"get", "create", "patch"}
    off = next(
        d
        for d in render([])
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator")
    )
    assert not parse_config(yaml.safe_load(off["data"]["operator.yaml"]))[0].network_policy.enabled


@needs_helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "operator.replicas=3"], "at '/operator/replicas': maximum: got 3, want 1"),
        (["--set", "operator.replica=1"], "additional properties 'replica' not allowed"),
        (["--set", "image.worker.digest=latest"], "at '/image/worker/digest'"),
        (["--set", "operator.logFormat=yaml"], "at '/operator/logFormat'"),
        (["--set", "operator.watchNamespaces={Serving}"], "at '/operator/watchNamespaces/0'"),
        (["--set", "router.service.httpPort=0"], "at '/router/service/httpPort'"),
        (["--set", "operator.workerServiceMonitor=sometimes"], "workerServiceMonitor"),
    ],
)
def test_values_schema_refuses_bad_values_with_the_path(values: list[str], message: str) -> None:
    """values.schema.json: two operators (the chart runs kopf --standalone: no peering)
    doubled every pod patch and Event; a typo in a key linted clean."""
    assert HELM is not None
    done = subprocess.run(
        [HELM, "template", "pre", str(CHART), *values],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, f"accepted: {values}"
    assert message in done.stderr, done.stderr


@needs_helm
def test_routers_have_a_disruption_budget_and_spread_over_nodes_and_zones() -> None:
    """Two or more routers: a node drain takes one at a time (PDB maxUnavailable 1 over the
    router Deployment's own selector); one router: no PDB, which would block every drain."""

    def objects(values: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        docs = render(values)
        pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
        router = next(
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-router")
        )
        return pdbs, router

    (pdb,), router = objects([])
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == router["spec"]["selector"]
    spread = router["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {s["topologyKey"] for s in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    for s in spread:  # soft: a single node, or nodes without zone labels, run them all
        assert s["whenUnsatisfiable"] == "ScheduleAnyway"
        assert s["labelSelector"] == router["spec"]["selector"]
    assert objects(["--set", "router.replicas=1"])[0] == []
