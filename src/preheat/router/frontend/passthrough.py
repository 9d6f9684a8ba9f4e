"""OpenAI passthrough: the router forwards a client's OpenAI request to the chosen worker's
own OpenAI HTTP API (``WorkerStatus.openai_port``, vLLM's serving layer) and its answer back.

Pools are homogeneous: when the pool's workers serve OpenAI HTTP, ``/v1/chat/completions``
and ``/v1/completions`` take this path, every parameter is the engine's to validate (tools,
``response_format``, logprobs, ...) and the worker's status code and body, error or not, go
back unchanged. When they do not (sim workers), the gRPC path with its own schema applies.

The OpenAI parameters vLLM has no field for (``oai_params.VLLM_IGNORED``: ``store``,
``audio``, ``functions``, ``best_of``, ...) are refused with 400 ``unsupported_parameter``
when their value would change something: vLLM would answer 200 without applying them.

The router reads of the body only what routing needs (:func:`routing_fields`): the model,
the session (header ``x-session-id``, else ``session_id``, ``prompt_cache_key`` or ``user``),
``slo_class``/``ttft_deadline_ms`` (or their headers), the output limit, ``stream``, and the
prompt's token ids: for chat, the messages rendered with the model's chat template
(:mod:`.chat_template`) and tokenized without added special tokens, as vLLM does; for
completions, the (first) prompt with the tokenizer's special tokens unless the body says
``add_special_tokens: false``. The prefix block hashes it routes on are those of the ids the
engine caches. A request it can judge alone is answered by the router in OpenAI's shape: an
unknown model (404 ``model_not_found``), a prompt over the context window (400
``context_length_exceeded``), admission, a tenant over its quota (``Dispatcher.charge``, as
on the other paths) or its fair share (429 ``rate_limit_exceeded``), no endpoint (503 with
``Retry-After``), a body that is not a JSON object or a template that refuses the messages
(400). A response-cache hit is answered before this module is reached
(``http.py``, :mod:`.passthrough_cache`). The class's degradation ladder applies as on the
other paths (``Dispatcher._admit``/``decide`` with the request's stats): a clamp caps the
body's ``max_tokens`` (:func:`clamp_body`), a reject is a 429 before any worker is asked;
the step is in ``X-Preheat-Degraded`` (not in a ``preheat`` block: the body stays vLLM's).
The fallback-pool step sends the body (:func:`fallback_body`) to the fallback pool's
passthrough when that pool's workers serve OpenAI HTTP too; else the next step.

The body goes upstream as it came (re-encoded only to set ``cache_salt`` to the tenant's:
the router's word on the tenant, never the client's; and ``priority`` to the class's).
Bookkeeping is the gRPC path's (in flight, first token for the observed TTFT and admission,
decoding counts, histograms, ``request_done`` log); the stream is parsed only as far as
that needs: where events end, the first one (the first token), and the one that carries
``usage`` (cached tokens).

Failures: before anything reached the client (connect refused, a 503 from a draining or
standby worker, a 502 or 504, no first event within ``first_token_timeout_s``, a broken
non-streaming answer) the request goes to the next-best endpoint, as on the gRPC path. Once
events flowed, a broken upstream ends the client's stream with an error event and
``data: [DONE]`` (as vLLM ends a failed stream), never a silent truncation; events are
forwarded whole, so the error event never lands inside a half-written one. A
``finish_reason`` that is not OpenAI's (vLLM's ``"abort"``: a draining worker's engine
aborted the request) is such a failure too (:mod:`.finish_reasons`): retried when nothing
was passed on yet, else the events before it and then the error event. A client that
disconnects cancels its handler, which closes the upstream connection: vLLM aborts the
request. Streaming is back-pressured (the next upstream read waits for the client's
write); with ``--coalesce-tokens N`` above 1, events after the first are merged into one
write of up to N events or ``--coalesce-ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.routing.plugins.prefix import new_tokens
from preheat.core.routing.types import Endpoint, RouteDecision
from preheat.core.validation import GenerateSpec, check_generate
from preheat.process.logs import fields
from preheat.proto.preheat.v1 import inference_pb2
from preheat.router.frontend.chat_template import ChatTemplate, TemplateError
from preheat.router.frontend.dispatch import (
    DEGRADED_HEADER,
    Dispatcher,
    Prepared,
    StreamStats,
    admission_passed,
)
from preheat.router.frontend.errors import openai_error
from preheat.router.frontend.finish_reasons import aborted_message, foreign_finish
from preheat.router.frontend.metrics import RouterOutcome
from preheat.router.frontend.oai_params import (
    CHAT,
    COMPLETIONS,
    UNSUPPORTED,
    unsupported_message,
    vllm_unsupported,
)
from preheat.router.frontend.openai_schema import (
    DEFAULT_CHAT_MAX_TOKENS,
    DEFAULT_MAX_TOKENS,
    BodyError,
    ChatMessage,
    flatten_chat,
    header_deadline_ms,
)
from preheat.router.frontend.quotas import Grant, RateLimited
from preheat.router.frontend.tokenizer import (
    PIECE_CHARS,
    HFPromptTokenizer,
    PromptTokenizer,
    TooManyTokens,
    encode_within,
    load_tokenizer,
)
from preheat.wire.coalesce import CoalesceConfig

log = logging.getLogger("preheat.router")
perf_counter = time.perf_counter

# the worker could not take it (a draining or standby worker's 503, a gateway's 502/504):
# the next endpoint; a 500 is the worker's answer to this request and is passed on
RETRY_STATUSES = frozenset({502, 503, 504})
MAX_ERROR_BODY = 1 << 20  # a worker's error body is passed on up to this
MAX_WHOLE_BODY = 256 << 20  # a non-streaming answer (logprobs can be large)
DONE = b"data: [DONE]\n\n"
_ERROR_EVENT = b'data: {"error"'
_USAGE = b'"usage":{'
WORKER_HEADER = "X-Preheat-Worker"


def openai_base(ep: Endpoint) -> str:
    """``http://HOST:PORT`` of the endpoint's OpenAI API (the host of its gRPC address)."""
    host = ep.address.rsplit(":", 1)[0] if ":" in ep.address else ep.address
    return f"http://{host}:{ep.openai_port}"


