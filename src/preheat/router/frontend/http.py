"""The router's HTTP side (aiohttp): the OpenAI-compatible API, ``/metrics`` and probes.

- ``POST /v1/completions`` and ``POST /v1/chat/completions``: ``stream: true`` answers with
  server-sent events (``data: {chunk}`` in OpenAI's schema, then ``data: [DONE]``), otherwise
  one JSON body. The session id comes from header ``x-session-id``, else the body's
  ``session_id`` or ``user``; client region from ``x-client-region``/``x-client-zone``.
- Errors are OpenAI-shaped, ``{"error": {"message", "type", "param", "code"}}``, with the
  status from :func:`preheat.core.errors.http_status` (400 malformed, 429 + ``Retry-After``
  on admission, 503 when no endpoint can take the request). A failure after the stream
  started is sent as a final ``data: {"error": ...}`` event before ``[DONE]``.
- Beyond OpenAI's schema (clients ignore unknown fields): header ``X-Preheat-Worker`` names
  the worker that serves the request, and the chunk that ends the stream (or the whole
  body) carries ``"preheat": {"worker_id", "timing": {"queue_ms", "prefill_ms",
  "decode_ms", "ttft_ms", "e2e_ms", "router_ms"}}``, the engine's stage breakdown that gRPC
  clients get in ``GenerateResponse.timing``, and the router's own stage.
- ``GET /v1/models``; the vLLM paths of :mod:`.vllm_routes` (``/v1/models/{id}``,
  ``/health``, ``/tokenize``, ``/detokenize``); ``GET /metrics``; ``GET /healthz``
  (liveness: always 200); ``GET /ready`` (200 once the store has a routable endpoint, else
  503).
- Responses carry ``system_fingerprint``; with ``include_usage`` every stream chunk has
  ``usage`` (null but on the last). A request the worker aborted (drain grace over) ends
  with an error (an error event, or 503), never ``finish_reason: "abort"``.
- Limits (:class:`HttpLimits`): a body over ``max_body_bytes`` is refused with 413 before
  it is read (``Content-Length``) or as soon as it grows past it (chunked); a connection
  whose request line and headers do not arrive within ``header_timeout_s`` is closed; a
  body that does not arrive within ``body_timeout_s`` is answered 408; a request gets
  ``request_timeout_s`` from receipt to its last chunk (504, or an error event once the
  stream started). A large body is parsed and its prompt tokenized in the dispatcher's
  thread pool, so one client's megabytes do not stall everyone else's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from preheat import __version__
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.traffic.respcache import NOT_IN_KEY, deterministic
from preheat.process.httpserve import serve
from preheat.process.logs import fields, request_context
from preheat.proto.preheat.v1 import inference_pb2
from preheat.router.endpoints.datastore import UNKNOWN_MODEL_LEN
from preheat.router.frontend import cache_use, passthrough_cache, tracing
from preheat.router.frontend.auth import KeySet, api_key_middleware, http_tenant
from preheat.router.frontend.cache_use import CACHE_BYPASS, CACHE_HEADER, CacheUse
from preheat.router.frontend.dispatch import DEGRADED_HEADER, Dispatcher, Prepared, StreamStats
from preheat.router.frontend.errors import JsonErrorAppRunner, json_errors, openai_error
from preheat.router.frontend.metrics import RouterOutcome
from preheat.router.frontend.openai_schema import (
    DEFAULT_CHAT_MAX_TOKENS,
    DEFAULT_MAX_TOKENS,
    ChatBody,
    CompletionBody,
    flatten_chat,
    header_deadline_ms,
    parse_body,
    to_generate_request,
)
from preheat.router.frontend.passthrough import PromptIds
from preheat.router.frontend.quotas import RateLimited
from preheat.router.frontend.tracing import RequestTrace
from preheat.router.frontend.vllm_routes import VllmRoutes, add_vllm_routes, model_object
from preheat.wire.coalesce import CoalesceConfig, coalesce

if TYPE_CHECKING:
    from preheat.router.pools import Pool, PoolSet

log = logging.getLogger("preheat.router")

# OpenAI's finish reasons; an aborted request (FINISH_REASON_ABORT) ends with an error
# instead, as vLLM's server does (see _aborted)
_FINISH = {
    inference_pb2.FINISH_REASON_STOP: "stop",
    inference_pb2.FINISH_REASON_LENGTH: "length",
}
SYSTEM_FINGERPRINT = f"preheat-{__version__}"


def _aborted() -> PreheatError:
    return PreheatError(
        ErrorCode.UNAVAILABLE,
        "the worker stopped the request before it finished (it was draining or failing); retry it",
        retry_after_s=1.0,
    )


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP client may take of the router (see the module docstring)."""

    max_body_bytes: int = 4 * 1024 * 1024
    # request line + headers of a request must arrive within this (aiohttp's keep-alive
    # timeout: it is also how long an idle keep-alive connection stays open)
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0  # the whole body, from when its handler starts; 0: none
    request_timeout_s: float = 600.0  # from receipt to the last chunk; 0: none

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        for name in ("header_timeout_s", "body_timeout_s", "request_timeout_s"):
            v = getattr(self, name)
            if not v >= 0 or math.isinf(v):
                raise ValueError(f"{name} must be a number >= 0, got {v}")


