"""The two wires ``preheat load`` speaks, each turning one trace request into one
:class:`~preheat.report.record.RequestOutcome`:

- gRPC ``preheat.v1.Inference/Generate`` (a router or a worker: they serve the same
  service), through :func:`preheat.load.stream.stream_generate`. The last chunk's
  ``timing`` gives the stage breakdown and ``worker_id`` the endpoint.
- The OpenAI HTTP API of ``preheat router``: ``POST /v1/completions`` with ``stream: true``
  and ``stream_options.include_usage`` (server-sent events), the session id in header
  ``x-session-id`` and in ``user``. The router names the worker in header
  ``X-Preheat-Worker`` and puts the stage breakdown on the last chunk (``"preheat":
  {"worker_id", "timing": {...}}``); a server that sends neither (another OpenAI-compatible
  one) leaves the outcome's endpoint and stages empty.

A rejection (gRPC ``RESOURCE_EXHAUSTED``, HTTP 429) is ``rejected``; any other failure
``error`` with the status and the server's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import grpc

from preheat.load.stream import StreamRecord, stream_generate
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc
from preheat.report.record import RequestOutcome
from preheat.workload.traces import TraceRequest, prompt_text

if TYPE_CHECKING:
    from preheat.load.replay import LoadOptions

SESSION_HEADER = "x-session-id"
CLASS_HEADER = "x-slo-class"  # the router's traffic class header (router/README.md)
WORKER_HEADER = "X-Preheat-Worker"
DEADLINE_HEADER = "x-ttft-deadline-ms"


class ConnectError(RuntimeError):
    """The target could not be reached before the replay started."""


class Client(Protocol):
    async def send(self, req: TraceRequest, request_id: str, t_s: float) -> RequestOutcome:
        """Sends one request and waits for its end; never raises for a failed request."""
        ...


def _r(ms: float) -> float:
    return round(ms, 3)


def max_tokens(req: TraceRequest, options: LoadOptions) -> int:
    cap = options.max_output_tokens
    return req.output_tokens if cap is None else min(req.output_tokens, cap)


def stages(
    ttft_ms: float,
    *,
    queue_ms: float,
    prefill_ms: float,
    decode_ms: float,
    server_ttft_ms: float,
    router_ms: float = 0.0,
) -> dict[str, float]:
    """The stage breakdown of one request, from the engine's timing and the client's TTFT;
    through a router that says its own stage (``router_ms``), that too, and ``network``: the
    rest of the client's TTFT (both hops, the worker's handling outside the engine, the
    client)."""
    out = {
        "queue": _r(queue_ms),
        "prefill": _r(prefill_ms),
        "decode": _r(decode_ms),
        "server_ttft": _r(server_ttft_ms),
        # router, network and client: the client's TTFT beyond the engine's
        "outside_engine": _r(max(0.0, ttft_ms - server_ttft_ms)),
    }
    if router_ms > 0:
        out["router"] = _r(router_ms)
        out["network"] = _r(max(0.0, ttft_ms - server_ttft_ms - router_ms))
    return out


def _http_stages(ttft_ms: float, extra: object) -> dict[str, float] | None:
    """``stages`` from the router's ``"preheat"`` object; None when it is missing or odd."""
    timing = extra.get("timing") if isinstance(extra, dict) else None
    if not isinstance(timing, dict):
        return None
    try:
        server_ttft = float(timing["ttft_ms"])
        return (
            stages(
                ttft_ms,
                queue_ms=float(timing["queue_ms"]),
                prefill_ms=float(timing["prefill_ms"]),
                decode_ms=float(timing["decode_ms"]),
                server_ttft_ms=server_ttft,
                router_ms=float(timing.get("router_ms", 0.0)),
            )
            if server_ttft > 0
            else None
        )
    except (KeyError, TypeError, ValueError):
        return None


