"""The chart's ``tracing`` values: the router, the operator and, through the operator's config,
every pool's worker pods get PREHEAT_TRACING=true (their --tracing) and the OTEL_* variables;
off by default."""

from __future__ import annotations

import argparse
from typing import Any

import yaml
from test_chart_helm import needs_helm, render

from preheat.api.pool import to_config
from preheat.core.manifests import Owner, build_deployment
from preheat.operator.options import parse_config
from preheat.process.tracing import add_tracing_flag, tracing_from_env

ON = [
    "--set", "tracing.enabled=true",
    "--set", "tracing.endpoint=http://otel-collector.observability:4317",
    "--set-string", "tracing.samplerArg=0.05",
]  # fmt: skip
WANT = {
    "PREHEAT_TRACING": "true",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317",
    "OTEL_EXPORTER_OTLP_INSECURE": "true",
    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
    "OTEL_TRACES_SAMPLER_ARG": "0.05",
}


def _env(docs: list[dict[str, Any]], component: str) -> dict[str, str]:
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"].endswith(f"-{component}"):
            container = doc["spec"]["template"]["spec"]["containers"][0]
            return {e["name"]: e.get("value", "") for e in container.get("env", [])}
    raise AssertionError(f"no {component} Deployment")


def _operator_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-operator"):
            loaded: dict[str, Any] = yaml.safe_load(doc["data"]["operator.yaml"])
            return loaded
    raise AssertionError("no operator ConfigMap")


@needs_helm
def test_tracing_values_reach_router_operator_and_worker_pods() -> None:
    on, off = render(ON), render([])
    for component in ("router", "operator"):
        env = _env(on, component)
        assert {k: env[k] for k in WANT} == WANT
        assert not {k for k in _env(off, component) if k.startswith(("OTEL_", "PREHEAT_TRAC"))}
    build, _, _ = parse_config(_operator_config(on))
    pool = to_config({"model": {"name": "m"}, "replicas": {"max": 1}}, name="p", namespace="ns")
    worker = build_deployment(pool, Owner("p", "u"), build)["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value", "") for e in worker["containers"][0]["env"]}
    assert {k: env[k] for k in WANT} == WANT
    assert _operator_config(off)["workerPod"]["env"] == []


def test_preheat_tracing_in_the_environment_turns_the_flag_on() -> None:
    assert tracing_from_env({"PREHEAT_TRACING": "true"})
    assert tracing_from_env({"PREHEAT_TRACING": "1"})
    assert not tracing_from_env({"PREHEAT_TRACING": "false"})
    assert not tracing_from_env({})
    parser = argparse.ArgumentParser()
    add_tracing_flag(parser)
    assert parser.parse_args(["--tracing"]).tracing
