"""Helpers for the operator tests: the committed CRD, API-server-like defaulting, CEL rules."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "preheat.dev_inferencepools.yaml"
CHART_CRD_PATH = ROOT / "charts" / "preheat" / "crds" / "preheat.dev_inferencepools.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("pool-*.yaml"))


def load_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    return crd


def root_schema() -> dict[str, Any]:
    schema: dict[str, Any] = load_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def load_example(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def minimal_pool(**spec: Any) -> dict[str, Any]:
    """A valid pool object whose spec is the minimal one updated with ``spec``."""
    base: dict[str, Any] = {"model": {"name": "m"}, "replicas": {"min": 1, "max": 2}}
    base.update(spec)
    return {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": base,
    }


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """What the API server does with ``default``: fill absent properties, recursively."""
    obj = copy.deepcopy(obj)
    if schema.get("type") == "object" and isinstance(obj, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                obj[name] = apply_defaults(sub, obj[name])
    elif schema.get("type") == "array" and isinstance(obj, list) and "items" in schema:
        obj = [apply_defaults(schema["items"], x) for x in obj]
    return obj


def rule_sites(
    schema: dict[str, Any], obj: Any, path: str = ""
) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Every (path, rule, value) where a CEL rule of ``schema`` applies within ``obj``."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, rule, obj
    if isinstance(obj, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in obj:
                yield from rule_sites(sub, obj[name], f"{path}.{name}" if path else name)
    elif isinstance(obj, list) and "items" in schema:
        for i, x in enumerate(obj):
            yield from rule_sites(schema["items"], x, f"{path}[{i}]")


@functools.cache
def _cel_program(expr: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expr))


def cel_failures(schema: dict[str, Any], obj: Any) -> list[tuple[str, str]]:
    """(path, message) for every CEL rule that ``obj`` (already defaulted) breaks."""
    import celpy

    failures = []
    for path, rule, value in rule_sites(schema, obj):
        activation = {"self": celpy.json_to_cel(value)}
        if not _cel_program(rule["rule"]).evaluate(activation):
            expr = rule.get("messageExpression")
            message = str(_cel_program(expr).evaluate(activation)) if expr else rule["message"]
            failures.append((path, message))
    return failures