class HttpFrontend:
    def __init__(
        self,
        pools: PoolSet,
        coalesce_config: CoalesceConfig,
        *,
        ready: Callable[[], bool],
        registries: list[CollectorRegistry],
        api_keys: KeySet | None = None,
        tenant_header: str = "",
        limits: HttpLimits | None = None,
    ) -> None:
        self.pools = pools
        self.metrics = pools.metrics  # before a request's pool is known
        self.coalesce = coalesce_config
        self.ready = ready
        self.registries = registries
        self.api_keys = api_keys  # None: the API is open (see router/frontend/auth.py)
        self.tenant_header = tenant_header
        self.limits = limits if limits is not None else HttpLimits()
        self.ids = PromptIds(pools.tokenizer)  # /tokenize's chat template

    def models(self) -> list[str]:
        return [name for name, _ in self.pools.models()]

    def model_len(self, model: str) -> int | None:
        """The context window of ``model`` as its pool's workers report it (None: unknown)."""
        for name, pool in self.pools.models():
            if name == model:
                return pool.model_len()
        return None

    def model_root(self, model: str) -> str:
        """The model the pools serve for ``model`` (an alias's pool model)."""
        for name, pool in self.pools.models():
            if name == model:
                return pool.spec.model or name
        return model

    def max_model_len(self, model: str) -> int:
        """The context window of the pool serving ``model`` ("": the default pool's);
        unknown: no limit (the workers check)."""
        try:
            pool = self.pools.resolve(model)
        except PreheatError:
            return UNKNOWN_MODEL_LEN
        return pool.dispatcher.pool_limits(model).max_model_len

    async def pool_of(self, raw: bytes) -> Pool:
        """The pool a request body is for (its ``model``); raises the request's PreheatError
        (404 ``model_not_found`` for a model no pool serves)."""
        if not self.pools.needs_model():
            return self.pools.resolve("")
        if len(raw) >= OFFLOAD_BYTES:
            model = await asyncio.to_thread(model_of, raw)
        else:
            model = model_of(raw)
        return self.pools.resolve(model)


OFFLOAD_BYTES = 16 * 1024  # a body this large is parsed for its model off the event loop


