"""The shipped Grafana dashboard and SLO rules name only metrics and labels the code exports
(promqlkit derives them from the metric classes), and the rules pass ``promtool check rules``.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import yaml
from promkit import tool
from promqlkit import (
    CHART,
    check_dashboard,
    check_rules,
    exported,
    load_dashboard,
    rule_groups,
)

ROOT = Path(__file__).resolve().parents[2]


def rendered_rules(*values: str) -> str:
    """The chart rendered with the PrometheusRule on (and ``values``: more helm flags)."""
    helm = tool("helm", os.environ.get("PREHEAT_HELM"), str(ROOT / ".cache" / "tools" / "helm"))
    done = subprocess.run(
        [helm, "template", "pre", str(CHART), "--set", "metrics.prometheusRule.enabled=true",
         *values],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def test_the_exported_names_come_from_the_code() -> None:
    known = exported()
    # histograms show their buckets with le, counters their _total: as Prometheus stores them
    assert "le" in known["preheat_router_ttft_seconds_bucket"].labels
    assert "0.4" in known["preheat_router_ttft_seconds_bucket"].le
    assert {"pool", "model_name", "reason"} <= known["preheat_router_ttft_seconds_count"].labels
    assert "preheat_router_arrivals_total" in known
    assert "preheat_router_arrivals" not in known
    # the engine's series carry the worker ServiceMonitor's pool and role
    assert {"pool", "role", "model_name"} <= known["vllm:num_requests_waiting"].labels
    assert "pool" in known["preheat_worker_ttft_seconds_bucket"].labels
    # the operator's own namespace label collides with the target's: exported_namespace
    assert "exported_namespace" in known["preheat_pool_replicas"].labels


def test_every_dashboard_query_names_exported_metrics_and_labels() -> None:
    check = check_dashboard(load_dashboard(), exported())
    assert check.problems == []
    assert len(check.used) >= 8


def test_the_check_catches_a_wrong_metric_label_and_bucket() -> None:
    """The checker is not vacuous: each kind of mistake in a panel is reported."""
    dash = load_dashboard()
    target = dash["panels"][0]["targets"][0]
    for wrong, needle in (
        ("preheat_router_ttft_bucket", "not exported"),  # the _seconds suffix missing
        ('preheat_router_ttft_seconds_bucket{tenant="a"}', "no label 'tenant'"),
        ('preheat_router_ttft_seconds_bucket{le="0.33"}', "no bucket"),
        ("sum by (le, zone) (preheat_router_ttft_seconds_bucket)", "groups by 'zone'"),
        ("vllm:num_requests_waiting_total", "not exported"),
        ("sum(rate(preheat_router_ttft_seconds_bucket[$__rate_interval]", "does not parse"),
    ):
        bad = copy.deepcopy(dash)
        bad["panels"][0]["targets"] = [{**target, "expr": wrong}]
        problems = check_dashboard(bad, exported()).problems
        assert any(needle in p for p in problems), (wrong, problems)
    bad = copy.deepcopy(dash)
    bad["templating"]["list"][1]["query"] = "label_values(preheat_router_ttft_seconds_bucket, zone)"
    assert check_dashboard(bad, exported()).problems


def test_the_slo_rules_name_exported_metrics_and_pass_promtool(tmp_path: Path) -> None:
    groups = rule_groups(rendered_rules())
    check = check_rules(groups, exported())
    assert check.problems == []
    alerts = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert sorted(alerts) == sorted(
        f"Preheat{sli}BudgetBurn{speed}"
        for sli in ("TTFT", "Availability")
        for speed in ("Fast", "Slow")
    )
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    promtool = tool("promtool")
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 12 rules found" in done.stdout + done.stderr


def test_a_ttft_threshold_off_the_buckets_is_caught() -> None:
    rendered = rendered_rules("--set-string", "metrics.prometheusRule.slo.ttftSeconds=0.35")
    problems = check_rules(rule_groups(rendered), exported()).problems
    assert any("no bucket le='0.35'" in p for p in problems), problems
