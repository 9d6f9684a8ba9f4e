"""The chart's NOTES.txt (what `helm install` prints) tells a user how to send a first
request, and what it says matches what the chart renders: the router Service it
port-forwards, its HTTP port, the model of the example pool it applies; with API keys on,
the requests carry one."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from poolkit import ROOT
from test_chart_helm import CHART, helm, needs_helm, render


def _notes(extra: list[str]) -> str:
    out = helm("install", "pre", str(CHART), "--namespace", "preheat", "--dry-run=client", *extra)
    assert "NOTES:" in out, out[-2000:]
    return out.split("NOTES:", 1)[1]


def _service(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == name]
    return svc


@needs_helm
@pytest.mark.parametrize("port", ["8080", "9000"])
def test_notes_send_a_first_request_through_the_rendered_router_service(port: str) -> None:
    values = ["--set", f"router.service.httpPort={port}"]
    notes = _notes(values)
    forward = re.search(r"kubectl -n (\S+) port-forward svc/(\S+) 8080:(\d+)", notes)
    assert forward is not None, notes
    namespace, service, remote = forward.groups()
    svc = _service(render(values), service)
    assert namespace == svc["metadata"]["namespace"] == "preheat"
    http = [p for p in svc["spec"]["ports"] if p["name"] == "http"]
    assert [p["port"] for p in http] == [int(remote)]
    assert "localhost:8080/v1/models" in notes
    assert "localhost:8080/v1/chat/completions" in notes
    (body,) = re.findall(r"-d '(\{.*\})'", notes)
    example = yaml.safe_load((ROOT / "examples" / "pool-minimal.yaml").read_text())
    assert yaml.safe_load(body)["model"] == example["spec"]["model"]["name"]
    assert "examples/pool-minimal.yaml" in notes
    assert "Authorization" not in notes


@needs_helm
def test_notes_pass_an_api_key_when_the_router_wants_one() -> None:
    notes = _notes(["--set", "router.auth.apiKeys.secretName=keys"])
    curls = [line for line in notes.splitlines() if line.strip().startswith("curl ")]
    assert len(curls) == 2
    assert all('-H "Authorization: Bearer $KEY"' in c for c in curls), curls
    assert "Secret keys" in notes


@needs_helm
def test_notes_without_a_router_send_no_request() -> None:
    notes = _notes(["--set", "router.enabled=false"])
    assert "port-forward" not in notes
    assert "curl" not in notes