# --- what routing reads of the body ---------------------------------------------------------
@dataclass(frozen=True)
class RoutingFields:
    """What the router reads of an OpenAI body (the rest is the engine's)."""

    model: str
    session_id: str
    slo_class: str
    ttft_deadline_ms: int
    max_tokens: int | None  # the client's output limit; None: unset
    stream: bool
    tenant_salt_differs: bool  # the body's cache_salt is not the tenant's: re-encode


def _opt_str(data: Mapping[str, Any], key: str) -> str:
    v = data.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise BodyError(f"invalid request: {key}: must be a string", key)
    return v


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    v = data.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def routing_fields(
    data: Mapping[str, Any], headers: Mapping[str, str], tenant: str
) -> RoutingFields:
    """Reads the routing fields of a parsed body; raises ``BodyError`` for those it cannot
    read (the rest is left to the engine)."""
    model = _opt_str(data, "model")
    session = (
        headers.get("x-session-id")
        or _opt_str(data, "session_id")
        or _opt_str(data, "prompt_cache_key")
        or _opt_str(data, "user")
    )
    slo = _opt_str(data, "slo_class") or headers.get("x-slo-class", "")
    deadline = data.get("ttft_deadline_ms")
    if deadline is None and headers.get("x-ttft-deadline-ms") is not None:
        deadline = header_deadline_ms(headers["x-ttft-deadline-ms"])
    if deadline is not None and not (
        isinstance(deadline, int) and not isinstance(deadline, bool) and 0 <= deadline < 2**32
    ):
        raise BodyError(
            "invalid request: ttft_deadline_ms: must be an integer in [0, 4294967295]",
            "ttft_deadline_ms",
        )
    salt = data.get("cache_salt")
    return RoutingFields(
        model=model,
        session_id=str(session),
        slo_class=slo,
        ttft_deadline_ms=int(deadline or 0),
        max_tokens=_opt_int(data, "max_completion_tokens") or _opt_int(data, "max_tokens"),
        stream=data.get("stream") is True,
        tenant_salt_differs=(salt or "") != tenant or ("cache_salt" in data and not tenant),
    )


