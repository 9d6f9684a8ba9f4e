"""The committed CRD: generated from the models, and what the API server would accept.

jsonschema (Draft 4 semantics, as OpenAPI v3.0's boolean exclusiveMinimum needs) checks
types, enums, bounds and patterns; cel-python evaluates the x-kubernetes-validations rules
on the object after API-server-like defaulting; their messages must equal the ones
preheat.api.pool.validate_spec gives for the same spec.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from poolkit import (
    CHART_CRD_PATH,
    CRD_PATH,
    EXAMPLES,
    ROOT,
    apply_defaults,
    cel_failures,
    load_crd,
    load_example,
    minimal_pool,
    root_schema,
)

from preheat.api.pool import validate_spec

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")


def _gen_crd() -> Any:
    spec = importlib.util.spec_from_file_location("gen_crd", ROOT / "scripts" / "gen_crd.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Paths (dotted) of every schema violation in ``obj``."""
    validator = jsonschema.Draft4Validator(root_schema())
    return sorted(
        ".".join(str(p) for p in e.absolute_path) or "<root>" for e in validator.iter_errors(obj)
    )


def test_committed_crd_matches_the_models() -> None:
    text = _gen_crd().render()
    assert CRD_PATH.read_text() == text, "crds/ is stale: run python scripts/gen_crd.py"
    assert CHART_CRD_PATH.read_text() == text, "the chart's CRD differs from crds/"


def test_crd_has_subresources_short_name_and_columns() -> None:
    crd = load_crd()
    assert crd["metadata"]["name"] == "inferencepools.preheat.dev"
    assert crd["spec"]["names"]["shortNames"] == ["ipool"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["storage"] is True
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas.desired",
        "statusReplicasPath": ".status.replicas.active",
        "labelSelectorPath": ".status.selector",
    }
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert {"Model", "Active", "Standby", "Ready", "Age"} <= set(columns)
    assert columns["Age"]["type"] == "date"


