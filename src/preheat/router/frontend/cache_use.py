"""A request's use of its pool's response cache (``core.traffic.respcache``), shared by the
HTTP front, the OpenAI passthrough and gRPC: the lookup by key (bypassed, a hit or a miss;
counted in ``preheat_router_response_cache_total``) and the store of a fresh answer, which
keeps only a finished one (``stop`` or ``length``: never an error, an abort or a cut
stream) that the pool itself served as asked (not clamped by the degradation ladder, not
from a fallback pool: another request would get an answer it did not ask for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from preheat.core.traffic.respcache import CachedAnswer, cache_key, deterministic
from preheat.proto.preheat.v1 import inference_pb2
from preheat.router.frontend.dispatch import Dispatcher, Prepared, StreamStats

CACHE_HEADER = "X-Preheat-Cache"  # response (gRPC: trailer x-preheat-cache): hit, miss, bypass
CACHE_BYPASS = "x-preheat-cache"  # request header or gRPC metadata: "bypass" skips the lookup
CACHEABLE = frozenset({inference_pb2.FINISH_REASON_STOP, inference_pb2.FINISH_REASON_LENGTH})


@dataclass
class CacheUse:
    """A request's use of its pool's response cache: the lookup's ``result`` ("": not
    cacheable), the ``answer`` of a hit, and how a fresh answer is stored."""

    result: str = ""
    answer: CachedAnswer | None = None
    key: str = ""
    dispatcher: Dispatcher | None = None

    def store(
        self,
        text: str,
        finish: int,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        stats: StreamStats | None = None,
        token_ids: Sequence[int] = (),
    ) -> None:
        """Keeps a finished answer (never an abort, an error, a truncated stream, or an
        answer the ladder changed: ``stats`` says)."""
        d = self.dispatcher
        if not self.key or d is None or self.answer is not None or finish not in CACHEABLE:
            return
        if stats is not None and (stats.clamped_from or stats.fallback_pool):
            return
        answer = CachedAnswer(text, finish, prompt_tokens, completion_tokens, tuple(token_ids))
        if d.response_cache.put(self.key, answer, asyncio.get_running_loop().time()):
            d.metrics.response_cache.labels(*d.metrics.series, "store").inc()


def lookup(
    d: Dispatcher,
    api: str,
    model: str,
    params: Mapping[str, Any],
    prep: Prepared,
    *,
    bypass: bool,
) -> CacheUse:
    """The lookup of a cacheable request by its key (``params``: its prompt and every
    parameter that changes the answer): bypassed, a hit or a miss. The key has the tenant
    unless the pool shares answers across tenants."""
    cfg = d.config.traffic.cache
    m = d.metrics
    tenant = "" if cfg.share_tenants else prep.request.cache_salt
    key = cache_key(model, api, params, tenant)
    if bypass:
        m.response_cache.labels(*m.series, "bypass").inc()
        return CacheUse("bypass", None, key, d)  # a fresh answer replaces the cached one
    answer = d.response_cache.get(key, asyncio.get_running_loop().time())
    result = "hit" if answer is not None else "miss"
    m.response_cache.labels(*m.series, result).inc()
    return CacheUse(result, answer, key, d)


def generate_params(req: inference_pb2.GenerateRequest) -> dict[str, Any] | None:
    """What a gRPC ``GenerateRequest`` is keyed by (its prompt, text or token ids, and every
    sampling parameter); None: not cacheable (not deterministic, or asking for logprobs,
    which a cached answer does not keep). Routing, admission and delivery fields
    (request id, session, priority, class, deadline, coalescing, tenant) change nothing in
    the answer and stay out of the key."""
    s = req.sampling
    temperature = s.temperature if s.HasField("temperature") else None
    seed = s.seed if s.HasField("seed") else None
    if not deterministic(temperature, seed, None):
        return None
    if s.HasField("logprobs") or s.HasField("prompt_logprobs"):
        return None
    if req.WhichOneof("input") == "prompt_token_ids":
        prompt: Any = list(req.prompt_token_ids.ids)
    else:
        prompt = req.prompt
    sampling = json_format.MessageToDict(s, preserving_proto_field_name=True)
    return {"prompt": prompt, "sampling": sampling}


class Collected:
    """What a served stream said, for the store: its text, token ids, last finish reason
    and usage."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.token_ids: list[int] = []
        self.finish = inference_pb2.FINISH_REASON_UNSPECIFIED
        self.usage: inference_pb2.Usage | None = None

    def add(self, chunk: inference_pb2.GenerateResponse) -> None:
        self.texts.append(chunk.text)
        self.token_ids.extend(chunk.token_ids)
        if chunk.finish_reason != inference_pb2.FINISH_REASON_UNSPECIFIED:
            self.finish = chunk.finish_reason
        if chunk.HasField("usage"):
            self.usage = chunk.usage

    def store(self, cache: CacheUse, prep: Prepared, stats: StreamStats) -> None:
        u = self.usage
        prompt_tokens = u.prompt_tokens if u is not None else prep.info.prompt_tokens
        completion_tokens = u.completion_tokens if u is not None else len(self.token_ids)
        cache.store(
            "".join(self.texts),
            self.finish,
            prompt_tokens,
            completion_tokens,
            stats=stats,
            token_ids=self.token_ids,
        )


def hit_chunk(prep: Prepared, answer: CachedAnswer) -> inference_pb2.GenerateResponse:
    """A cached answer as the one chunk of a gRPC stream (no worker served it)."""
    return inference_pb2.GenerateResponse(
        request_id=prep.info.request_id,
        text=answer.text,
        token_ids=answer.token_ids,
        finish_reason=answer.finish_reason,  # type: ignore[arg-type]
        usage=inference_pb2.Usage(
            prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens
        ),
    )