def model_of(raw: bytes) -> str:
    """The ``model`` of an OpenAI request body ("": none); INVALID_ARGUMENT for a body
    that is not a JSON object or a model that is not a string."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise PreheatError(
            ErrorCode.INVALID_ARGUMENT, f"the request body is not valid JSON: {str(e)[:200]}"
        ) from None
    if not isinstance(data, dict):
        raise PreheatError(ErrorCode.INVALID_ARGUMENT, "the request body must be a JSON object")
    model = data.get("model")
    if model is None:
        return ""
    if not isinstance(model, str):
        raise PreheatError(
            ErrorCode.INVALID_ARGUMENT, "invalid request: model: expected a string", param="model"
        )
    return model


FRONTEND_KEY: web.AppKey[HttpFrontend] = web.AppKey("frontend", HttpFrontend)


def error_response(err: PreheatError) -> web.Response:
    headers = {}
    if err.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(err.retry_after_s)))
    if isinstance(err, RateLimited):  # a tenant's quota: OpenAI's rate-limit headers too
        headers["retry-after-ms"] = str(max(1, math.ceil((err.retry_after_s or 0.0) * 1000)))
        headers.update(err.headers)
    status, body = openai_error(err)
    return web.json_response(body, status=status, headers=headers)


def _session(request: web.Request, body: Any) -> str:
    return str(request.headers.get("x-session-id") or body.session_id or body.user or "")


def _usage(u: inference_pb2.Usage | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


WORKER_HEADER = "X-Preheat-Worker"


def _preheat(chunk: inference_pb2.GenerateResponse) -> dict[str, Any] | None:
    """The worker and its stage breakdown, from the chunk that carries ``timing`` (the last)."""
    if not chunk.HasField("timing"):
        return None
    t = chunk.timing
    return {
        "worker_id": chunk.worker_id,
        "timing": {
            "queue_ms": t.queue_ms,
            "prefill_ms": t.prefill_ms,
            "decode_ms": t.decode_ms,
            "ttft_ms": t.ttft_ms,
            "e2e_ms": t.e2e_ms,
            "router_ms": t.router_ms,
        },
    }


def _headers(
    first: inference_pb2.GenerateResponse, base: dict[str, str] | None = None
) -> dict[str, str]:
    """``base`` plus the request id and, once known, the worker serving it."""
    headers = {**(base or {}), "X-Request-Id": first.request_id}
    if first.worker_id:
        headers[WORKER_HEADER] = first.worker_id
    return headers


def _cache_lookup(
    request: web.Request, d: Dispatcher, chat: bool, body: Any, prep: Prepared
) -> CacheUse:
    """The pool's response cache for this request: off, not deterministic, bypassed, a
    hit (with its answer) or a miss (with the key its answer is stored under)."""
    cfg = d.config.traffic.cache
    if not cfg.enabled or not deterministic(body.temperature, body.seed, body.n):
        return CacheUse()
    params = body.model_dump(exclude=set(NOT_IN_KEY))
    params["max_tokens"] = prep.request.sampling.max_tokens  # the limit it is served with
    return _lookup(request, d, chat, d.config.model or body.model, params, prep)


def _lookup(
    request: web.Request,
    d: Dispatcher,
    chat: bool,
    model: str,
    params: dict[str, Any],
    prep: Prepared,
) -> CacheUse:
    """The lookup of a cacheable request by its key: bypassed, a hit or a miss."""
    bypass = request.headers.get(CACHE_BYPASS, "").lower() == "bypass"
    api = "chat" if chat else "completions"
    return cache_use.lookup(d, api, model, params, prep, bypass=bypass)


async def _answer_hit(
    request: web.Request,
    chat: bool,
    body: Any,
    stream: bool,
    model: str,
    prep: Prepared,
    cache: CacheUse,
    trace: RequestTrace | None,
) -> web.StreamResponse:
    """A cache hit, answered by the router in OpenAI's shape (streamed as one chunk when
    ``stream``): no worker, no quota, no tokens. ``body``: what says whether the usage
    chunk is wanted (``include_usage``)."""
    a, d = cache.answer, cache.dispatcher
    assert a is not None
    assert d is not None
    d.metrics.observe_outcome("openai", RouterOutcome.OK, slo_class=prep.slo_class)
    rid = prep.info.request_id
    obj_id = ("chatcmpl-" if chat else "cmpl-") + rid
    created = int(time.time())
    hit = cache_use.hit_chunk(prep, a)
    if trace is not None:
        trace.end("ok", time.perf_counter(), usage=hit.usage, finish_reason=a.finish_reason)
    nothing, stats = _no_chunks(), StreamStats()
    if stream:
        return await _sse(request, chat, body, obj_id, model, created, hit, nothing, stats, cache)
    return await _whole(chat, obj_id, model, created, hit, nothing, stats, cache)


def _cache_headers(cache: CacheUse | None) -> dict[str, str]:
    return {CACHE_HEADER: cache.result} if cache is not None and cache.result else {}


async def _no_chunks() -> AsyncIterator[inference_pb2.GenerateResponse]:
    return
    yield  # an async generator with nothing in it


def _degraded(stats: StreamStats | None) -> dict[str, Any] | None:
    """The degradation step the request took (the ``preheat`` block's ``degraded``)."""
    if stats is None or not stats.degraded:
        return None
    out: dict[str, Any] = {"step": stats.degraded}
    if stats.clamped_from:
        out["max_tokens_asked"] = stats.clamped_from
    if stats.fallback_pool:
        out["pool"] = stats.fallback_pool
    return out


def _degraded_headers(stats: StreamStats | None) -> dict[str, str]:
    """``X-Preheat-Degraded: STEP`` (``; max_tokens_asked=N`` after a clamp, ``; pool=P``
    after a fallback)."""
    note = stats.degraded_note() if stats is not None else ""
    return {DEGRADED_HEADER: note} if note else {}


def _too_large(size: str, limit: int) -> web.Response:
    return _limit_response(
        413,
        f"request body of {size} exceeds the limit of {limit} bytes "
        "(the router's --max-body-bytes)",
        "request_too_large",
    )


def _limit_response(status: int, message: str, code: str) -> web.Response:
    kind = "invalid_request_error" if status == 413 else "timeout"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status, headers={"Connection": "close"})