def outcome_from_stream(
    rec: StreamRecord, request_id: str, t_s: float, session_id: str
) -> RequestOutcome:
    """A gRPC stream's record as a run-record line."""
    ttft_ms = rec.ttft_s * 1e3
    out = RequestOutcome(
        request_id=request_id,
        t_s=round(t_s, 6),
        outcome="ok",
        ttft_ms=_r(ttft_ms),
        e2e_ms=_r(rec.e2e_s * 1e3),
        itl_ms=[_r(s * 1e3) for s in rec.itl_s],
        prompt_tokens=rec.prompt_tokens,
        cached_tokens=rec.cached_tokens,
        output_tokens=rec.completion_tokens,
        session_id=session_id,
        endpoint=rec.worker_id,
    )
    if rec.ok:
        if rec.server_ttft_ms > 0:
            out.stages_ms = stages(
                ttft_ms,
                queue_ms=rec.server_queue_ms,
                prefill_ms=rec.server_prefill_ms,
                decode_ms=rec.server_decode_ms,
                server_ttft_ms=rec.server_ttft_ms,
                router_ms=rec.router_ms,
            )
        return out
    out.outcome = "rejected" if rec.status_code == "RESOURCE_EXHAUSTED" else "error"
    out.error = rec.error
    out.ttft_ms = 0.0 if rec.completion_tokens == 0 else out.ttft_ms
    return out


class GrpcClient:
    """One channel to ``HOST:PORT``; every request is one ``Generate`` stream on it."""

    def __init__(self, target: str, options: LoadOptions) -> None:
        self.options = options
        self.target = target
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = pb_grpc.InferenceStub(self.channel)

    async def send(self, req: TraceRequest, request_id: str, t_s: float) -> RequestOutcome:
        greq = pb.GenerateRequest(
            request_id=request_id,
            model=self.options.model,
            prompt=prompt_text(req),
            sampling=pb.SamplingParams(max_tokens=max_tokens(req, self.options)),
            session_id=req.session_id,
            ttft_deadline_ms=self.options.ttft_deadline_ms,
            slo_class=req.slo_class,
        )
        rec = await stream_generate(self.stub, greq, timeout_s=self.options.request_timeout_s)
        out = outcome_from_stream(rec, request_id, t_s, req.session_id)
        out.slo_class = req.slo_class
        return out

    async def connect(self, timeout_s: float) -> None:
        """Waits for the channel to connect, so that the first request is not charged with
        the connection's setup; :class:`ConnectError` when it does not within the time."""
        try:
            await asyncio.wait_for(self.channel.channel_ready(), timeout_s)
        except TimeoutError:
            raise ConnectError(
                f"cannot connect to {self.target} (gRPC) within {timeout_s:g} s"
            ) from None

    async def close(self) -> None:
        await self.channel.close()


def _http_error_message(status: int, text: str) -> str:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        message = json.loads(text)["error"]["message"]
        if isinstance(message, str):
            return f"HTTP {status}: {message}"
    return f"HTTP {status}: {text.strip()[:200]}"


