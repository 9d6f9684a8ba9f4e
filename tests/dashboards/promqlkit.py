"""What the shipped dashboard and rules query, checked against what the code exports.

The exported series come from the code's own metric classes (router, worker, sim engine with
vLLM's names, operator, autoscaler): each is instantiated in a fresh registry, every labelled
family gets one child, and the exposition text is read back: so the names carry exactly the
suffixes Prometheus sees (``_total``, ``_bucket`` with ``le``, ``_count``, ``_sum``) and a
metric or label renamed in the code breaks the check here, not on a dashboard in production.

Scraping adds target labels: ``job`` and ``instance`` everywhere; the Prometheus Operator's
ServiceMonitors add ``namespace``, ``service``, ``pod``, ``container`` and ``endpoint``, and
the operator's worker ServiceMonitor adds :data:`preheat.core.manifests.SERIES_LABELS`
(``pool``, ``role``). A scraped label that collides with a target label is renamed
``exported_<label>`` (``honor_labels: false``, the default), as Prometheus does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser as pq
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from preheat.core.manifests import SERIES_LABELS
from preheat.core.routing.types import StepClock
from preheat.engine.simmetrics import VllmMetrics
from preheat.operator.metrics import AutoscalerMetrics, Metrics
from preheat.router.frontend.metrics import RouterMetrics, StepClockCollector, TtftMissCollector
from preheat.worker.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "preheat"
DASHBOARD = CHART / "files" / "dashboard.json"

PROMETHEUS_TARGET_LABELS = frozenset({"job", "instance"})
SERVICE_MONITOR_TARGET_LABELS = frozenset({"namespace", "service", "pod", "container", "endpoint"})
WORKER_TARGET_LABELS = frozenset(target for _, _, target in SERIES_LABELS)

# Grafana's built-in interval variables, given a value so that the expression parses.
GRAFANA_INTERVALS = ("$__rate_interval", "$__interval", "$__range")


@dataclass(frozen=True)
class Series:
    """One exported sample name: its labels as stored in Prometheus, where it comes from, and
    the values its ``le`` label takes (histogram buckets)."""

    name: str
    labels: frozenset[str]
    source: str
    le: frozenset[str] = frozenset()


def _fill(registry: CollectorRegistry) -> None:
    """One child per labelled family, so that every family shows in the exposition."""
    for collector in list(registry._collector_to_names):
        labelled = isinstance(collector, MetricWrapperBase) and collector._labelnames
        if labelled and not collector._metrics:
            collector.labels(*["x"] * len(collector._labelnames))


def _registries() -> Iterator[tuple[str, CollectorRegistry]]:
    router = RouterMetrics()
    router.bind_pool("p", "m")
    # the step clocks' gauges (registered by the router's PoolSet): one endpoint's clock
    clock = {"x": StepClock(0.0, 8.0, 1.0, 1.0)}
    router.registry.register(StepClockCollector(lambda: [("p", "m", clock)]))
    # the TTFT misses' gauge (registered by the PoolSet too): one endpoint's miss
    router.registry.register(TtftMissCollector(lambda: [("p", "m", {"x": 120.0})]))
    yield "router", router.registry
    worker = WorkerMetrics()
    VllmMetrics(worker.registry, "m", 4096)  # the engine's metrics, on the worker's /metrics
    yield "worker", worker.registry
    operator = Metrics()
    AutoscalerMetrics(operator.registry)
    yield "operator", operator.registry


def _target_labels(source: str) -> frozenset[str]:
    extra = WORKER_TARGET_LABELS if source == "worker" else frozenset()
    return PROMETHEUS_TARGET_LABELS | SERVICE_MONITOR_TARGET_LABELS | extra


def exported() -> dict[str, Series]:
    """Every sample name the code exports, with its labels as stored after a scrape."""
    out: dict[str, Series] = {}
    for source, registry in _registries():
        _fill(registry)
        text = generate_latest(registry).decode()
        targets = _target_labels(source)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                own = {f"exported_{k}" if k in targets else k for k in sample.labels}
                le = {sample.labels["le"]} if "le" in sample.labels else set()
                old = out.get(sample.name)
                if old is not None:
                    le |= old.le
                out[sample.name] = Series(
                    sample.name, frozenset(own) | targets, source, frozenset(le)
                )
    return out


def grafana_to_promql(expr: str) -> str:
    for var in GRAFANA_INTERVALS:
        expr = expr.replace(var, "5m")
    return expr


@dataclass
class Check:
    """Walks expressions, resolving names against ``known``; collects every problem."""

    known: dict[str, Series]
    problems: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)

    def labels_of(self, node: Any, where: str) -> frozenset[str] | None:
        """Labels the result of ``node`` carries (None: a scalar or a string)."""
        if isinstance(node, pq.VectorSelector):
            return self._selector(node, where)
        if isinstance(node, pq.MatrixSelector):
            return self._selector(node.vector_selector, where)
        if isinstance(node, pq.ParenExpr | pq.UnaryExpr | pq.SubqueryExpr):
            return self.labels_of(node.expr, where)
        if isinstance(node, pq.NumberLiteral | pq.StringLiteral):
            return None
        if isinstance(node, pq.AggregateExpr):
            return self._aggregate(node, where)
        if isinstance(node, pq.Call):
            return self._call(node, where)
        if isinstance(node, pq.BinaryExpr):
            return self._binary(node, where)
        self.problems.append(f"{where}: cannot check a {type(node).__name__}")
        return None

    def _selector(self, vs: pq.VectorSelector, where: str) -> frozenset[str]:
        name = vs.name or ""
        series = self.known.get(name)
        if series is None:
            self.problems.append(f"{where}: metric {name!r} is not exported by the code")
            return frozenset()
        self.used.add(name)
        for m in vs.matchers.matchers:
            if m.name == "__name__":
                continue
            if m.name not in series.labels:
                self.problems.append(
                    f"{where}: {name} has no label {m.name!r} (it has {sorted(series.labels)})"
                )
            elif m.name == "le" and m.value not in series.le:
                self.problems.append(
                    f"{where}: {name} has no bucket le={m.value!r} (it has {sorted(series.le)})"
                )
        return series.labels

    def _need(self, labels: list[str], have: frozenset[str] | None, what: str, where: str) -> None:
        for label in labels:
            if have is not None and label not in have:
                self.problems.append(f"{where}: {what} {label!r}, which its input does not carry")

    def _aggregate(self, node: pq.AggregateExpr, where: str) -> frozenset[str] | None:
        inner = self.labels_of(node.expr, where)
        if node.param is not None:
            self.labels_of(node.param, where)
        mod = node.modifier
        if mod is None:
            return frozenset()
        self._need(list(mod.labels), inner, "groups by", where)
        if mod.type == pq.AggModifierType.By:
            return frozenset(mod.labels)
        return (inner or frozenset()) - set(mod.labels)

    def _call(self, node: pq.Call, where: str) -> frozenset[str] | None:
        results = [self.labels_of(arg, where) for arg in node.args]
        vectors = [r for r in results if r is not None]
        labels = vectors[0] if vectors else None
        fn = node.func.name
        if fn == "histogram_quantile" and labels is not None:
            self._need(["le"], labels, "histogram_quantile needs", where)
            return labels - {"le"}
        if fn in ("absent", "absent_over_time", "vector", "time", "scalar"):
            return frozenset() if fn != "scalar" else None
        if fn == "label_replace" and labels is not None:
            dst = node.args[1]
            if isinstance(dst, pq.StringLiteral):
                return labels | {dst.val}
        return labels

    def _binary(self, node: pq.BinaryExpr, where: str) -> frozenset[str] | None:
        lhs = self.labels_of(node.lhs, where)
        rhs = self.labels_of(node.rhs, where)
        if lhs is None or rhs is None:
            return lhs if rhs is None else rhs
        mod = node.modifier
        if mod is not None and mod.matching is not None:
            if mod.matching.type == pq.LabelModifierType.Include:  # on (...)
                self._need(list(mod.matching.labels), lhs, "matches on", where)
                self._need(list(mod.matching.labels), rhs, "matches on", where)
            if mod.group_labels:
                self._need(list(mod.group_labels), rhs, "group_left/right takes", where)
                return lhs | set(mod.group_labels)
        return lhs

    def expression(self, expr: str, where: str) -> None:
        try:
            node = pq.parse(grafana_to_promql(expr))
        except (ValueError, RuntimeError) as e:
            self.problems.append(f"{where}: does not parse: {e}")
            return
        self.labels_of(node, where)


_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<metric>.+),\s*)?(?P<label>[a-zA-Z_]\w*)\)$")


def dashboard_queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target (rows' nested panels too)."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            if "expr" in t:
                yield f"panel {p.get('title')!r} ({t.get('refId', '?')})", t["expr"]


def check_dashboard(dashboard: Mapping[str, Any], known: dict[str, Series]) -> Check:
    check = Check(dict(known))
    for where, expr in dashboard_queries(dashboard):
        check.expression(expr, where)
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]
        query = query.get("query", "") if isinstance(query, dict) else query
        where = f"variable ${var['name']}"
        m = _LABEL_VALUES.match(query.strip())
        if m is None:
            check.expression(query, where)
            continue
        metric = m.group("metric")
        if metric is None:
            check.problems.append(f"{where}: label_values without a metric matches any series")
            continue
        node = pq.parse(metric)
        labels = check.labels_of(node, where)
        check._need([m.group("label")], labels, "lists values of", where)
    return check


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def rule_groups(rendered: str) -> list[dict[str, Any]]:
    """The ``spec.groups`` of the PrometheusRule in ``rendered`` (helm template output)."""
    for doc in yaml.safe_load_all(rendered):
        if doc and doc.get("kind") == "PrometheusRule":
            groups: list[dict[str, Any]] = doc["spec"]["groups"]
            return groups
    raise AssertionError("no PrometheusRule in the rendered chart")


def check_rules(groups: list[dict[str, Any]], known: dict[str, Series]) -> Check:
    """Recording rules add their series (labels: what their expression yields) in order."""
    check = Check(dict(known))
    for group in groups:
        for rule in group["rules"]:
            name = rule.get("record") or rule.get("alert")
            where = f"rule {name}"
            try:
                node = pq.parse(rule["expr"])
            except (ValueError, RuntimeError) as e:
                check.problems.append(f"{where}: does not parse: {e}")
                continue
            labels = check.labels_of(node, where)
            if "record" in rule:
                check.known[rule["record"]] = Series(rule["record"], labels or frozenset(), "rule")
    return check


def substitute(expr: str, values: Mapping[str, str], interval: str) -> str:
    """A dashboard expression with its variables filled in, ready to run."""
    for var in GRAFANA_INTERVALS:
        expr = expr.replace(var, interval)
    for name, value in values.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return expr