# --- the templated prompt's token ids ---------------------------------------------------------
class PromptIds:
    """Token ids of a request's prompt as the engine will see them (see the module
    docstring); the chat template is loaded from the tokenizer's folder by :meth:`load`
    (the router calls it as it starts), else on first use."""

    def __init__(self, tokenizer: PromptTokenizer) -> None:
        self.tokenizer = tokenizer
        self._template: tuple[ChatTemplate | None] | None = None

    def load(self) -> None:
        """Loads the tokenizer and the chat template and compiles the template now (blocking:
        run it off the event loop). Raises :class:`TokenizerLoadError` when the tokenizer
        cannot be loaded; a template that does not compile is logged and left to each chat
        request to report (completions still work)."""
        load_tokenizer(self.tokenizer)
        template = self.template
        if template is None:
            return
        try:
            template.default_openai_content  # noqa: B018 - compiles the default template
        except TemplateError as e:
            log.warning("chat_template_invalid", extra=fields(error=str(e)))

    @property
    def template(self) -> ChatTemplate | None:
        if self._template is None:
            self._template = (_load_template(self.tokenizer),)
        return self._template[0]

    def chat_text(
        self,
        data: Mapping[str, Any],
        *,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool | None = None,
    ) -> str:
        """The templated prompt of a chat body; raises ``BodyError``."""
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BodyError("invalid request: messages: must be a non-empty list", "messages")
        tools = data.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise BodyError("invalid request: tools: must be a list", "tools")
        agp = data.get("add_generation_prompt", True)
        cfm = data.get("continue_final_message", False)
        agp = agp if add_generation_prompt is None else add_generation_prompt
        cfm = cfm if continue_final_message is None else continue_final_message
        kwargs = data.get("chat_template_kwargs")
        kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
        effort = data.get("reasoning_effort")
        if effort is not None:  # as vLLM's build_chat_params passes it
            kwargs["reasoning_effort"] = effort
            kwargs.setdefault("enable_thinking", effort != "none")
        template = self.template
        if template is None:  # no template (the sim tokenizer): the gRPC path's lines
            return flatten_chat([_plain_message(m) for m in messages], generation_prompt=bool(agp))
        try:
            return template.render(
                messages,
                tools=tools,  # vLLM passes them with tool_choice "none" too (its default)
                add_generation_prompt=bool(agp),
                continue_final_message=bool(cfm),
                documents=data.get("documents"),
                extra=kwargs,
            )
        except TemplateError as e:
            raise BodyError(str(e), "messages") from None

    def completion_prompt(self, data: Mapping[str, Any]) -> str | list[int]:
        """The (first) prompt of a completions body: text or token ids."""
        p = data.get("prompt")
        if isinstance(p, list) and p and not isinstance(p[0], int):
            p = p[0]
        if isinstance(p, str) and p:
            return p
        if isinstance(p, list) and p and all(isinstance(t, int) for t in p):
            return list(p)
        raise BodyError(
            "invalid request: prompt: must be a non-empty string, list of strings or of token ids",
            "prompt",
        )

    def encode(self, text: str, add_special_tokens: bool, limit: int) -> list[int]:
        """The ids of ``text``; ``TooManyTokens`` past ``limit`` (bounded work)."""
        tok = self.tokenizer
        tokenize = getattr(tok, "tokenize", None)
        if not add_special_tokens or tokenize is None:
            return encode_within(tok, text, limit)
        if len(text) > PIECE_CHARS:
            encode_within(tok, text, limit)  # stops early on a prompt far over the window
        ids: list[int] = tokenize(text, True)[0]
        if len(ids) > limit:
            raise TooManyTokens(len(ids), limit)
        return ids


def _plain_message(m: Any) -> ChatMessage:
    """A message for the role-tagged lines: its role and text parts (for routing only: what
    it cannot read is left to the engine to judge)."""
    if not isinstance(m, dict):
        return ChatMessage(role="user", content="")
    role = m.get("role") if m.get("role") in _ROLES else "user"
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ChatMessage(role=role, content=content if isinstance(content, str) else "")


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _load_template(tokenizer: PromptTokenizer) -> ChatTemplate | None:
    from pathlib import Path

    if not isinstance(tokenizer, HFPromptTokenizer):
        return None
    p = Path(tokenizer.path)
    return ChatTemplate.from_dir(p.parent if p.is_file() else p)


# --- the proxy ------------------------------------------------------------------------------
class _Retry(Exception):
    """The worker could not take the request and nothing was sent: try the next one."""

    def __init__(self, detail: str, *, failed: bool = True) -> None:
        super().__init__(detail)
        self.failed = failed


class _Broken(Exception):
    """The worker's stream broke after events were passed on."""


@dataclass
class _Attempt:
    """One attempt's state, shared by the proxy loop and the stream it reads."""

    first: bool = False  # its first token event was passed on (store.first_token called)
    broken: bool = False  # its stream ended with the router's error event


