"""SimEngine on the real clock: the Engine protocol, prefix cache, metrics, abort, admission.

Assertions are relations (second TTFT < first, counters grow), never absolute speed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import generate_latest

from preheat.core import metric_names as mn
from preheat.core.errors import ErrorCode, PreheatError
from preheat.engine.base import (
    CacheEvent,
    CacheEventKind,
    Engine,
    EngineOutput,
    EngineRequest,
    FinishReason,
    Sampling,
)
from preheat.engine.sim import SimConfig, SimEngine
from preheat.engine.simtokenizer import SimTokenizer

MODEL = "sim-model"
LABELS = {mn.LABEL_MODEL: MODEL, mn.LABEL_ENGINE: "0"}


def config(**options: object) -> SimConfig:
    return SimConfig.from_options({"model": MODEL, "load_s": 0, "warmup_s": 0, **options})


@pytest.fixture
async def engine() -> AsyncIterator[SimEngine]:
    e = SimEngine(config())
    await e.load()
    await e.warm_up()
    yield e
    await e.shutdown()


def req(rid: str, prompt: range | tuple[int, ...], max_tokens: int, **kw: object) -> EngineRequest:
    return EngineRequest(rid, tuple(prompt), Sampling(max_tokens=max_tokens, **kw))  # type: ignore[arg-type]


async def collect(engine: SimEngine, request: EngineRequest) -> tuple[list[EngineOutput], float]:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ttft = -1.0
    outs: list[EngineOutput] = []
    async for out in engine.generate(request):
        if ttft < 0:
            ttft = loop.time() - t0
        outs.append(out)
    return outs, ttft


def sample(engine: SimEngine, name: str, **labels: str) -> float:
    v = engine.registry.get_sample_value(name, {**LABELS, **labels})
    return 0.0 if v is None else v


def test_sim_engine_satisfies_the_protocol() -> None:
    e: Engine = SimEngine(config())
    assert e.info.kind == "sim"
    assert e.info.block_size == 16
    assert e.info.vocab_size == 32_000  # the worker rejects token ids at or above it


async def test_streams_tokens_until_max_tokens(engine: SimEngine) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    outs, _ = await collect(engine, req("a", range(100), 12))
    elapsed = loop.time() - t0
    assert sum(len(o.token_ids) for o in outs) == 12
    last = outs[-1]
    assert last.finish_reason is FinishReason.LENGTH
    assert all(o.finish_reason is None for o in outs[:-1])
    assert last.usage is not None
    assert last.usage.completion_tokens == 12
    assert last.timing is not None
    assert last.timing.decode_s > 0
    text = "".join(o.text for o in outs)
    assert len(text.split()) == 12  # one pseudo-word per token
    # Tokens arrive at (never before) their simulated times: 1 prefill + 11 decode steps.
    assert elapsed >= last.timing.e2e_s * 0.99
    step_s = engine.config.cost.decode_step_ms(1, 105) / 1000
    assert last.timing.decode_s == pytest.approx(11 * step_s, rel=0.02)
    assert last.timing.e2e_s > engine.config.cost.prefill_ms(100) / 1000


async def test_same_4k_prompt_twice_hits_the_prefix_cache() -> None:
    # Three times slower than an H100 so scheduling jitter on a busy machine cannot blur
    # the difference (about 350 ms against 70 ms).
    engine = SimEngine(config(time_scale=3))
    await engine.load()
    try:
        await _same_prompt_twice(engine)
    finally:
        await engine.shutdown()


async def _same_prompt_twice(engine: SimEngine) -> None:
    prompt = range(4096)
    hits0 = sample(engine, "vllm:prefix_cache_hits_total")
    queries0 = sample(engine, "vllm:prefix_cache_queries_total")
    first, ttft1 = await collect(engine, req("a", prompt, 2))
    second, ttft2 = await collect(engine, req("b", prompt, 2))
    u1, u2 = first[-1].usage, second[-1].usage
    t2 = second[-1].timing
    assert u1 is not None
    assert u2 is not None
    assert t2 is not None
    cached = (4096 - 1) // 16 * 16  # full blocks, the last prompt token always computed
    assert (u1.cached_tokens, u2.cached_tokens) == (0, cached)
    assert ttft2 < ttft1
    # The second prefill costs only the uncached remainder, per the cost model.
    remainder_s = engine.config.cost.prefill_ms(4096 - cached, cached) / 1000
    assert t2.prefill_s == pytest.approx(remainder_s)
    assert ttft2 >= remainder_s * 0.99
    assert sample(engine, "vllm:prefix_cache_hits_total") - hits0 == cached
    assert sample(engine, "vllm:prefix_cache_queries_total") - queries0 == 2 * 4096


async def test_metrics_exposition_uses_vllm_names_types_and_labels(engine: SimEngine) -> None:
    await collect(engine, req("a", range(64), 5))
    text = generate_latest(engine.registry).decode()
    kinds = {
        mn.VLLM_NUM_REQUESTS_RUNNING: "gauge",
        mn.VLLM_NUM_REQUESTS_WAITING: "gauge",
        mn.VLLM_KV_CACHE_USAGE_PERC: "gauge",
        mn.VLLM_PREFIX_CACHE_QUERIES: "counter",
        mn.VLLM_PREFIX_CACHE_HITS: "counter",
        mn.VLLM_NUM_PREEMPTIONS: "counter",
        mn.VLLM_PROMPT_TOKENS: "counter",
        mn.VLLM_GENERATION_TOKENS: "counter",
        mn.VLLM_REQUEST_SUCCESS: "counter",
        mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS: "histogram",
        mn.VLLM_INTER_TOKEN_LATENCY_SECONDS: "histogram",
        mn.VLLM_E2E_REQUEST_LATENCY_SECONDS: "histogram",
        mn.VLLM_REQUEST_QUEUE_TIME_SECONDS: "histogram",
        mn.VLLM_REQUEST_PREFILL_TIME_SECONDS: "histogram",
        mn.VLLM_REQUEST_DECODE_TIME_SECONDS: "histogram",
        mn.VLLM_REQUEST_PROMPT_TOKENS: "histogram",
        mn.VLLM_REQUEST_GENERATION_TOKENS: "histogram",
    }
    for name, kind in kinds.items():
        # prometheus_client >= 0.21 names a counter family with its _total suffix.
        assert f"# TYPE {name} {kind}\n" in text or f"# TYPE {name}_total {kind}\n" in text
        sample_name = {"counter": f"{name}_total", "histogram": f"{name}_count"}.get(kind, name)
        extra = {mn.LABEL_FINISHED_REASON: "length"} if name == mn.VLLM_REQUEST_SUCCESS else {}
        assert f"\n{sample_name}{{" in text, sample_name
        assert engine.registry.get_sample_value(sample_name, {**LABELS, **extra}) is not None
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name=' in text
    assert sample(engine, "vllm:request_success_total", finished_reason="length") == 2
    for reason in ("stop", "length", "abort", "error", "repetition"):  # all pre-created
        assert f'finished_reason="{reason}"' in text
    assert sample(engine, "vllm:generation_tokens_total") == 4 + 5  # warm-up + request
    assert sample(engine, "vllm:inter_token_latency_seconds_count") == 3 + 4


async def test_closing_the_stream_early_aborts_and_frees_blocks(engine: SimEngine) -> None:
    gen = engine.generate(req("a", range(500), 10_000))
    first = await anext(gen)
    assert first.token_ids
    assert engine.stats().num_running == 1
    assert engine.stats().kv_cache_usage > 0
    await gen.aclose()
    assert engine.stats() == type(engine.stats())(0, 0, 0.0, waiting_by_priority={})
    assert not engine.core.has_request("a")
    assert sample(engine, "vllm:request_success_total", finished_reason="abort") == 1


async def test_cancelling_the_consumer_aborts_the_request(engine: SimEngine) -> None:
    got_one = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.generate(req("a", range(500), 10_000)):
            got_one.set()

    task = asyncio.create_task(consume())
    await got_one.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.stats().num_running == 0
    assert engine.stats().kv_cache_usage == 0.0


async def test_queues_when_full_and_rejects_beyond_max_waiting() -> None:
    e = SimEngine(config(max_num_seqs=1, max_waiting=1))
    await e.load()
    try:
        a = e.generate(req("a", range(32), 10_000))
        await anext(a)
        b_task = asyncio.create_task(collect(e, req("b", range(100, 132), 2)))
        for _ in range(100):  # let b's task submit it
            if e.stats().num_waiting:
                break
            await asyncio.sleep(0)
        assert e.stats().num_waiting == 1
        with pytest.raises(PreheatError) as err:
            await anext(e.generate(req("c", range(200, 232), 2)))
        assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
        await a.aclose()  # frees the slot: b runs
        outs, _ = await b_task
        assert outs[-1].finish_reason is FinishReason.LENGTH
    finally:
        await e.shutdown()


async def test_stop_string_ends_the_stream_with_stop(engine: SimEngine) -> None:
    outs, _ = await collect(engine, req("a", range(10), 8, seed=7))
    words = "".join(o.text for o in outs).split()
    stop = words[3]
    outs, _ = await collect(engine, req("b", range(10), 8, seed=7, stop=(stop,)))
    assert outs[-1].finish_reason is FinishReason.STOP
    assert "".join(o.text for o in outs).split() == words[:3]
    assert engine.stats().num_running == 0


async def test_rejects_bad_requests_and_use_before_load() -> None:
    e = SimEngine(config(max_model_len=100))
    with pytest.raises(PreheatError) as err:
        await anext(e.generate(req("a", range(10), 2)))
    assert err.value.code is ErrorCode.UNAVAILABLE
    await e.load()
    try:
        with pytest.raises(PreheatError) as err:
            await anext(e.generate(req("a", range(90), 20)))
        assert err.value.code is ErrorCode.INVALID_ARGUMENT
    finally:
        await e.shutdown()


async def test_cache_listener_and_snapshot(engine: SimEngine) -> None:
    events: list[CacheEvent] = []
    engine.set_cache_listener(events.append)
    await collect(engine, req("a", range(64), 1))
    stored = {h for ev in events if ev.kind is CacheEventKind.STORED for h in ev.block_hashes}
    assert len(stored) == 4
    assert stored <= engine.cached_blocks()


async def test_shutdown_aborts_in_flight_streams() -> None:
    e = SimEngine(config())
    await e.load()
    gen = e.generate(req("a", range(32), 10_000))
    await anext(gen)
    await e.shutdown()
    outs = [o async for o in gen]
    assert outs[-1].finish_reason is FinishReason.ABORT


async def test_load_and_warm_up_take_the_scaled_startup_time() -> None:
    e = SimEngine(config(load_s=0.05, warmup_s=0.05, time_scale=2.0))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await e.load()
    t1 = loop.time()
    await e.warm_up()
    t2 = loop.time()
    await e.shutdown()
    assert t1 - t0 >= 0.1 * 0.95
    assert t2 - t1 >= 0.1 * 0.95


def test_config_from_options_converts_strings_and_reports_every_error() -> None:
    c = SimConfig.from_options(
        {"num-gpu-blocks": "1000", "max_waiting": "none", "time_scale": "2", "model": "m"}
    )
    assert (c.num_gpu_blocks, c.max_waiting, c.cost.scale, c.model) == (1000, None, 2.0, "m")
    assert c.waiting_limit == 4 * c.max_num_seqs
    with pytest.raises(PreheatError) as err:
        SimConfig.from_options({"bogus": 1, "num_gpu_blocks": "x", "other": 2})
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    for part in ("bogus", "num_gpu_blocks", "other"):
        assert part in err.value.message


def test_tokenizer_is_word_level_and_deterministic() -> None:
    tok = SimTokenizer()
    hello, world = tok.token_id("hello"), tok.token_id("world")
    assert tok.encode("hello  world\nhello") == [hello, world, hello]
    assert len(tok.encode(SimTokenizer.prompt_of_length(777))) == 777
    assert all(0 <= t < 32000 for t in tok.encode(SimTokenizer.prompt_of_length(100)))
    assert SimTokenizer(100).encode("abc") == SimTokenizer(100).encode("abc")
    assert tok.decode([1, 255]) == " w1 wff"


async def test_stop_string_on_the_last_token(engine: SimEngine) -> None:
    outs, _ = await collect(engine, req("a", range(10), 5, seed=3))
    words = "".join(o.text for o in outs).split()
    outs, _ = await collect(engine, req("b", range(10), 5, seed=3, stop=(words[-1],)))
    assert outs[-1].finish_reason is FinishReason.STOP
    assert "".join(o.text for o in outs).split() == words[:-1]
    assert engine.stats().num_running == 0


async def test_a_failing_engine_loop_fails_open_streams_instead_of_hanging(
    engine: SimEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = engine.generate(req("a", range(64), 10_000))
    assert (await anext(gen)).token_ids

    def broken(until: float) -> object:
        raise RuntimeError("core bug")

    async def drain() -> None:
        async with asyncio.timeout(5):  # a hang fails the test with TimeoutError
            async for _ in gen:
                pass

    monkeypatch.setattr(engine.core, "advance", broken)
    with pytest.raises(PreheatError) as err:
        await drain()
    assert err.value.code is ErrorCode.INTERNAL
    assert "core bug" in err.value.message
    # later requests are refused at once with the reason, not queued forever
    with pytest.raises(PreheatError, match="sim engine failed: RuntimeError: core bug"):
        await anext(engine.generate(req("b", range(8), 4)))


def test_tokenizer_ids_are_stable_per_word_and_within_the_vocabulary() -> None:
    tok = SimTokenizer(vocab_size=1000)
    text = " ".join(f"word{i % 20}" for i in range(100))
    ids = tok.encode(text)
    assert ids == [tok.token_id(w) for w in text.split()]
    assert ids == SimTokenizer(vocab_size=1000).encode(text)  # another instance agrees
    assert ids[:20] == ids[20:40]  # the same word, the same id
    assert all(0 <= i < 1000 for i in ids)