async def _read_body(request: web.Request, limits: HttpLimits) -> bytes | web.Response:
    """The body, or the 413/408 response that refuses it (before reading, when the
    declared length is over the limit)."""
    declared = request.content_length
    if declared is not None and declared > limits.max_body_bytes:
        return _too_large(f"{declared} bytes", limits.max_body_bytes)
    try:
        async with asyncio.timeout(limits.body_timeout_s or None):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _too_large(f"more than {limits.max_body_bytes} bytes", limits.max_body_bytes)
    except TimeoutError:
        return _limit_response(
            408,
            f"the request body did not arrive within {limits.body_timeout_s:g}s "
            "(the router's --body-timeout-s)",
            "request_timeout",
        )


def _parse_chat(raw: bytes) -> tuple[ChatBody, str]:
    cbody: ChatBody = parse_body(ChatBody, raw)
    return cbody, flatten_chat(cbody.messages)


def _parse_completion(raw: bytes) -> tuple[CompletionBody, str | list[int]]:
    pbody: CompletionBody = parse_body(CompletionBody, raw)
    return pbody, pbody.prompt


async def _handle(request: web.Request, chat: bool) -> web.StreamResponse:
    fe = request.app[FRONTEND_KEY]
    received = asyncio.get_running_loop().time()
    received_pc = time.perf_counter()
    api = "openai"
    metrics = fe.metrics
    trace: RequestTrace | None = None
    try:
        raw = await _read_body(request, fe.limits)
        if isinstance(raw, web.Response):
            metrics.observe_outcome(api, RouterOutcome.INVALID)
            return raw
        pool = await fe.pool_of(raw)
        d = pool.dispatcher
        metrics = d.metrics
        if await pool.passthrough.wait_active():
            return await _passthrough(request, fe, pool, raw, chat, received, received_pc)
        prompt: str | list[int]
        if chat:
            cbody, prompt = await d.offload(len(raw), functools.partial(_parse_chat, raw))
            body: Any = cbody
            max_tokens = cbody.max_completion_tokens or cbody.max_tokens or DEFAULT_CHAT_MAX_TOKENS
        else:
            pbody, prompt = await d.offload(len(raw), functools.partial(_parse_completion, raw))
            body = pbody
            max_tokens = pbody.max_tokens or DEFAULT_MAX_TOKENS
        hdr_deadline = request.headers.get("x-ttft-deadline-ms")
        if hdr_deadline is not None and body.ttft_deadline_ms is None:
            body.ttft_deadline_ms = header_deadline_ms(hdr_deadline)
        if body.slo_class is None and request.headers.get("x-slo-class"):
            body.slo_class = request.headers["x-slo-class"]
        greq = to_generate_request(
            body, prompt, max_tokens, session_id=_session(request, body), request_id=""
        )
        greq.model = pool.canonical(greq.model)
        op = "chat" if chat else "text_completion"
        trace = tracing.start(d.tracing, request.headers, api, op, received_pc)
        prep = await d.prepare_async(
            greq,
            client_region=request.headers.get("x-client-region", ""),
            client_zone=request.headers.get("x-client-zone", ""),
            received=received,
            tenant=http_tenant(request, fe.tenant_header),
        )
        prep = tracing.prepared(prep, trace)
    except PreheatError as e:
        if trace is not None:
            trace.refused(e.code.value, e.message, time.perf_counter())
        metrics.observe_outcome(api, RouterOutcome.of_error(e.code))
        log.info("request_refused", extra=fields(code=e.code.value, reason=e.message))
        return error_response(e)

    rid = prep.info.request_id
    model = body.model or pool.spec.model or (fe.models() or [""])[0]
    created = int(time.time())
    obj_id = ("chatcmpl-" if chat else "cmpl-") + rid
    stats = StreamStats()
    cache = _cache_lookup(request, d, chat, body, prep)
    if cache.answer is not None:  # answered by the router: no worker, no quota, no tokens
        return await _answer_hit(request, chat, body, body.stream, model, prep, cache, trace)
    with request_context(rid):
        stream = d.generate(
            prep,
            api=api,
            stats=stats,
            timeout_s=fe.limits.request_timeout_s or None,
            buffered=not body.stream,
        )
        async with (
            contextlib.aclosing(stream),
            contextlib.aclosing(coalesce(stream, fe.coalesce)) as chunks,
        ):
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                first = inference_pb2.GenerateResponse(
                    request_id=rid, finish_reason=inference_pb2.FINISH_REASON_ABORT
                )
            except PreheatError as e:
                log.info("request_failed", extra=fields(code=e.code.value, reason=e.message))
                return error_response(e)
            if body.stream:
                return await _sse(
                    request, chat, body, obj_id, model, created, first, chunks, stats, cache
                )
            return await _whole(chat, obj_id, model, created, first, chunks, stats, cache)


