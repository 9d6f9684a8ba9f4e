"""`preheat up --tracing` exporting to an OTLP/gRPC receiver run by this test: one streamed
chat completion through the router, sent with a W3C ``traceparent``, comes back as one trace
whose router and worker spans are parented as the request flowed."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from otlpkit import Receiver, Span, by_name, otel_env, serve_receiver
from upkit import up_state, wait_for

POOL = """\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {name: traced}
spec:
  model: {name: sim-8b}
  engine:
    kind: sim
    args: {timeScale: 1, loadTime: 200ms, warmupTime: 100ms}
  replicas: {min: 1, max: 1, warmStandby: 0}
"""


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    yield from serve_receiver()


def _one(spans: list[Span], name: str) -> Span:
    found = by_name(spans, name)
    assert len(found) == 1, (name, [(s.service, s.name) for s in spans])
    return found[0]


def test_one_streamed_chat_is_one_trace_across_router_and_worker(
    tmp_path: Path, receiver: tuple[str, Receiver]
) -> None:
    endpoint, rx = receiver
    run = tmp_path / "run"
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    log = tmp_path / "up.log"
    env = otel_env(endpoint)
    up = subprocess.Popen(
        [sys.executable, "-m", "preheat.cli", "up", "-f", str(pool), "--out", str(run),
         "--no-ui", "--tracing"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    try:
        wait_for(
            lambda: (up_state(run).get("counts") or {}).get("active") == 1, 60, "a worker", log
        )
        http = up_state(run)["router"]["http"]
        body = {
            "model": "sim-8b",
            "messages": [{"role": "user", "content": "where did the time go? " * 20}],
            "max_tokens": 12,
            "stream": True,
        }
        req = urllib.request.Request(
            f"{http}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={
                "content-type": "application/json",
                "traceparent": f"00-{trace_id}-{client_span}-01",
            },
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
        assert "data: [DONE]" in text

        def complete(spans: list[Span]) -> bool:
            names = {s.name for s in spans}
            return {"router.request", "worker.generate", "worker.decode"} <= names

        spans = rx.wait_for(complete, 30)
        workers = list(up_state(run).get("workers") or {})  # read while it runs
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=40)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()

    mine = [s for s in spans if s.trace_id == trace_id]
    # the warm-up requests are traces of their own; this request's spans are all in one
    assert {s.name for s in mine} >= {
        "router.request", "router.parse", "router.admission", "router.schedule",
        "router.upstream", "worker.generate", "worker.queue", "worker.prefill", "worker.decode",
    }  # fmt: skip
    root = _one(mine, "router.request")
    assert root.parent_id == client_span  # the client's span is the router's parent
    assert root.service == "preheat-router"
    for name in ("router.parse", "router.admission", "router.schedule", "router.upstream"):
        assert _one(mine, name).parent_id == root.span_id, name
    upstream = _one(mine, "router.upstream")
    worker = _one(mine, "worker.generate")
    assert worker.service == "preheat-worker"
    assert worker.parent_id == upstream.span_id  # propagated over gRPC metadata
    for name in ("worker.queue", "worker.prefill", "worker.decode"):
        assert _one(mine, name).parent_id == worker.span_id, name

    schedule = _one(mine, "router.schedule")
    assert len(workers) == 1
    assert schedule.attributes["dev.preheat.endpoint"] in workers
    assert schedule.attributes["dev.preheat.predicted_ttft_ms"] > 0
    assert schedule.attributes["dev.preheat.reason"]
    assert (
        upstream.attributes["dev.preheat.endpoint"] == schedule.attributes["dev.preheat.endpoint"]
    )

    assert root.attributes["gen_ai.request.model"] == "sim-8b"
    assert root.attributes["gen_ai.request.max_tokens"] == 12
    assert root.attributes["gen_ai.usage.output_tokens"] == 12
    assert root.attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert root.attributes["dev.preheat.outcome"] == "ok"
    assert any(name == "first_token" for name, _ in root.events)
    decode = _one(mine, "worker.decode")
    assert decode.attributes["dev.preheat.tokens"] == 12
    prefill = _one(mine, "worker.prefill")
    assert prefill.attributes["dev.preheat.computed_tokens"] > 0
    # the call starts after the router got the request, the worker's span after the call
    # (its end is not compared: the worker closes its span after sending the last chunk,
    # which may be after the router has ended its own)
    assert root.start_ns <= upstream.start_ns <= worker.start_ns
    queue, decode = _one(mine, "worker.queue"), _one(mine, "worker.decode")
    assert worker.start_ns <= queue.start_ns <= prefill.start_ns <= decode.start_ns
