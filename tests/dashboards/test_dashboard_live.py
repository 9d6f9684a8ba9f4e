"""The shipped dashboard's queries and the SLO rules, run on a real Prometheus (Debian's
package) scraping `preheat up` (sim workers and the router; ``--prometheus`` makes it write
the file_sd targets) under a little traffic: every
query returns data, and every recording rule records some. With tracing on, the router's TTFT
buckets carry exemplars (Prometheus's exemplar storage) that name traces the OTLP receiver got.

The replicas panel reads ``preheat_pool_*``, which `preheat up` serves on its control
``/metrics`` as the operator does (``preheat.process.poolmetrics``): every panel has data.
Without the prometheus or helm binary the test skips, unless ``CI=true``: then it fails.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from otlpkit import Receiver, by_name, otel_env, serve_receiver
from promkit import file_sd_prometheus
from promqlkit import dashboard_queries, load_dashboard, rule_groups, substitute
from test_dashboard_names import rendered_rules
from upkit import up_state, wait_for

POOL_NAME = "dash"
TTFT_1MS = ("--set-string", "metrics.prometheusRule.slo.ttftSeconds=0.001")
POOL = f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {POOL_NAME}}}
spec:
  model: {{name: sim-8b}}
  engine:
    kind: sim
    args: {{timeScale: 10, loadTime: 300ms, warmupTime: 200ms}}
  replicas: {{min: 1, max: 1, warmStandby: 0}}
"""


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Prometheus scraping ``RUN/prometheus-targets.json`` every second and evaluating the
    chart's SLO rules every second: (url, RUN). The TTFT objective is 1 ms (a bucket
    boundary no request meets), so that the TTFT alerts must go off and the others not."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups(rendered_rules(*TTFT_1MS))}))
    run = tmp_path / "run"
    run.mkdir()
    flags = ["--enable-feature=exemplar-storage"]
    with file_sd_prometheus(tmp_path, run, rule_files=[rules], flags=flags) as url:
        yield url, run


def _load(target: str, tmp: Path, requests: int, rate: float) -> None:
    trace = tmp / "trace.jsonl"
    lines = [
        json.dumps({"timestamp_ms": int(i * 1000 / rate), "input_tokens": 512, "output_tokens": 8})
        for i in range(requests)
    ]
    trace.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "load", "--target", target, "--trace", str(trace),
         "--no-progress", "--out", str(tmp / "load")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    yield from serve_receiver()


def _exemplar_traces(url: str, metric: str) -> set[str]:
    """Trace ids of the exemplars Prometheus stored for ``metric`` (any time)."""
    q = urllib.parse.urlencode({"query": metric, "start": "0", "end": "4102444800"})
    with urllib.request.urlopen(f"{url}/api/v1/query_exemplars?{q}", timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return {e["labels"]["trace_id"] for series in body["data"] for e in series["exemplars"]}


def test_every_panel_and_rule_has_data_on_a_live_pool(
    prometheus: tuple[str, Path], receiver: tuple[str, Receiver]
) -> None:
    """With tracing on (every request sampled): the router's TTFT buckets in Prometheus
    carry exemplars whose trace ids are the traces the collector received."""
    url, run = prometheus
    otlp, rx = receiver
    pool = run.parent / "pool.yaml"
    pool.write_text(POOL)
    log = run / "up.log"
    env = otel_env(otlp, sampler="always_on")
    up = subprocess.Popen(
        [sys.executable, "-m", "preheat.cli", "up", "-f", str(pool), "--out", str(run),
         "--no-ui", "--interval-s", "1", "--prometheus", url, "--tracing"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        wait_for(
            lambda: (up_state(run).get("counts") or {}).get("active") == 1, 60, "a worker", log
        )
        wait_for(
            lambda: len(_query(url, f'up{{pool="{POOL_NAME}"}} == 1')) >= 2,
            60,
            "Prometheus to scrape the worker and the router",
            log,
        )
        _load(str(up_state(run)["router"]["grpc"]), run.parent, requests=24, rate=4.0)
        # two scrapes after the last request, so that every rate has its increase
        wait_for(
            lambda: bool(_query(url, "sum(increase(preheat_router_arrivals_total[1m])) >= 24")),
            30,
            "the router's arrivals in Prometheus",
            log,
        )
        time.sleep(2.5)  # two more 1 s scrapes and rule evaluations

        # every panel, the replicas one included (preheat up serves preheat_pool_* as the
        # operator does, on its control /metrics in the targets file)
        empty: list[str] = []
        for where, expr in dashboard_queries(load_dashboard()):
            promql = substitute(expr, {"pool": POOL_NAME}, "30s")
            if not _query(url, promql):
                empty.append(f"{where}: {promql}")
        assert empty == [], "\n".join(empty)

        groups = rule_groups(rendered_rules(*TTFT_1MS))
        for rule in (r for g in groups for r in g["rules"] if "record" in r):
            series = _query(url, f'{rule["record"]}{{pool="{POOL_NAME}"}}')
            assert series, f"recording rule {rule['record']} recorded nothing"
            # every request was slower than 1 ms; none was refused
            want = 1.0 if "ttft_slow" in rule["record"] else 0.0
            assert float(series[0]["value"][1]) == want, (rule["record"], series)
        alerts = {
            a["metric"]["alertname"]: a["metric"]["alertstate"]
            for a in _query(url, f'ALERTS{{pool="{POOL_NAME}"}}')
        }
        # "for" holds them pending (2 and 15 minutes) rather than firing
        assert alerts == {
            "PreheatTTFTBudgetBurnFast": "pending",
            "PreheatTTFTBudgetBurnSlow": "pending",
        }
        # a p99 bucket links to a trace: the exemplars are traces the collector has
        bucket = f'preheat_router_ttft_seconds_bucket{{pool="{POOL_NAME}"}}'
        exemplars = _exemplar_traces(url, bucket)
        assert exemplars

        def router_traces() -> set[str]:
            return {sp.trace_id for sp in by_name(rx.spans(), "router.request")}

        wait_for(lambda: exemplars <= router_traces(), 20, "the exemplars' traces", log)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=40)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
    assert up.returncode == 0, log.read_text()[-3000:]