async def _passthrough(
    request: web.Request,
    fe: HttpFrontend,
    pool: Pool,
    raw: bytes,
    chat: bool,
    received: float,
    received_pc: float,
) -> web.StreamResponse:
    """The request, passed through to a worker's OpenAI API (router/frontend/passthrough.py)."""
    pt = pool.passthrough
    d = pool.dispatcher
    op = "chat" if chat else "text_completion"
    trace = tracing.start(pool.dispatcher.tracing, request.headers, "openai", op, received_pc)
    try:
        prep, body, stream = await pt.prepare(
            request,
            raw,
            chat,
            received,
            http_tenant(request, fe.tenant_header),
            rename=pool.canonical,
        )
        prep = tracing.prepared(prep, trace)
    except PreheatError as e:
        if trace is not None:
            trace.refused(e.code.value, e.message, time.perf_counter())
        pool.metrics.observe_outcome("openai", RouterOutcome.of_error(e.code))
        log.info("request_refused", extra=fields(code=e.code.value, reason=e.message))
        return error_response(e)
    cache = CacheUse()
    if d.config.traffic.cache.enabled:
        data = await d.offload(len(body), functools.partial(json.loads, body))
        params = passthrough_cache.cache_params(data, chat)
        if params is not None:
            cache = _lookup(request, d, chat, d.config.model or prep.request.model, params, prep)
        if cache.answer is not None:  # answered by the router: no worker, no quota, no tokens
            wants = passthrough_cache.stream_wants(data)
            model = str(data.get("model") or prep.request.model)
            return await _answer_hit(request, chat, wants, stream, model, prep, cache, trace)
    stats = StreamStats()
    with request_context(prep.info.request_id):
        try:
            resp = await pt.proxy(request, prep, body, stream, request.path, stats=stats)
        except PreheatError as e:
            log.info("request_failed", extra=fields(code=e.code.value, reason=e.message))
            return error_response(e)
    if cache.result and isinstance(resp, web.Response):  # a whole answer: stored if it can be
        if resp.status == 200 and isinstance(resp.body, bytes):
            answer = passthrough_cache.stored_answer(resp.body, chat)
            if answer is not None:
                cache.store(
                    answer.text,
                    answer.finish_reason,
                    answer.prompt_tokens,
                    answer.completion_tokens,
                    stats=stats,
                )
        resp.headers.update(_cache_headers(cache))
    return resp


