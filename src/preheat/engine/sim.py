"""``SimEngine``: a simulated vLLM on the real clock, standing in for a GPU in tests and demos.

The engine wraps a pure :class:`~preheat.engine.simcore.SimCore` (batching, KV, prefix
cache, all timing from the calibrated :class:`~preheat.engine.costmodel.CostModel`). One
background task, owned by the engine (started in :meth:`SimEngine.load`, cancelled and
awaited in :meth:`SimEngine.shutdown`), sleeps until the next iteration ends, advances the
core to the clock and hands each token to its request's stream at (or just after) its time,
so TTFT and ITL look like a real engine's.

Like vLLM, a full engine queues rather than rejects; only when more than ``max_waiting``
requests wait does :meth:`SimEngine.generate` raise ``PreheatError(RESOURCE_EXHAUSTED)``.

Sampling: the engine honours ``max_tokens``, ``stop``, ``seed``, ``ignore_eos``,
``stop_token_ids`` and ``min_tokens``; a request that sets any other option that would
change the output (penalties, ``logit_bias``, ``top_k``/``min_p``, log probabilities, a
structured-output constraint) is refused with INVALID_ARGUMENT naming each one
(:data:`SIM_HONOURS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import typing
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.sampling import SamplingOptions, effective_fields
from preheat.engine.base import (
    CacheEvent,
    CacheListener,
    EngineInfo,
    EngineOutput,
    EngineRequest,
    EngineStats,
    FinishReason,
    Sampling,
)
from preheat.engine.costmodel import (
    MODEL_SIZES,
    PACKAGED_32B,
    SPEC_METHODS,
    CostModel,
    acceptance_length,
    kv_cache_tokens,
    load_calibration,
)
from preheat.engine.simcore import CoreConfig, Emissions, Finish, SimCore
from preheat.engine.simmetrics import VllmMetrics
from preheat.engine.simtokenizer import SimTokenizer

WARMUP_REQUEST_ID = "preheat-warmup"


@dataclass(frozen=True)
class SimConfig:
    """One simulated replica. Defaults resemble vLLM 0.32 serving Llama-3-8B on one H100."""

    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    # A common serving limit for 8B models; the cost model is measured up to 8k-token
    # prefills and extrapolates linearly beyond.
    max_model_len: int = 32_768
    block_size: int = 16  # vLLM's default KV block size on CUDA
    # 80 GB x 0.9 (gpu_memory_utilization) = 72 GB, minus 16.06 GB of bf16 weights and
    # ~3 GB of activations/CUDA graphs leaves ~53 GB of KV; a Llama-3-8B token takes
    # 2 (K,V) x 32 layers x 8 kv heads x 128 dims x 2 bytes = 128 KiB, so ~400k tokens
    # = 25,000 blocks of 16 (vLLM logs "GPU KV cache size: ~400,000 tokens" for this setup).
    num_gpu_blocks: int = 25_000
    # vLLM's defaults for a >= 70 GB GPU behind the OpenAI server (engine/arg_utils.py).
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_waiting: int | None = None  # None: 4 x max_num_seqs
    seed: int = 0
    vocab_size: int = 32_000
    eos_probability: float = 0.0
    max_stretch_steps: int = 32
    # vLLM's --scheduling-policy: "fcfs" (vLLM's default, and the calibrated fidelity runs')
    # or "priority" (lower EngineRequest.priority first; see simcore)
    scheduling_policy: str = "fcfs"
    cost: CostModel = field(default_factory=CostModel.default)

    def __post_init__(self) -> None:
        """ValueError naming every field out of range (the scheduler's, via
        :class:`CoreConfig`, and ``max_waiting``)."""
        problems: list[str] = []
        if self.max_waiting is not None and self.max_waiting < 0:
            problems.append(f"max_waiting must be >= 0, got {self.max_waiting}")
        try:
            self.core_config()
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def waiting_limit(self) -> int:
        return 4 * self.max_num_seqs if self.max_waiting is None else self.max_waiting

    def core_config(self) -> CoreConfig:
        return CoreConfig(
            block_size=self.block_size,
            num_gpu_blocks=self.num_gpu_blocks,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            vocab_size=self.vocab_size,
            seed=self.seed,
            eos_probability=self.eos_probability,
            max_stretch_steps=self.max_stretch_steps,
            scheduling_policy=self.scheduling_policy,
        )

    # Cost-model knobs accepted by from_options, besides the SimConfig fields.
    COST_OPTIONS: typing.ClassVar[tuple[str, ...]] = (
        "time_scale",
        "load_s",
        "warmup_s",
        "page_cache",
        "calibration",
        # engine levers (engine/costmodel.py; a pool's vLLM engine args, mapped by the worker)
        "model_size",  # 8b | 32b
        "quantization",  # none | fp8 (weights)
        "kv_cache_dtype",  # auto | bfloat16 | float16 | fp8 | fp8_e4m3 | fp8_e5m2
        "spec_method",  # ngram | draft_model | eagle | eagle3
        "spec_tokens",  # k
        "spec_acceptance_length",  # E, tokens per sequence per verification step
        "spec_acceptance_rate",  # a per drafted token: E = (1 - a^(k+1)) / (1 - a)
    )

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SimConfig:
        """Build from keyword options (values may be strings, as from a CLI): any SimConfig
        field but ``cost``, plus ``time_scale``, ``load_s``, ``warmup_s``, ``page_cache``
        and ``calibration`` (a JSON path). Reports every bad option at once."""
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)} - {"cost"}
        errors: list[str] = []
        kwargs: dict[str, object] = {}
        cost_kwargs: dict[str, object] = {}
        lever_options: dict[str, object] = {}
        for key, raw in options.items():
            k = key.replace("-", "_")
            try:
                if k in names:
                    kwargs[k] = _convert(raw, hints[k])
                elif k == "time_scale":
                    cost_kwargs["scale"] = float(typing.cast(float, raw))
                elif k in ("load_s", "warmup_s"):
                    cost_kwargs[k] = float(typing.cast(float, raw))
                elif k == "page_cache":
                    cost_kwargs[k] = _convert(raw, bool)
                elif k == "calibration":
                    cost_kwargs["calibration"] = str(raw)
                elif k in cls.COST_OPTIONS:
                    lever_options[k] = raw
                else:
                    errors.append(f"unknown sim engine option {key!r}")
            except (TypeError, ValueError) as e:
                errors.append(f"sim engine option {key}={raw!r}: {e}")
        try:
            levers = lever_settings(lever_options)
        except ValueError as e:
            errors.append(str(e))
            levers = {}
        if errors:
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, "; ".join(errors))
        calibration = cost_kwargs.pop("calibration", None)
        data = load_calibration(None if calibration is None else Path(str(calibration)))
        try:
            cost = CostModel.from_calibration(data, **cost_kwargs, **levers)
        except ValueError as e:
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, f"sim engine options: {e}") from None
        if cost.model_size != "8b":
            cost = CostModel.from_32b(
                load_calibration(packaged=PACKAGED_32B), cost.with_(model_size="8b")
            ).with_(**{k: v for k, v in dataclasses.asdict(cost).items() if k in _KEEP_ON_RESHAPE})
        if "num_gpu_blocks" not in kwargs and (
            cost.model_size != "8b" or cost.weights != "bf16" or cost.kv_dtype != "bf16"
        ):
            # the KV memory these weights and this cache format leave on one H100
            block = int(typing.cast(int, kwargs.get("block_size", cls.block_size)))
            kwargs["num_gpu_blocks"] = max(
                1, kv_cache_tokens(cost.model_size, cost.weights, cost.kv_dtype) // block
            )
        try:
            return cls(cost=cost, **kwargs)  # type: ignore[arg-type]
        except ValueError as e:
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, f"sim engine options: {e}") from None


_KEEP_ON_RESHAPE = (
    "scale",
    "load_s",
    "warmup_s",
    "page_cache",
    "weights",
    "kv_dtype",
    "spec_method",
    "spec_tokens",
    "spec_accept_len",
)


def lever_settings(options: Mapping[str, object]) -> dict[str, object]:
    """CostModel fields for the sim's lever options (SimConfig.COST_OPTIONS), or ValueError
    naming the option and what it takes."""
    out: dict[str, object] = {}
    size = str(options.get("model_size", "8b")).lower()
    if size not in MODEL_SIZES:
        raise ValueError(f"sim engine option model_size={size!r}: one of {', '.join(MODEL_SIZES)}")
    out["model_size"] = size
    quant = options.get("quantization")
    if quant is not None and str(quant).lower() not in ("none", "fp8"):
        raise ValueError(f"sim engine option quantization={quant!r}: the sim models none, fp8")
    out["weights"] = "fp8" if str(quant).lower() == "fp8" else "bf16"
    kv = str(options.get("kv_cache_dtype", "auto")).lower()
    if kv not in ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"):
        raise ValueError(
            f"sim engine option kv_cache_dtype={kv!r}: the sim models auto, bfloat16, float16, "
            "fp8, fp8_e4m3, fp8_e5m2"
        )
    out["kv_dtype"] = "fp8" if kv.startswith("fp8") else "bf16"
    method = options.get("spec_method")
    if method is None:
        return out
    if method not in SPEC_METHODS:
        raise ValueError(
            f"sim engine option spec_method={method!r}: one of {', '.join(SPEC_METHODS)}"
        )
    k = int(typing.cast(int, options.get("spec_tokens", 0)))
    if k < 1:
        raise ValueError("sim engine option spec_tokens: speculative decoding needs k >= 1")
    length = options.get("spec_acceptance_length")
    rate = options.get("spec_acceptance_rate")
    if (length is None) == (rate is None):
        raise ValueError(
            "speculative decoding in the sim needs one of spec_acceptance_length (E, in "
            "[1, k+1]) or spec_acceptance_rate (a, in [0, 1])"
        )
    if rate is not None:
        a = float(typing.cast(float, rate))
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"sim engine option spec_acceptance_rate={a}: must be in [0, 1]")
        e = acceptance_length(k, a)
    else:
        e = float(typing.cast(float, length))
        if not 1.0 <= e <= k + 1:
            raise ValueError(
                f"sim engine option spec_acceptance_length={e}: must be in [1, {k + 1}]"
            )
    out.update(spec_method=str(method), spec_tokens=k, spec_accept_len=e)
    return out


def _convert(raw: object, hint: object) -> object:
    if not isinstance(raw, str):
        return raw
    if hint is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected a boolean")
    if hint is int or hint == (int | None):
        return None if raw.lower() in ("", "none") else int(raw)
    if hint is float:
        return float(raw)
    return raw


@dataclass(eq=False)
class _Stream:
    request: EngineRequest
    arrival: float
    # an error ends the stream: the engine's loop failed
    queue: asyncio.Queue[EngineOutput | PreheatError] = field(default_factory=asyncio.Queue)
    text: str = ""
    last_token_t: float | None = None
    stop_hit: bool = False
    done: bool = False


_log = logging.getLogger(__name__)


class SimEngine:
    """The simulated engine (implements :class:`preheat.engine.base.Engine`)."""

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or SimConfig()
        self._clock = clock
        self._registry = registry if registry is not None else CollectorRegistry()
        self._metrics = VllmMetrics(self._registry, self.config.model, self.config.max_model_len)
        self._tokenizer = SimTokenizer(self.config.vocab_size)
        self._listener: CacheListener | None = None
        self.core = SimCore(self.config.core_config(), self.config.cost, self._on_cache_event)
        self._counted = dataclasses.replace(self.core.counters)
        self._streams: dict[str, _Stream] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loaded = False
        self._closed = False
        self._failed: str | None = None
        self._warmups = 0

    # --- Engine protocol ----------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        c = self.config
        return EngineInfo(
            kind="sim",
            model=c.model,
            max_model_len=c.max_model_len,
            block_size=c.block_size,
            num_gpu_blocks=c.num_gpu_blocks,
            max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=c.max_num_batched_tokens,
            vocab_size=c.vocab_size,
            tokenizer=f"sim:{c.vocab_size}",
        )

    @property
    def registry(self) -> CollectorRegistry:
        return self._registry

    async def load(self) -> None:
        if self._closed:
            raise PreheatError(ErrorCode.FAILED_PRECONDITION, "engine was shut down")
        await asyncio.sleep(self.config.cost.loading_s())
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"sim-engine:{self.config.model}"
            )
        self._loaded = True

    async def warm_up(self) -> None:
        await asyncio.sleep(self.config.cost.warming_s())
        self._warmups += 1
        # Token ids from the top of the vocabulary, unlikely to prefix a real prompt.
        top = self.config.vocab_size - 1
        prompt = tuple(top - i for i in range(self.config.block_size + 1))
        request = EngineRequest(
            f"{WARMUP_REQUEST_ID}-{self._warmups}", prompt, Sampling(max_tokens=4, seed=0)
        )
        async for _ in self.generate(request):
            pass

    def tokenize(self, text: str) -> list[int]:
        return self._tokenizer.encode(text)

    def detokenize(self, token_ids: tuple[int, ...] | list[int]) -> str:
        return self._tokenizer.decode(token_ids)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Streams ``request``'s output; submitted at the first ``__anext__``."""
        if self._failed is not None:
            raise PreheatError(ErrorCode.UNAVAILABLE, f"sim engine failed: {self._failed}")
        if not self._loaded or self._closed:
            raise PreheatError(ErrorCode.UNAVAILABLE, "sim engine is not loaded")
        refused = sim_refuses(request.sampling.options)
        if refused:
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, refused_message(refused))
        rid = request.request_id
        if self.core.num_waiting >= self.config.waiting_limit:
            raise PreheatError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"engine queue is full ({self.core.num_waiting} requests waiting, limit "
                f"{self.config.waiting_limit}); retry later or on another replica",
                retry_after_s=1.0,
            )
        now = self._clock()
        emissions = self.core.add(request, now)  # raises INVALID_ARGUMENT on bad input
        stream = _Stream(request, now)
        self._streams[rid] = stream
        self._deliver(emissions, now)
        self._wake.set()
        try:
            while True:
                out = await stream.queue.get()
                if isinstance(out, PreheatError):
                    raise out
                yield out
                if out.finish_reason is not None:
                    return
        finally:
            if not stream.done and self._streams.get(rid) is stream:
                # Closed early (aclose, cancellation): abort and free its blocks.
                now = self._clock()
                stream.done = True
                del self._streams[rid]
                self._deliver(self.core.abort(rid, now), now)
                self._wake.set()

    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=self.core.num_running,
            num_waiting=self.core.num_waiting,
            kv_cache_usage=self.core.kv_cache_usage,
            waiting_by_priority=self.core.waiting_by_priority(),
        )

    def set_cache_listener(self, listener: CacheListener | None) -> None:
        self._listener = listener

    def cached_blocks(self) -> frozenset[int]:
        return self.core.cached_blocks()

    async def shutdown(self) -> None:
        self._closed = True
        now = self._clock()
        for rid in list(self._streams):
            self._deliver(self.core.abort(rid, now), now)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # --- internals ----------------------------------------------------------------------
    def _on_cache_event(self, event: CacheEvent) -> None:
        if self._listener is not None:
            self._listener(event)

    async def _run(self) -> None:
        try:
            await self._loop()
        except Exception as exc:  # a bug in the core: fail every open stream, never hang
            _log.exception("sim engine loop failed")
            self._failed = f"{type(exc).__name__}: {exc}"
            err = PreheatError(ErrorCode.INTERNAL, f"sim engine failed: {self._failed}")
            for stream in list(self._streams.values()):
                stream.done = True
                stream.queue.put_nowait(err)
            self._streams.clear()

    async def _loop(self) -> None:
        while True:
            now = self._clock()
            self._deliver(self.core.advance(now), now)
            nxt = self.core.next_token_time()
            self._wake.clear()
            if nxt is None:
                await self._wake.wait()
                continue
            delay = nxt - self._clock()
            if delay > 0:
                # A timer sets the same event an arrival sets (not asyncio.wait_for, which
                # on 3.11 can swallow a cancellation that races with the event).
                timer = asyncio.get_running_loop().call_later(delay, self._wake.set)
                try:
                    await self._wake.wait()
                finally:
                    timer.cancel()

    def _deliver(self, em: Emissions, now: float) -> None:
        m = self._metrics
        finishes = {f.request_id: f for f in em.finishes}
        stopped: list[str] = []
        last_run = {run.request_id: i for i, run in enumerate(em.runs)}
        for i, run in enumerate(em.runs):
            stream = self._streams.get(run.request_id)
            if stream is None or stream.done:
                continue
            if stream.last_token_t is None:
                m.ttft.observe(run.t_first - stream.arrival)
            else:
                m.itl.observe(run.t_first - stream.last_token_t)
            for _ in range(len(run.token_ids) - 1):
                m.itl.observe(run.dt)
            stream.last_token_t = run.t_last
            fin = finishes.get(run.request_id)
            ids = run.token_ids
            stop_ids = stream.request.sampling.options.stop_token_ids
            if fin is not None and last_run[run.request_id] == i and ids and ids[-1] in stop_ids:
                ids = ids[:-1]  # a stop token id ends the output; its text is not added
            text = self._tokenizer.decode(ids)
            stop = stream.request.sampling.stop
            if stop:
                text, hit = _cut_at_stop(stream.text, text, stop)
                if hit:
                    stream.stop_hit = True
                    stopped.append(run.request_id)
            stream.text += text
            if fin is not None and last_run[run.request_id] == i and not stream.stop_hit:
                self._close(stream, text, run.token_ids, fin, fin.reason)
                del finishes[run.request_id]
            else:
                stream.queue.put_nowait(EngineOutput(text, run.token_ids))
        for rid in stopped:
            stream = self._streams[rid]
            if not stream.done:
                fin_or_none = finishes.pop(rid, None)  # the stop fell on its last token
                if fin_or_none is None:
                    more = self.core.abort(rid, now)
                    fin_or_none = next(f for f in more.finishes if f.request_id == rid)
                self._close(stream, "", (), fin_or_none, FinishReason.STOP)
        for rid, fin in finishes.items():
            stream = self._streams.get(rid)
            if stream is not None and not stream.done:
                self._close(stream, "", (), fin, fin.reason)
            elif stream is None:
                self._observe_finish(fin, fin.reason)
        self._sync_metrics()

    def _close(
        self,
        stream: _Stream,
        text: str,
        token_ids: tuple[int, ...],
        fin: Finish,
        reason: FinishReason,
    ) -> None:
        stream.done = True
        self._streams.pop(stream.request.request_id, None)
        self._observe_finish(fin, reason)
        stream.queue.put_nowait(
            EngineOutput(text, token_ids, reason, usage=fin.usage, timing=fin.timing)
        )

    def _observe_finish(self, fin: Finish, reason: FinishReason) -> None:
        m = self._metrics
        m.finished(reason).inc()
        t = fin.timing
        m.e2e.observe(t.e2e_s)
        m.queue.observe(t.queue_s)
        m.prefill.observe(t.prefill_s)
        m.decode.observe(t.decode_s)
        m.request_prompt_tokens.observe(fin.usage.prompt_tokens)
        m.request_generation_tokens.observe(fin.usage.completion_tokens)

    def _sync_metrics(self) -> None:
        m = self._metrics
        c = self.core.counters
        old = self._counted
        m.prefix_queries.inc(c.prefix_cache_queries - old.prefix_cache_queries)
        m.prefix_hits.inc(c.prefix_cache_hits - old.prefix_cache_hits)
        m.preemptions.inc(c.num_preemptions - old.num_preemptions)
        m.prompt_tokens.inc(c.prompt_tokens - old.prompt_tokens)
        m.generation_tokens.inc(c.generation_tokens - old.generation_tokens)
        self._counted = dataclasses.replace(c, requests_finished=dict(c.requests_finished))
        m.running.set(self.core.num_running)
        m.waiting.set(self.core.num_waiting)
        m.kv_usage.set(self.core.kv_cache_usage)