class OpenAIClient:
    """``POST {base}/v1/completions`` with streaming, on one aiohttp session."""

    def __init__(self, base_url: str, options: LoadOptions) -> None:
        self.options = options
        self.base = base_url.rstrip("/")
        self.url = self.base + "/v1/completions"
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=options.concurrency),
            timeout=aiohttp.ClientTimeout(total=options.request_timeout_s),
        )

    async def send(self, req: TraceRequest, request_id: str, t_s: float) -> RequestOutcome:
        body: dict[str, Any] = {
            "model": self.options.model,
            "prompt": prompt_text(req),
            "max_tokens": max_tokens(req, self.options),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        headers = {"x-request-id": request_id}
        if req.session_id:
            body["user"] = req.session_id
            headers[SESSION_HEADER] = req.session_id
        if self.options.ttft_deadline_ms:
            headers[DEADLINE_HEADER] = str(self.options.ttft_deadline_ms)
        if req.slo_class:
            headers[CLASS_HEADER] = req.slo_class
        out = RequestOutcome(
            request_id=request_id,
            t_s=round(t_s, 6),
            outcome="ok",
            session_id=req.session_id,
            slo_class=req.slo_class,
        )
        start = time.monotonic()
        rec = StreamRecord(request_id=request_id, ok=False)
        try:
            async with self.session.post(self.url, json=body, headers=headers) as resp:
                if resp.status != 200:
                    out.outcome = "rejected" if resp.status == 429 else "error"
                    out.error = _http_error_message(resp.status, await resp.text())
                    out.e2e_ms = _r((time.monotonic() - start) * 1e3)
                    return out
                out.endpoint = resp.headers.get(WORKER_HEADER, "")
                finished, extra = await self._read_events(resp, rec, out, start)
        except (aiohttp.ClientError, TimeoutError) as err:
            out.outcome = "error"
            out.error = f"{type(err).__name__}: {err}"
        out.e2e_ms = _r((time.monotonic() - start) * 1e3)
        out.ttft_ms = _r(rec.ttft_s * 1e3)
        out.itl_ms = [_r(s * 1e3) for s in rec.itl_s]
        if out.outcome == "ok" and not finished:
            out.outcome = "error"
            out.error = "stream ended without a finish reason"
        if out.outcome == "ok" and extra is not None:
            out.stages_ms = _http_stages(out.ttft_ms, extra) or {}
            worker = extra.get("worker_id") if isinstance(extra, dict) else None
            if isinstance(worker, str) and worker:
                out.endpoint = worker
        return out

    async def _read_events(
        self,
        resp: aiohttp.ClientResponse,
        rec: StreamRecord,
        out: RequestOutcome,
        start: float,
    ) -> tuple[bool, object]:
        """Reads the SSE stream into ``rec``/``out``: whether a finish reason came, and the
        router's ``"preheat"`` object (None if none came)."""
        finished = False
        extra: object = None
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                obj = json.loads(data)
            except ValueError:
                out.outcome = "error"
                out.error = f"bad event from the server: {data[:80]!r}"
                return False, extra
            if "error" in obj:
                err = obj["error"] if isinstance(obj["error"], dict) else {}
                code = str(err.get("code", "error"))
                out.outcome = (
                    "rejected" if code in ("rate_limit_exceeded", "resource_exhausted") else "error"
                )
                out.error = f"{code}: {err.get('message', obj['error'])}"
                return False, extra
            extra = obj.get("preheat", extra)
            for choice in obj.get("choices") or []:
                if choice.get("text"):
                    rec.tokens_arrived(start, time.monotonic(), 1)
                if choice.get("finish_reason"):
                    finished = True
            usage = obj.get("usage")
            if isinstance(usage, dict):
                out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                out.output_tokens = int(usage.get("completion_tokens") or 0)
                details = usage.get("prompt_tokens_details") or {}
                out.cached_tokens = int(details.get("cached_tokens") or 0)
        if not out.output_tokens:
            out.output_tokens = rec.completion_tokens
        return finished, extra

    async def connect(self, timeout_s: float) -> None:
        """Checks that the server answers HTTP (any status) within the time."""
        try:
            async with self.session.get(
                self.base + "/v1/models", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            reason = str(err) or type(err).__name__
            raise ConnectError(f"cannot reach {self.base} (HTTP): {reason}") from None

    async def close(self) -> None:
        await self.session.close()


@contextlib.asynccontextmanager
async def make_client(
    target: str, options: LoadOptions, connect_timeout_s: float = 10.0
) -> AsyncIterator[GrpcClient | OpenAIClient]:
    """The client for ``options.api``, connected (:class:`ConnectError` if it cannot be), and
    closed when the block ends."""
    client: GrpcClient | OpenAIClient
    if options.api == "openai":
        if not target.startswith(("http://", "https://")):
            target = "http://" + target
        client = OpenAIClient(target, options)
    else:
        client = GrpcClient(target, options)
    try:
        await client.connect(connect_timeout_s)
        yield client
    finally:
        await client.close()
