"""The worker's OpenAI HTTP API without vLLM: its flags, the sim engine's ``openai_port`` 0,
and the gate (roles, drain, metrics) around an engine's ASGI app, here a fake one called
directly (uvicorn and vLLM's app are tested in tests/vllm_tier/test_worker_openai.py)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from workerkit import Client, make_sim_engine, running_worker

from preheat.core.lifecycle import LifecycleState
from preheat.proto.preheat.v1 import worker_pb2
from preheat.worker.engines import EngineUnavailable, build_worker_engine, openai_enabled
from preheat.worker.main import add_arguments, run
from preheat.worker.metrics import WorkerOutcome
from preheat.worker.openai_http import Gate, outcome_of
from preheat.worker.server import describe

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


# --- flags ---------------------------------------------------------------------------------
def test_openai_port_defaults_to_vllm_serves() -> None:
    args = parse()
    assert args.openai_port == 8000
    assert not openai_enabled(args)  # the sim engine serves none
    assert openai_enabled(parse("--engine", "vllm", "--model", "m"))
    assert not openai_enabled(parse("--engine", "vllm", "--model", "m", "--openai-port", "-1"))


def test_sim_engine_has_no_openai_app() -> None:
    engine, factory = build_worker_engine(parse("--engine", "sim", "--openai-port", "0"))
    assert factory is None
    assert engine.info.kind == "sim"


@pytest.mark.parametrize(
    "flags",
    [
        ["--tool-call-parser", "hermes"],
        ["--chat-template", "t.jinja"],
        ["--enable-auto-tool-choice"],
        ["--reasoning-parser", "deepseek_r1"],
        ["--served-model-name", "x"],
        ["--vllm-serve-arg=--max-log-len=10"],
    ],
)
def test_sim_refuses_vllm_serve_options(flags: list[str]) -> None:
    with pytest.raises(EngineUnavailable) as err:
        build_worker_engine(parse("--engine", "sim", *flags))
    assert flags[0].split("=")[0] in str(err.value)
    assert "--engine vllm only" in str(err.value)


def test_openai_off_refuses_its_options() -> None:
    args = parse(
        "--engine", "vllm", "--model", "m", "--openai-port", "-1", "--tool-call-parser", "x"
    )
    with pytest.raises(EngineUnavailable) as err:
        build_worker_engine(args)
    assert "--tool-call-parser" in str(err.value)
    assert "--openai-port -1" in str(err.value)


@pytest.mark.skipif(HAS_VLLM, reason="checks the message without vLLM; the vLLM tier has it")
def test_vllm_without_vllm_is_unavailable() -> None:
    with pytest.raises(EngineUnavailable) as err:
        build_worker_engine(parse("--engine", "vllm", "--model", "m"))
    assert "not available here" in str(err.value)


@pytest.mark.parametrize("port", ["-2", "70000"])
def test_bad_openai_port_exits_2(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse("--openai-port", port)
    assert e.value.code == 2
    assert f"argument --openai-port: '{port}' is not a TCP port (0-65535, or -1: off)" in (
        capsys.readouterr().err
    )


def test_sim_options_error_exits_2() -> None:
    assert run(parse("--tool-call-parser", "hermes")) == 2


# --- the sim worker: openai_port 0 ---------------------------------------------------------
async def test_sim_worker_reports_openai_port_0(client: Client) -> None:
    status = await client.data_control.Status(worker_pb2.StatusRequest())
    assert status.openai_port == 0
    assert client.server.ports is not None
    assert client.server.ports.openai == 0
    assert describe(client.server.ports, "w")["openai_port"] == 0


# --- the gate ------------------------------------------------------------------------------
class FakeApp:
    """An ASGI app: POST /v1/stream streams ``chunks`` SSE events (one per ``release``),
    POST /v1/status/<n> answers status n, GET answers 200."""

    def __init__(self) -> None:
        self.release = asyncio.Queue[None]()
        self.entered = asyncio.Event()
        self.cancelled = False
        self.chunks = 3

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        if scope["method"] == "POST" and path.startswith("/v1/status/"):
            status = int(path.rsplit("/", 1)[1])
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        if scope["method"] == "POST" and path == "/v1/stream":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
                }
            )
            self.entered.set()
            try:
                for i in range(self.chunks):
                    await self.release.get()
                    body = f"data: {json.dumps({'i': i})}\n\n".encode()
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class Recorder:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.messages[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


async def call(gate: Gate, method: str, path: str) -> Recorder:
    rec = Recorder()

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    await gate({"type": "http", "method": method, "path": path, "headers": []}, receive, rec)
    return rec


def requests_count(client: Client, outcome: WorkerOutcome) -> float:
    value = client.server.metrics.requests.labels(outcome.value)._value.get()
    return float(value)


@pytest.fixture
async def gated() -> AsyncIterator[tuple[Client, FakeApp, Gate]]:
    app = FakeApp()
    async with running_worker(make_sim_engine(), drain_grace_s=0.2) as c:
        yield c, app, Gate(c.server, app)


async def test_active_worker_passes_requests_and_counts_them(
    gated: tuple[Client, FakeApp, Gate],
) -> None:
    client, _, gate = gated
    ok = requests_count(client, WorkerOutcome.OK)
    invalid = requests_count(client, WorkerOutcome.INVALID)
    assert (await call(gate, "POST", "/v1/status/200")).status == 200
    assert (await call(gate, "POST", "/v1/status/404")).status == 404
    assert requests_count(client, WorkerOutcome.OK) == ok + 1
    assert requests_count(client, WorkerOutcome.INVALID) == invalid + 1
    assert client.server.in_flight == 0


async def test_standby_refuses_posts_with_503_and_serves_gets(
    gated: tuple[Client, FakeApp, Gate],
) -> None:
    client, _, gate = gated
    await client.server.demote()
    unavailable = requests_count(client, WorkerOutcome.UNAVAILABLE)
    rec = await call(gate, "POST", "/v1/chat/completions")
    assert rec.status == 503
    assert rec.headers[b"retry-after"] == b"1"
    assert rec.headers[b"content-type"] == b"application/json"
    err = json.loads(rec.body)["error"]
    assert err["type"] == "ServiceUnavailableError"
    assert err["code"] == 503
    assert err["param"] is None
    assert "standby" in err["message"]
    assert requests_count(client, WorkerOutcome.UNAVAILABLE) == unavailable + 1
    assert (await call(gate, "GET", "/v1/models")).status == 200


async def test_drain_waits_for_a_stream_then_finishes_it(
    gated: tuple[Client, FakeApp, Gate],
) -> None:
    client, app, gate = gated
    await client.server.stop()  # a fresh worker with a long grace instead
    async with running_worker(make_sim_engine(), drain_grace_s=30.0) as c:
        gate = Gate(c.server, app)
        task = asyncio.create_task(call(gate, "POST", "/v1/stream"))
        await app.entered.wait()
        assert c.server.in_flight == 1
        c.server.begin_drain()
        await asyncio.sleep(0)
        assert c.server.state == LifecycleState.DRAINING
        assert (await call(gate, "POST", "/v1/status/200")).status == 503
        for _ in range(app.chunks):
            app.release.put_nowait(None)
        rec = await task
        assert rec.status == 200
        assert rec.body.endswith(b"data: [DONE]\n\n")
        assert b'"error"' not in rec.body
        await asyncio.wait_for(c.server.wait_stopped(), 5)
        assert not app.cancelled


async def test_drain_grace_over_aborts_a_stream_with_an_error_event(
    gated: tuple[Client, FakeApp, Gate],
) -> None:
    client, app, gate = gated
    aborted = requests_count(client, WorkerOutcome.ABORTED)
    task = asyncio.create_task(call(gate, "POST", "/v1/stream"))
    await app.entered.wait()
    app.release.put_nowait(None)  # one chunk out, then the app waits forever
    await client.server.drain()  # grace 0.2 s, then the abort
    rec = await asyncio.wait_for(task, 5)
    assert app.cancelled  # the app's coroutine (vLLM's: its generator) was cancelled
    assert rec.status == 200
    events = [e for e in rec.body.decode().split("\n\n") if e]
    assert events[0] == 'data: {"i": 0}'
    err = json.loads(events[1].removeprefix("data: "))["error"]
    assert err["code"] == 503
    assert "draining" in err["message"]
    assert events[2] == "data: [DONE]"
    assert rec.messages[-1]["more_body"] is False
    assert requests_count(client, WorkerOutcome.ABORTED) == aborted + 1
    assert client.server.in_flight == 0


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, WorkerOutcome.OK),
        (400, WorkerOutcome.INVALID),
        (404, WorkerOutcome.INVALID),
        (422, WorkerOutcome.INVALID),
        (429, WorkerOutcome.REJECTED),
        (503, WorkerOutcome.UNAVAILABLE),
        (500, WorkerOutcome.ERROR),
    ],
)
def test_outcome_of_status(status: int, outcome: WorkerOutcome) -> None:
    assert outcome_of(status) is outcome