class Passthrough:
    """One per router: the HTTP client to the workers' OpenAI APIs and the request path."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        coalesce: CoalesceConfig,
        request_timeout_s: float | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.coalesce = coalesce
        self.request_timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._ids: PromptIds | None = None
        # another pool's passthrough by pool name (the ladder's fallback-pool step); set by
        # the router's pool set, None: no other pools
        self.fallback: Callable[[str], Passthrough | None] | None = None

    def active(self) -> bool:
        """Whether the pool's workers serve OpenAI HTTP (the routable ones' word, else any
        that answered Status; False while none has)."""
        return bool(self.dispatcher.store.serves_openai())

    async def wait_active(self) -> bool:
        """:meth:`active`, once a worker has said: while discovered workers have not
        answered Status yet and none ever did (a router just started beside starting
        workers) the request waits for one, as it would wait in the queue for a routable
        endpoint (``queue_timeout_s``), then is refused (UNAVAILABLE, 503 + ``Retry-After``);
        while the router drains, False (the gRPC path answers with the drain's refusal). A
        pool scaled to zero keeps its workers' last word (the store remembers it)."""
        d = self.dispatcher
        store = d.store
        said = store.serves_openai()
        if said is not None:
            return said
        loop = asyncio.get_running_loop()
        until = loop.time() + d.config.queue_timeout_s
        while said is None and not d.draining and (left := until - loop.time()) > 0:
            await store.wait_changed(left)
            said = store.serves_openai()
        if said is None and not d.draining:
            raise PreheatError(
                ErrorCode.UNAVAILABLE,
                f"no routable endpoint within {d.config.queue_timeout_s:g}s: pool "
                f"{d.pool!r}: no worker has answered Status yet",
                retry_after_s=1.0,
            )
        return bool(said)

    @property
    def ids(self) -> PromptIds:
        if self._ids is None or self._ids.tokenizer is not self.dispatcher.tokenizer:
            self._ids = PromptIds(self.dispatcher.tokenizer)
        return self._ids

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),  # bytes pass as they are
            )
        return self._session

    async def close(self) -> None:
        s, self._session = self._session, None
        if s is not None:
            await s.close()

    # -- prepare --
    def _prepare_sync(
        self, raw: bytes, chat: bool, headers: Mapping[str, str], tenant: str
    ) -> tuple[dict[str, Any], RoutingFields, list[int] | TooManyTokens]:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise BodyError(f"the request body is not valid JSON: {str(e)[:200]}", None) from None
        if not isinstance(data, dict):
            raise BodyError("the request body must be a JSON object", None)
        endpoint = "chat" if chat else "completions"
        refused = vllm_unsupported(CHAT if chat else COMPLETIONS, endpoint, data)
        if refused:  # vLLM would answer 200 without applying them
            raise BodyError(unsupported_message(refused), refused[0][0], UNSUPPORTED)
        rf = routing_fields(data, headers, tenant)
        limit = self.dispatcher.pool_limits(rf.model).max_model_len
        try:
            if chat:
                ids = self.ids.encode(self.ids.chat_text(data), False, limit)
            else:
                prompt = self.ids.completion_prompt(data)
                if isinstance(prompt, list):
                    ids = prompt
                else:
                    add = data.get("add_special_tokens", True) is not False
                    ids = self.ids.encode(prompt, add, limit)
        except TooManyTokens as e:
            return data, rf, e
        except BodyError:
            raise
        except Exception as e:
            log.warning("tokenize_failed", exc_info=True)
            raise BodyError("the prompt could not be tokenized", None) from e
        return data, rf, ids

    async def prepare(
        self,
        request: web.Request,
        raw: bytes,
        chat: bool,
        received: float,
        tenant: str,
        *,
        rename: Callable[[str], str] | None = None,
    ) -> tuple[Prepared, bytes, bool]:
        """The request ready to route, the body to send upstream, and whether it streams.
        ``rename``: the model name the workers serve for the one the body gives (a pool's
        alias); a renamed body goes upstream with the workers' name."""
        d = self.dispatcher
        headers = {k.lower(): v for k, v in request.headers.items()}
        data, rf, ids = await d.offload(
            len(raw), functools.partial(self._prepare_sync, raw, chat, headers, tenant)
        )
        renamed = False
        if rename is not None and rf.model and (upstream := rename(rf.model)) != rf.model:
            data["model"] = upstream
            rf = dataclasses.replace(rf, model=upstream)
            renamed = True
        limits = d.pool_limits(rf.model)
        if isinstance(ids, TooManyTokens):
            check_generate(  # the model's error first, else the context window's
                GenerateSpec(
                    model=rf.model,
                    prompt="(counted: over the window)",
                    prompt_token_ids=None,
                    num_prompt_tokens=ids.counted,
                    max_tokens=rf.max_tokens or 1,
                    prompt_tokens_at_least=True,
                ),
                limits,
            )
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, "the prompt is too long")
        default = DEFAULT_CHAT_MAX_TOKENS if chat else DEFAULT_MAX_TOKENS
        max_tokens = rf.max_tokens or max(1, min(default, limits.max_model_len - len(ids)))
        greq = inference_pb2.GenerateRequest(
            model=rf.model,
            sampling=inference_pb2.SamplingParams(max_tokens=max_tokens),
            session_id=rf.session_id,
            ttft_deadline_ms=rf.ttft_deadline_ms,
            slo_class=rf.slo_class,
        )
        greq.prompt_token_ids.ids.extend(ids)
        prep = await d.prepare_async(
            greq,
            client_region=request.headers.get("x-client-region", ""),
            client_zone=request.headers.get("x-client-zone", ""),
            received=received,
            tenant=tenant,
        )
        if rf.tenant_salt_differs:
            if tenant:
                data["cache_salt"] = tenant
            else:
                data.pop("cache_salt", None)
        reprioritized = False
        if prep.klass is not None and d.config.traffic.sets_priority:
            # the class's priority, never the client's own (as on the gRPC path): vLLM runs
            # the request at it, and the queue term counts by it (``core.routing``)
            reprioritized = data.get("priority") != prep.info.priority
            data["priority"] = prep.info.priority
        if rf.tenant_salt_differs or renamed or reprioritized:
            raw = json.dumps(data, ensure_ascii=False).encode()
        return prep, raw, rf.stream

    # -- proxy --
    async def proxy(
        self,
        request: web.Request,
        prep: Prepared,
        body: bytes,
        stream: bool,
        path: str,
        *,
        stats: StreamStats | None = None,
    ) -> web.StreamResponse:
        """Admits, routes and forwards one prepared request (see the module docstring);
        ``stats``: what it observed (the ladder's step among them), for the caller."""
        d = self.dispatcher
        api = "openai"
        loop = asyncio.get_running_loop()
        deadline = prep.received + self.request_timeout_s if self.request_timeout_s else None
        st = stats if stats is not None else StreamStats()
        tried: set[str] = set()
        outcome = RouterOutcome.ERROR
        tr = prep.trace
        error = ""
        grant: Grant | None = None
        fallback: tuple[Passthrough, Prepared] | None = None
        try:
            grant = d.charge(prep, api)  # the tenant's quota, as on the gRPC and HTTP front
            fallback = self._fallback_for(prep)
            if fallback is None:  # its fair share, the pool's bound (or the class's ladder)
                d._admit(prep, st)
        except RateLimited:
            raise  # counted, logged and traced by charge()
        except PreheatError as e:
            d.admission_refused(api, prep, e)
            raise
        admission_passed(prep)
        if fallback is not None:  # the ladder's first step: another pool serves it
            fb, fb_prep = fallback
            fb_body = await d.offload(len(body), functools.partial(fallback_body, body, fb_prep))
            fb_prep = d._note_fallback(prep, st, fb.dispatcher.pool, fb_prep)
            try:
                return await fb.proxy(request, fb_prep, fb_body, stream, path, stats=st)
            finally:
                d.settle(grant, prep, st.tokens)
        d.hold(prep)
        gauge = d.metrics.in_flight.labels(*d.metrics.series)  # the one it leaves
        gauge.inc()
        ep: Endpoint | None = None
        att = _Attempt()
        clamped = False
        try:
            while True:
                snap = d.store.snapshot()
                plain = frozenset(e.id for e in snap if not e.openai_port)
                decision = await d.decide(
                    prep, exclude=frozenset(tried) | plain, deadline=deadline, stats=st
                )
                if st.clamped_from and not clamped:  # the ladder's clamp: vLLM is told too
                    n = prep.request.sampling.max_tokens
                    body = await d.offload(len(body), functools.partial(clamp_body, body, n))
                    clamped = True
                ep = decision.endpoint
                assert ep is not None
                st.endpoint, st.decision = ep, decision
                st.attempts += 1
                st.routed_at = perf_counter()
                att = _Attempt()
                d.metrics.overhead.observe(st.routed_at - prep.received_pc)
                d._log_routed(prep, decision, st.attempts)
                st.held_tokens = new_tokens(prep.info, decision.cached_blocks)
                d.store.request_started(ep.id, prep.info.priority, st.held_tokens)
                if tr is not None:  # its traceparent goes out in the request's headers
                    tr.upstream(ep.id, ep.address, st.routed_at)
                settled = False  # the endpoint's in-flight count was given back
                try:
                    if stream:
                        resp = await self._stream(request, prep, body, path, ep, st, att, deadline)
                    else:
                        resp = await self._whole(prep, body, path, ep, st, deadline)
                    if att.broken:
                        outcome = RouterOutcome.FAILED
                    elif resp.status < 400:
                        outcome = RouterOutcome.OK
                        d._on_done(prep, st, ep, decision)
                    else:
                        outcome = (
                            RouterOutcome.INVALID if resp.status < 500 else RouterOutcome.ERROR
                        )
                    return resp
                except _Retry as e:
                    settled = True
                    if e.failed:
                        d.store.request_failed(ep.id, prep.info.priority, st.held_tokens)
                    else:
                        d.store.request_finished(ep.id, prep.info.priority, st.held_tokens)
                    retry = st.attempts <= d.config.max_retries and (
                        deadline is None or loop.time() < deadline
                    )
                    log.info(
                        "upstream_failed",
                        extra=fields(worker=ep.id, detail=str(e), retrying=retry),
                    )
                    if tr is not None:
                        tr.attempt_failed("UNAVAILABLE", str(e), retry, perf_counter())
                    if not retry:
                        raise PreheatError(
                            ErrorCode.UNAVAILABLE,
                            f"worker {ep.id} could not take the request ({e}); "
                            "no other endpoint to try",
                            retry_after_s=1.0,
                        ) from None
                    tried.add(ep.id)
                    st.tokens, st.usage = 0, None
                    st.first_token_at = st.last_token_at = None
                    d.metrics.retries.labels(*d.metrics.series).inc()
                finally:
                    if att.first:
                        d.store.request_done(ep.id)
                    elif not settled:  # answered, refused, failed or cancelled before a token
                        d.store.request_finished(ep.id, prep.info.priority, st.held_tokens)
        except PreheatError as e:
            outcome = RouterOutcome.of_error(e.code)
            error = e.message
            raise
        except (asyncio.CancelledError, ConnectionError):
            outcome = RouterOutcome.CANCELLED
            raise
        finally:
            d.settle(grant, prep, st.tokens)
            d.release(prep)
            gauge.dec()
            d.metrics.observe_outcome(api, outcome, slo_class=prep.slo_class)
            if tr is not None:
                tr.end(outcome.value, perf_counter(), tokens=st.tokens, usage=st.usage, error=error)

    def _fallback_for(self, prep: Prepared) -> tuple[Passthrough, Prepared] | None:
        """The fallback pool's passthrough and the request prepared for it
        (``Dispatcher._fallback_for``: the class names one, this pool would miss the class's
        target and that pool would not), when that pool's workers serve OpenAI HTTP too;
        else None (the ladder's next step: an OpenAI body is not converted to a gRPC one)."""
        found = self.dispatcher._fallback_for(prep)
        if found is None:
            return None
        fb_d, fb_prep = found
        k = prep.klass
        assert k is not None
        fb = self.fallback(k.fallback_pool) if self.fallback is not None else None
        if fb is None or fb.dispatcher is not fb_d or not fb.active():
            log.info(
                "fallback_not_openai",
                extra=fields(slo_class=k.name, fallback_pool=k.fallback_pool),
            )
            return None
        return fb, fb_prep

    def _headers(self, prep: Prepared) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "X-Request-Id": prep.info.request_id}
        if prep.trace is not None:  # W3C trace context: vLLM's own tracing continues it
            headers.update(prep.trace.upstream_metadata)
        if prep.request.session_id:  # the worker counts its sessions (scale-down's cost)
            headers["X-Session-Id"] = prep.request.session_id
        return headers

    async def _post(
        self, prep: Prepared, body: bytes, path: str, ep: Endpoint, within: float | None
    ) -> aiohttp.ClientResponse:
        """Sends the request; the response once its headers came (``_Retry`` when the worker
        cannot be reached or answers that it cannot take it)."""
        url = openai_base(ep) + path
        try:
            async with asyncio.timeout(within):
                resp = await self.session().post(url, data=body, headers=self._headers(prep))
        except TimeoutError:
            raise _Retry(f"no answer within {within or 0:g}s") from None
        except aiohttp.ClientError as e:
            raise _Retry(f"{type(e).__name__}: {e}") from None
        if resp.status in RETRY_STATUSES:
            detail = await _read_some(resp)
            resp.close()
            text = detail[:200].decode("utf-8", "replace")
            raise _Retry(f"HTTP {resp.status}: {text}")
        return resp

    async def _whole(
        self,
        prep: Prepared,
        body: bytes,
        path: str,
        ep: Endpoint,
        st: StreamStats,
        deadline: float | None,
    ) -> web.Response:
        loop = asyncio.get_running_loop()
        within = None if deadline is None else max(0.001, deadline - loop.time())
        resp = await self._post(prep, body, path, ep, within)
        try:
            try:
                async with asyncio.timeout(
                    None if deadline is None else max(0.001, deadline - loop.time())
                ):
                    data = await resp.content.read(MAX_WHOLE_BODY + 1)
                    if len(data) > MAX_WHOLE_BODY:
                        raise _Retry("answer over the router's limit", failed=False)
            except TimeoutError:
                raise PreheatError(
                    ErrorCode.DEADLINE_EXCEEDED, "the request timed out in the router"
                ) from None
            except aiohttp.ClientError as e:
                raise _Retry(f"the answer broke off ({type(e).__name__})") from None
        finally:
            resp.close()
        if resp.status == 200:
            if (bad := foreign_finish(data)) is not None:
                raise _Retry(aborted_message(bad[1]))
            _read_usage(data, st)
        return web.Response(
            status=resp.status,
            body=data,
            headers=_pass_headers(resp, prep, ep, st),
        )

    async def _stream(
        self,
        request: web.Request,
        prep: Prepared,
        body: bytes,
        path: str,
        ep: Endpoint,
        st: StreamStats,
        att: _Attempt,
        deadline: float | None,
    ) -> web.StreamResponse:
        d = self.dispatcher
        routed = st.routed_at if st.routed_at is not None else perf_counter()
        ft = d.config.first_token_timeout_s or None
        resp = await self._post(prep, body, path, ep, ft)
        try:
            if resp.status != 200 or not resp.content_type.startswith("text/event-stream"):
                data = await _read_some(resp)
                return web.Response(
                    status=resp.status, body=data, headers=_pass_headers(resp, prep, ep, st)
                )
            content = resp.content
            buf = b""
            # the first whole event, within the first-token timeout: else the next endpoint
            try:
                left = None if ft is None else max(0.0, ft - (perf_counter() - routed))
                async with asyncio.timeout(left):
                    while (end := buf.rfind(b"\n\n")) < 0:
                        chunk = await content.readany()
                        if not chunk:
                            raise _Retry("the stream ended before its first event")
                        buf += chunk
            except TimeoutError:
                raise _Retry(f"no first event within {ft:g}s (first-token timeout)") from None
            except aiohttp.ClientError as e:
                raise _Retry(f"the stream broke before its first event ({e})") from None
            ended: str | None = None  # a foreign finish_reason ends it: the error event
            if (bad := foreign_finish(buf[: end + 2])) is not None:
                if bad[0] == 0:  # nothing to pass on: the next endpoint
                    raise _Retry(aborted_message(bad[1]))
                end, ended = bad[0] - 2, aborted_message(bad[1])
            out = web.StreamResponse(
                status=200,
                headers={
                    **_pass_headers(resp, prep, ep, st),
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache",
                },
            )
            await out.prepare(request)
            ready, buf = buf[: end + 2], buf[end + 2 :]
            now = perf_counter()
            st.first_token_at = st.last_token_at = now
            is_token = not ready.startswith(_ERROR_EVENT)
            if is_token:
                d.store.token(ep.id)  # a step boundary of its engine (the step clock)
            decision = st.decision
            assert decision is not None
            try:
                await out.write(ready)
            finally:
                if is_token:
                    att.first = True
                    d._on_first_token(prep, st, ep, decision, now)
            att.broken = await self._pump(
                out, content, buf, ready, st, ep, decision, deadline, ended
            )
            return out
        finally:
            resp.close()

    async def _pump(
        self,
        out: web.StreamResponse,
        content: aiohttp.StreamReader,
        buf: bytes,
        sent: bytes,
        st: StreamStats,
        ep: Endpoint,
        decision: RouteDecision,
        deadline: float | None,
        ended: str | None = None,
    ) -> bool:
        """Forwards whole events until the upstream's ``[DONE]``; a broken upstream, an event
        with a finish_reason that is not OpenAI's (``ended``: seen already), or the request's
        deadline (``--request-timeout-s``), ends the client's stream with an error event (and
        returns True)."""
        itl = self.dispatcher.metrics.itl.labels(*self.dispatcher.metrics.series, decision.reason)
        events = sent.count(b"\n\n")
        if _USAGE in sent:
            _read_usage_events(sent, st)
        tail = sent[-len(DONE) :]
        error: str | None = ended
        try:
            if error is None:
                async with asyncio.timeout_at(deadline):
                    tail, events = await self._forward(
                        out, content, buf, tail, events, st, itl, ep.id
                    )
        except _Broken as e:
            error = str(e)
        except TimeoutError:
            error = "the request timed out in the router (--request-timeout-s)"
        if st.usage is None:
            st.tokens = events - 1
        if error is None and tail != DONE:
            error = "the worker's stream ended before [DONE]"
        if error is not None:
            log.info("request_failed", extra=fields(worker=ep.id, reason=error))
            err = PreheatError(
                ErrorCode.UNAVAILABLE,
                f"worker {ep.id} failed after {events} events: {error}; not retried to avoid "
                "duplicate text",
            )
            payload = json.dumps(openai_error(err)[1], separators=(",", ":")).encode()
            await out.write(b"data: " + payload + b"\n\n" + DONE)
        await out.write_eof()
        return error is not None

    async def _forward(
        self,
        out: web.StreamResponse,
        content: aiohttp.StreamReader,
        buf: bytes,
        tail: bytes,
        events: int,
        st: StreamStats,
        itl: Any,
        endpoint_id: str,
    ) -> tuple[bytes, int]:
        """The forwarding loop of :meth:`_pump`; returns the last bytes written and the
        events counted; ``_Broken`` when the upstream broke. Every read that completes
        events is a step boundary of the worker's engine (``EndpointStore.token``)."""
        store = self.dispatcher.store
        n_max = self.coalesce.max_tokens
        delay = self.coalesce.max_delay_s
        pending = b""
        pending_n = 0
        pending_at = 0.0
        broken: str | None = None
        while True:
            try:
                if pending and n_max > 1:
                    left = max(0.0, pending_at + delay - perf_counter())
                    try:
                        async with asyncio.timeout(left):
                            chunk = await content.readany()
                    except TimeoutError:
                        chunk = None  # flush what is pending
                else:
                    chunk = await content.readany()
            except aiohttp.ClientError as e:
                broken = f"the worker's stream broke ({type(e).__name__})"
                chunk = b""
            if chunk:
                buf += chunk
                end = buf.rfind(b"\n\n")
                if end >= 0 and (bad := foreign_finish(buf[: end + 2])) is not None:
                    # pass on the events before it, then the error event
                    end, buf, broken, chunk = (
                        bad[0] - 2,
                        buf[: bad[0]],
                        aborted_message(bad[1]),
                        b"",
                    )
                if end >= 0:
                    ready, buf = buf[: end + 2], buf[end + 2 :]
                    n = ready.count(b"\n\n")
                    now = perf_counter()
                    gap_ms: float | None = None
                    if st.last_token_at is not None:
                        gap = (now - st.last_token_at) / n
                        for _ in range(n):
                            itl.observe(gap)
                        if _USAGE not in ready and DONE not in ready:  # tokens only
                            gap_ms = gap * 1e3
                    st.last_token_at = now
                    store.token(endpoint_id, gap_ms)
                    events += n
                    if _USAGE in ready:
                        _read_usage_events(ready, st)
                    if not pending:
                        pending_at = now
                    pending += ready
                    pending_n += n
            if pending and (chunk == b"" or chunk is None or pending_n >= n_max or n_max <= 1):
                await out.write(pending)
                tail = (tail + pending)[-len(DONE) :]
                pending, pending_n = b"", 0
            if chunk == b"":
                if broken is not None:
                    raise _Broken(broken)
                return tail, events