def test_schema_is_structural() -> None:
    """Every node has a type, and nothing a structural schema forbids appears."""

    def walk(node: dict[str, Any], path: str) -> None:
        # a node that keeps any value (vLLM's dict-or-string engine args) may omit its type
        untyped_ok = node.get("x-kubernetes-preserve-unknown-fields") is True
        assert "type" in node or untyped_ok, f"{path} has no type"
        for bad in ("$ref", "anyOf", "oneOf", "allOf", "additionalProperties", "title"):
            assert bad not in node, f"{path} has {bad}"
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(root_schema(), "")


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    """``kubectl explain inferencepool.spec...`` prints a field's description: every property
    of the schema, spec and status, nested ones included, has one."""
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for name, sub in node.get("properties", {}).items():
            if not sub.get("description"):
                missing.append(f"{path}.{name}")
            walk(sub, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(root_schema(), "")
    assert not missing, f"{len(missing)} fields without a description: {missing}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_schema_and_rules(path: Any) -> None:
    doc = load_example(path)
    assert schema_errors(doc) == []
    pytest.importorskip("celpy", reason="cel-python is not installed")
    assert cel_failures(root_schema(), apply_defaults(root_schema(), doc)) == []


def test_defaults_match_the_models() -> None:
    """Defaulting by the API server gives the spec that pydantic's defaults give."""
    from preheat.api.pool import InferencePoolSpec

    doc = apply_defaults(root_schema(), minimal_pool())
    ours = InferencePoolSpec.model_validate(minimal_pool()["spec"])
    theirs = InferencePoolSpec.model_validate(doc["spec"])
    assert theirs == ours
    assert doc["spec"]["autoscaling"]["scaleDown"] == {
        "stabilization": "300s",
        "cooldown": "120s",
        "maxStep": 1,
    }


SCHEMA_BAD: list[tuple[str, dict[str, Any], str]] = [
    ("negative min", {"replicas": {"min": -1, "max": 2}}, "spec.replicas.min"),
    ("max missing", {"replicas": {"min": 1}}, "spec.replicas"),
    ("model missing name", {"model": {}}, "spec.model"),
    ("unknown engine", {"engine": {"kind": "tgi"}}, "spec.engine.kind"),
    ("bad duration", {"autoscaling": {"window": "1 minute"}}, "spec.autoscaling.window"),
    ("bad source", {"model": {"name": "m", "source": "s3://b/m"}}, "spec.model.source"),
    ("tolerance 1", {"autoscaling": {"tolerance": 1}}, "spec.autoscaling.tolerance"),
    ("too many gpus", {"resources": {"gpus": 17}}, "spec.resources.gpus"),
    (
        "zones too many",
        {"topology": {"zones": [f"z{i}" for i in range(17)]}},
        "spec.topology.zones",
    ),
    ("spread unknown", {"topology": {"spread": "even"}}, "spec.topology.spread"),
    (
        "ratio 0",
        {"autoscaling": {"objectives": [{"signal": "kvCacheUsage", "targetRatio": 0}]}},
        "spec.autoscaling.objectives.0.targetRatio",
    ),
    ("min as string", {"replicas": {"min": "1", "max": 2}}, "spec.replicas.min"),
    (
        "panic threshold 1",
        {"autoscaling": {"panic": {"threshold": 1}}},
        "spec.autoscaling.panic.threshold",
    ),
]


@pytest.mark.parametrize(
    ("patch", "where"), [b[1:] for b in SCHEMA_BAD], ids=[b[0] for b in SCHEMA_BAD]
)
def test_schema_rejects_bad_pools_at_the_path(patch: dict[str, Any], where: str) -> None:
    doc = minimal_pool(**patch)
    assert where in schema_errors(doc)
    _, problems = validate_spec(doc["spec"])
    assert problems, "the models must refuse what the schema refuses"


CEL_BAD: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "min>max",
        {"replicas": {"min": 5, "max": 3}},
        "spec.replicas",
        "replicas.min (5) must be <= replicas.max (3)",
    ),
    (
        "ttft without target",
        {"autoscaling": {"objectives": [{"signal": "ttft", "percentile": 95}]}},
        "spec.autoscaling.objectives[0]",
        "objective ttft: a latency signal needs percentile and targetMs "
        "(and no perReplica or targetRatio)",
    ),
    (
        "queueDepth with percentile",
        {
            "autoscaling": {
                "objectives": [{"signal": "queueDepth", "perReplica": 2, "percentile": 95}]
            }
        },
        "spec.autoscaling.objectives[0]",
        "objective queueDepth: a per-replica signal needs perReplica "
        "(and no percentile, targetMs or targetRatio)",
    ),
    (
        "concurrency without perReplica",
        {"autoscaling": {"objectives": [{"signal": "concurrency", "targetRatio": 0.5}]}},
        "spec.autoscaling.objectives[0]",
        "objective concurrency: a per-replica signal needs perReplica "
        "(and no percentile, targetMs or targetRatio)",
    ),
    (
        "kv with targetMs",
        {"autoscaling": {"objectives": [{"signal": "kvCacheUsage", "targetMs": 5}]}},
        "spec.autoscaling.objectives[0]",
        "objective kvCacheUsage: kvCacheUsage needs targetRatio "
        "(and no percentile, targetMs or perReplica)",
    ),
    (
        "sim args on vllm",
        {"engine": {"args": {"seed": 1}}},
        "spec.engine",
        "engine.args numGpuBlocks, timeScale, loadTime, warmupTime, seed, modelSize "
        "apply to engine kind sim only",
    ),
    (
        "vllm args on sim",
        {"engine": {"kind": "sim", "args": {"enforceEager": True}}},
        "spec.engine",
        "engine.args gpuMemoryUtilization, dtype, enforceEager, tensorParallelSize "
        "apply to engine kind vllm only",
    ),
    (
        "gpuType without gpus",
        {"resources": {"gpus": 0, "gpuType": "nvidia-l4"}},
        "spec.resources",
        "resources.gpuType (nvidia-l4) needs resources.gpus >= 1",
    ),
    (
        "a variable the operator sets",
        {"pod": {"env": [{"name": "PREHEAT_CONTROL_TOKEN", "value": "x"}]}},
        "spec.pod.env[0]",
        "pod.env: PREHEAT_CONTROL_TOKEN is set by the operator; choose another name",
    ),
    (
        "a variable with both value and valueFrom",
        {
            "pod": {
                "env": [
                    {
                        "name": "HF_TOKEN",
                        "value": "x",
                        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
                    }
                ]
            }
        },
        "spec.pod.env[0]",
        "pod.env HF_TOKEN: set exactly one of value and valueFrom",
    ),
    (
        "a forecast season under a minute",
        {"autoscaling": {"predictive": {"period": "30s"}}},
        "spec.autoscaling.predictive",
        "autoscaling.predictive.period (30s) must be at least 1m",
    ),
    (
        "tp > gpus",
        {"engine": {"args": {"tensorParallelSize": 8}}, "resources": {"gpus": 4}},
        "spec",
        "engine.args.tensorParallelSize (8) must be <= resources.gpus (4)",
    ),
]


@pytest.mark.parametrize(
    ("patch", "where", "message"), [b[1:] for b in CEL_BAD], ids=[b[0] for b in CEL_BAD]
)
def test_cel_rules_refuse_with_the_validators_message(
    patch: dict[str, Any], where: str, message: str
) -> None:
    pytest.importorskip("celpy", reason="cel-python is not installed")
    doc = minimal_pool(**patch)
    assert schema_errors(doc) == [], "these pass the schema: only a rule catches them"
    assert cel_failures(root_schema(), apply_defaults(root_schema(), doc)) == [(where, message)]
    _, problems = validate_spec(doc["spec"])
    assert any(p.endswith(message) for p in problems), problems
