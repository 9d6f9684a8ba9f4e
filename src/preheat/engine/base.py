"""The ``Engine`` protocol the worker drives, and the values that cross it.

An engine owns one model replica. The worker tokenizes (through the engine), validates,
submits an :class:`EngineRequest` and iterates the async generator returned by
:meth:`Engine.generate`. Closing that generator early (client cancel, deadline) must abort
the request inside the engine and free its sequence and KV blocks.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry

from preheat.core.sampling import NO_OPTIONS, SamplingOptions


class FinishReason(enum.Enum):
    STOP = "stop"  # stop string or end-of-sequence token
    LENGTH = "length"  # max_tokens reached
    ABORT = "abort"  # aborted by the engine/worker


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    # penalties, biases, stop token ids, min_tokens, log probabilities, a structured-output
    # constraint; an engine that cannot honour one that is set refuses the request
    # (INVALID_ARGUMENT naming it) rather than ignore it
    options: SamplingOptions = NO_OPTIONS


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: Sampling
    priority: int = 0  # lower runs first (vLLM convention)
    cache_salt: str = ""  # prefix blocks are shared only within a salt (a tenant); "" = none


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class StageTiming:
    """Seconds spent in each stage of one request, measured by the engine."""

    queue_s: float  # arrival to first scheduled
    prefill_s: float  # first scheduled to first token
    decode_s: float  # first token to last token

    @property
    def ttft_s(self) -> float:
        return self.queue_s + self.prefill_s

    @property
    def e2e_s(self) -> float:
        return self.queue_s + self.prefill_s + self.decode_s


@dataclass(frozen=True)
class Logprob:
    token_id: int
    logprob: float  # natural log; may be -inf
    rank: int  # 1: the most likely
    text: str = ""


@dataclass(frozen=True)
class TokenLogprobs:
    """One position: its token and the most likely ones (most likely first)."""

    token: Logprob
    top: tuple[Logprob, ...] = ()


@dataclass(frozen=True)
class EngineOutput:
    """A chunk of output: new text and token ids; the last one has ``finish_reason`` set."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None = None
    usage: Usage | None = None  # on the last chunk
    timing: StageTiming | None = None  # on the last chunk
    # with Sampling.options.logprobs: one per id in token_ids
    logprobs: tuple[TokenLogprobs, ...] = ()
    # with Sampling.options.prompt_logprobs: one per prompt token after the first (once)
    prompt_logprobs: tuple[TokenLogprobs, ...] = ()


@dataclass(frozen=True)
class EngineInfo:
    kind: str  # "sim" or "vllm"
    model: str
    max_model_len: int
    block_size: int  # tokens per KV/prefix block
    num_gpu_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    vocab_size: int | None = None  # token ids must be below this (None: unknown)
    # who tokenizes like this engine: a router with the same name may send token ids
    # instead of text (e.g. "sim:32000"); "" = unknown, routers always send text
    tokenizer: str = ""


@dataclass(frozen=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_cache_usage: float  # 0..1
    # num_waiting by request priority (lower first); None: the engine does not say (vLLM)
    waiting_by_priority: Mapping[int, int] | None = None


class CacheEventKind(enum.Enum):
    STORED = "stored"
    REMOVED = "removed"
    CLEARED = "cleared"


@dataclass(frozen=True)
class CacheEvent:
    """Prefix blocks stored into or removed from the KV cache, named by
    :func:`preheat.core.blocks.block_hash` (chained, Preheat's own hash)."""

    kind: CacheEventKind
    block_hashes: tuple[int, ...] = field(default=())


CacheListener = Callable[[CacheEvent], None]


class Engine(Protocol):
    """One model replica. Implementations: ``SimEngine``, ``VllmEngine``."""

    @property
    def info(self) -> EngineInfo: ...

    @property
    def registry(self) -> CollectorRegistry:
        """Where the engine's own (vLLM-named) Prometheus metrics live."""
        ...

    async def load(self) -> None:
        """Loading phase: weights onto the device. Raises on failure."""
        ...

    async def warm_up(self) -> None:
        """Warming phase: run a warm-up request so the first real one is not slow."""
        ...

    def tokenize(self, text: str) -> list[int]: ...

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Streams the request's output. Raises ``PreheatError(RESOURCE_EXHAUSTED)`` when
        the engine cannot take it. Closing the iterator early aborts the request."""
        ...

    def stats(self) -> EngineStats: ...

    def set_cache_listener(self, listener: CacheListener | None) -> None:
        """Called with every prefix-cache change (from the engine's own thread/loop)."""
        ...

    def cached_blocks(self) -> frozenset[int]:
        """Every prefix block now in the cache (for WatchCache snapshots)."""
        ...

    async def shutdown(self) -> None: ...