async def _read_some(resp: aiohttp.ClientResponse) -> bytes:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with asyncio.timeout(5):
            return await resp.content.read(MAX_ERROR_BODY)
    return b""


_PASS = ("Content-Type",)


def _pass_headers(
    resp: aiohttp.ClientResponse, prep: Prepared, ep: Endpoint, st: StreamStats
) -> dict[str, str]:
    h = {k: resp.headers[k] for k in _PASS if k in resp.headers}
    h["X-Request-Id"] = prep.info.request_id
    h[WORKER_HEADER] = ep.id
    if note := st.degraded_note():  # the ladder's step (the body stays vLLM's own)
        h[DEGRADED_HEADER] = note
    return h


def fallback_body(raw: bytes, fb_prep: Prepared) -> bytes:
    """The body for the fallback pool (the ladder's fallback-pool step): its model, and the
    priority it was prepared with there (when the body carries one or that pool's classes
    set it)."""
    data = json.loads(raw)
    data["model"] = fb_prep.request.model
    if "priority" in data or fb_prep.klass is not None:
        data["priority"] = fb_prep.info.priority
    return json.dumps(data, ensure_ascii=False).encode()


def clamp_body(raw: bytes, max_tokens: int) -> bytes:
    """The body with its output limit capped to ``max_tokens`` (the ladder's clamp-output
    step): ``max_tokens``, and ``max_completion_tokens`` when the body names it (vLLM reads
    it first)."""
    data = json.loads(raw)
    data["max_tokens"] = max_tokens
    if data.get("max_completion_tokens") is not None:
        data["max_completion_tokens"] = max_tokens
    return json.dumps(data, ensure_ascii=False).encode()


def _usage_pb(u: Any) -> inference_pb2.Usage | None:
    if not isinstance(u, dict):
        return None
    details = u.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    try:
        return inference_pb2.Usage(
            prompt_tokens=int(u.get("prompt_tokens") or 0),
            completion_tokens=int(u.get("completion_tokens") or 0),
            cached_tokens=int(cached or 0),
        )
    except (TypeError, ValueError):
        return None


def _read_usage(data: bytes, st: StreamStats) -> None:
    try:
        obj = json.loads(data)
    except ValueError:
        return
    if isinstance(obj, dict) and (u := _usage_pb(obj.get("usage"))) is not None:
        st.usage = u
        st.tokens = u.completion_tokens


def _read_usage_events(ready: bytes, st: StreamStats) -> None:
    for event in ready.split(b"\n\n"):
        if _USAGE in event and event.startswith(b"data: "):
            _read_usage(event[6:], st)