SIM_HONOURS = frozenset({"sampling.stop_token_ids", "sampling.min_tokens"})
"""The sampling options the sim engine applies (with max_tokens, stop, seed, ignore_eos);
every other one that changes anything is refused. Its tokens are uniform draws from the
vocabulary whatever the logits would be, so penalties, biases, top-k/min-p, log
probabilities and a structured-output constraint have nothing to act on: accepting them
would be a silent 200 for something not applied. Temperature and top_p are accepted as
before (their bounds are checked; the draws ignore them)."""


def sim_refuses(options: SamplingOptions) -> list[str]:
    """The fields of ``options`` the sim engine does not honour (empty: it honours all)."""
    return [f for f in effective_fields(options) if f not in SIM_HONOURS]


def refused_message(fields: list[str]) -> str:
    names = ", ".join(fields)
    return (
        f"the sim engine does not apply {names} (it samples uniform random tokens; it honours "
        "max_tokens, stop, stop_token_ids, min_tokens, ignore_eos and seed): leave "
        f"{'it' if len(fields) == 1 else 'them'} unset, or use a vLLM pool"
    )


def _cut_at_stop(before: str, new: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """``new`` cut just before the first stop string that ends in it, and whether one did."""
    longest = max(len(s) for s in stops)
    tail_start = max(0, len(before) - longest + 1)
    window = before[tail_start:] + new
    best: int | None = None
    for s in stops:
        i = window.find(s)
        if i != -1 and (best is None or i < best):
            best = i
    if best is None:
        return new, False
    cut = tail_start + best - len(before)  # index into new (may be < 0: stop began before)
    return new[: max(cut, 0)], True