def _choice(chat: bool, text: str, finish: str | None, first: bool) -> dict[str, Any]:
    if chat:
        delta: dict[str, Any] = {"content": text}
        if first:
            delta["role"] = "assistant"
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}


async def _sse(
    request: web.Request,
    chat: bool,
    body: Any,
    obj_id: str,
    model: str,
    created: int,
    first: inference_pb2.GenerateResponse,
    chunks: AsyncIterator[inference_pb2.GenerateResponse],
    stats: StreamStats | None = None,
    cache: CacheUse | None = None,
) -> web.StreamResponse:
    base = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    base |= _degraded_headers(stats) | _cache_headers(cache)
    resp = web.StreamResponse(headers=_headers(first, base))
    texts: list[str] = []
    last_finish = 0
    await resp.prepare(request)
    kind = "chat.completion.chunk" if chat else "text_completion"

    async def send(obj: dict[str, Any]) -> None:
        await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

    usage: dict[str, Any] | None = None
    is_first = True
    chunk: inference_pb2.GenerateResponse | None = first
    try:
        while chunk is not None:
            aborted = chunk.finish_reason == inference_pb2.FINISH_REASON_ABORT
            if aborted and not chunk.text:
                raise _aborted()
            finish = _FINISH.get(chunk.finish_reason)
            if chunk.HasField("usage"):
                usage = _usage(chunk.usage)
            event: dict[str, Any] = {
                "id": obj_id,
                "object": kind,
                "created": created,
                "model": model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [_choice(chat, chunk.text, finish, is_first)],
            }
            if body.include_usage:  # OpenAI: null on every chunk but the last
                event["usage"] = None
            if (extra := _preheat(chunk)) is not None:
                event["preheat"] = extra
            if finish is not None and (deg := _degraded(stats)) is not None:
                event.setdefault("preheat", {})["degraded"] = deg
            if finish is not None and cache is not None and cache.result:
                event.setdefault("preheat", {})["cache"] = cache.result
            texts.append(chunk.text)
            last_finish = chunk.finish_reason
            await send(event)
            if aborted:
                raise _aborted()
            is_first = False
            chunk = await anext(chunks, None)
        if cache is not None and usage is not None:
            cache.store(
                "".join(texts),
                last_finish,
                usage["prompt_tokens"],
                usage["completion_tokens"],
                stats=stats,
            )
        if body.include_usage:
            await send(
                {
                    "id": obj_id,
                    "object": kind,
                    "created": created,
                    "model": model,
                    "system_fingerprint": SYSTEM_FINGERPRINT,
                    "choices": [],
                    "usage": usage,
                }
            )
    except PreheatError as e:
        log.info("request_failed", extra=fields(code=e.code.value, reason=e.message))
        await send(openai_error(e)[1])
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _whole(
    chat: bool,
    obj_id: str,
    model: str,
    created: int,
    first: inference_pb2.GenerateResponse,
    chunks: AsyncIterator[inference_pb2.GenerateResponse],
    stats: StreamStats | None = None,
    cache: CacheUse | None = None,
) -> web.Response:
    parts = [first.text]
    last = first
    try:
        async for c in chunks:
            parts.append(c.text)
            last = c
    except PreheatError as e:
        log.info("request_failed", extra=fields(code=e.code.value, reason=e.message))
        return error_response(e)
    if last.finish_reason == inference_pb2.FINISH_REASON_ABORT:
        return error_response(_aborted())
    text = "".join(parts)
    finish = _FINISH.get(last.finish_reason, "stop")
    choice: dict[str, Any]
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    whole: dict[str, Any] = {
        "id": obj_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [choice],
        "usage": _usage(last.usage if last.HasField("usage") else None),
    }
    if (extra := _preheat(last)) is not None:
        whole["preheat"] = extra
    if (deg := _degraded(stats)) is not None:
        whole.setdefault("preheat", {})["degraded"] = deg
    if cache is not None:
        if cache.result:
            whole.setdefault("preheat", {})["cache"] = cache.result
        if last.HasField("usage"):
            u = last.usage
            cache.store(text, last.finish_reason, u.prompt_tokens, u.completion_tokens, stats=stats)
    headers = _degraded_headers(stats) | _cache_headers(cache)
    return web.json_response(whole, headers=_headers(first, headers))


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, chat=False)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _handle(request, chat=True)


async def _models(request: web.Request) -> web.Response:
    fe = request.app[FRONTEND_KEY]
    data = [
        model_object(name, pool.model_len(), root=pool.spec.model or name)
        for name, pool in fe.pools.models()
    ]
    return web.json_response({"object": "list", "data": data})


async def _metrics(request: web.Request) -> web.Response:
    """The registries in the format the scraper asks for: OpenMetrics (which carries the
    TTFT and e2e histograms' trace exemplars when tracing is on) when its Accept header
    names it, as Prometheus's does, else the Prometheus text format."""
    fe = request.app[FRONTEND_KEY]
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    if not content_type.startswith("application/openmetrics-text"):
        body = b"".join(encode(r) for r in fe.registries)
    else:  # one OpenMetrics document: one "# EOF" at its end
        eof = b"# EOF\n"
        body = b"".join(encode(r).removesuffix(eof) for r in fe.registries) + eof
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _ready(request: web.Request) -> web.Response:
    ok = request.app[FRONTEND_KEY].ready()
    body = json.dumps({"ready": ok}) + "\n"
    return web.Response(status=200 if ok else 503, text=body, content_type="application/json")


def build_app(frontend: HttpFrontend) -> web.Application:
    auth = [] if frontend.api_keys is None else [api_key_middleware(frontend.api_keys)]
    app = web.Application(
        middlewares=[json_errors, *auth], client_max_size=frontend.limits.max_body_bytes
    )
    app[FRONTEND_KEY] = frontend

    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/ready", _ready)
    add_vllm_routes(
        app,
        VllmRoutes(
            models=frontend.models,
            ready=frontend.ready,
            tokenizer=lambda: frontend.pools.tokenizer,
            max_model_len=frontend.max_model_len,
            chat_text=lambda data, agp, cfm: frontend.ids.chat_text(
                data, add_generation_prompt=agp, continue_final_message=cfm
            ),
            model_len=frontend.model_len,
            model_root=frontend.model_root,
        ),
    )
    return app


async def start_http(frontend: HttpFrontend, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Starts the app on ``host:port`` (0: ephemeral); returns the runner and the bound port.

    ``handler_cancellation``: a client that disconnects cancels its handler, which closes
    the upstream stream, so the worker stops generating for nobody."""
    runner = JsonErrorAppRunner(
        build_app(frontend),
        access_log=None,
        handle_signals=False,
        handler_cancellation=True,
        keepalive_timeout=frontend.limits.header_timeout_s,
    )
    return runner, await serve(runner, host, port)
