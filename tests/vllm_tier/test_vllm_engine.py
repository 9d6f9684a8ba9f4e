"""VllmEngine against the real vLLM CPU build and the tiny offline model.

Runs only in the vLLM venv (``.venv-vllm``); elsewhere the module is skipped. One engine
serves the whole module (building it takes 15-30 s on CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import pytest_asyncio
from prometheus_client import generate_latest

from preheat.core import metric_names as m
from preheat.core.blocks import block_hashes, tenant_root
from preheat.core.errors import ErrorCode, PreheatError
from preheat.engine.base import (
    CacheEvent,
    CacheEventKind,
    EngineOutput,
    EngineRequest,
    FinishReason,
    Sampling,
)
from preheat.engine.vllm import VllmEngine, VllmEngineConfig

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

MAX_NUM_SEQS = 4
MAX_QUEUED = 6
LOAD: dict[str, float] = {}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tiny_model: Path) -> AsyncIterator[VllmEngine]:
    eng = VllmEngine(
        VllmEngineConfig(
            model=str(tiny_model),
            served_model_name="tiny-llama",
            max_model_len=1024,
            max_num_seqs=MAX_NUM_SEQS,
            max_num_queued_reqs=MAX_QUEUED,
            kv_cache_bytes=64 << 20,
            dtype="float32",
        )
    )
    gaps: list[float] = []

    async def heartbeat() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    beat = asyncio.create_task(heartbeat())
    await eng.load()
    beat.cancel()
    LOAD["max_loop_gap_s"] = max(gaps, default=0.0)
    await eng.warm_up()
    yield eng
    await eng.shutdown()


_ids = iter(range(1_000_000))


def request(tokens: list[int], max_tokens: int = 16, **sampling: object) -> EngineRequest:
    return EngineRequest(
        request_id=f"t{next(_ids)}",
        prompt_token_ids=tuple(tokens),
        sampling=Sampling(
            **{"max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True, **sampling}
        ),  # type: ignore[arg-type]
    )


async def collect(engine: VllmEngine, req: EngineRequest) -> list[EngineOutput]:
    async with contextlib.aclosing(engine.generate(req)) as stream:  # type: ignore[type-var]
        return [out async for out in stream]


async def eventually(cond: Callable[[], bool], within_s: float = 10.0) -> None:
    """Polls ``cond`` until it is true (state the engine core updates asynchronously)."""
    async with asyncio.timeout(within_s):
        while True:
            if cond():
                return
            await asyncio.sleep(0.05)


def long_prompt(engine: VllmEngine, seed: str) -> list[int]:
    text = " ".join(f"{seed} block {i} of the prefix cache for the model" for i in range(30))
    return engine.tokenize(text)


async def test_load_leaves_the_event_loop_responsive(engine: VllmEngine) -> None:
    # The build runs in a thread; the loop only waits on the GIL (measured: well under 1 s).
    print("max loop gap during load:", LOAD["max_loop_gap_s"])
    assert LOAD["max_loop_gap_s"] < 2.0


async def test_info_after_load(engine: VllmEngine) -> None:
    info = engine.info
    assert info.kind == "vllm"
    assert info.model == "tiny-llama"
    assert info.block_size == 32
    assert info.num_gpu_blocks > 0
    assert info.max_num_seqs == MAX_NUM_SEQS
    assert info.vocab_size == 512


async def test_streams_tokens_with_usage_and_timing(engine: VllmEngine) -> None:
    prompt = engine.tokenize("Hello from the preheat worker, stream some tokens please.")
    outs = await collect(engine, request(prompt, max_tokens=24))

    assert len(outs) >= 3
    assert all(o.finish_reason is None for o in outs[:-1])
    last = outs[-1]
    assert last.finish_reason is FinishReason.LENGTH
    assert "".join(o.text for o in outs)
    assert sum(len(o.token_ids) for o in outs) == 24
    assert last.usage is not None
    assert last.usage.prompt_tokens == len(prompt)
    assert last.usage.completion_tokens == 24
    assert last.timing is not None
    assert last.timing.queue_s >= 0
    assert last.timing.ttft_s > 0
    assert last.timing.decode_s > 0


async def test_cancel_mid_stream_frees_the_sequence(engine: VllmEngine) -> None:
    prompt = engine.tokenize("Cancel me in the middle of a long answer.")
    stream = engine.generate(request(prompt, max_tokens=900))
    chunks = 0
    async for _ in stream:
        chunks += 1
        if chunks == 3:
            break
    await eventually(lambda: engine.stats().num_running == 1)
    await stream.aclose()  # type: ignore[attr-defined]
    await eventually(lambda: engine.stats().num_running == 0)
    running = engine.registry.get_sample_value(
        m.VLLM_NUM_REQUESTS_RUNNING, {"model_name": "tiny-llama", "engine": "0"}
    )
    assert running == 0

    # Cancelling the consuming task aborts too.
    async def consume() -> None:
        async for _ in engine.generate(request(prompt, max_tokens=900)):
            await asyncio.sleep(0.01)

    task = asyncio.create_task(consume())
    await eventually(lambda: engine.stats().num_running == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: engine.stats().num_running == 0)

    # The engine still serves.
    outs = await collect(engine, request(prompt, max_tokens=4))
    assert outs[-1].finish_reason is FinishReason.LENGTH


async def test_prefix_cache_hit_on_repeat(engine: VllmEngine) -> None:
    prompt = long_prompt(engine, "repeat")
    assert len(prompt) > 4 * 32
    first = await collect(engine, request(prompt, max_tokens=2))
    second = await collect(engine, request(prompt, max_tokens=2))
    assert first[-1].usage is not None
    assert second[-1].usage is not None
    assert second[-1].usage.cached_tokens > 0
    assert second[-1].usage.cached_tokens % 32 == 0
    assert second[-1].usage.cached_tokens >= first[-1].usage.cached_tokens
    hits = engine.registry.get_sample_value(
        m.VLLM_PREFIX_CACHE_HITS + "_total", {"model_name": "tiny-llama", "engine": "0"}
    )
    assert hits is not None
    assert hits > 0


async def test_kv_events_name_blocks_with_preheat_hashes(engine: VllmEngine) -> None:
    events: list[CacheEvent] = []
    engine.set_cache_listener(events.append)
    try:
        prompt = long_prompt(engine, "events")
        expected = block_hashes(prompt, 32)
        assert len(expected) >= 4
        await collect(engine, request(prompt, max_tokens=2))
        await eventually(lambda: set(expected) <= engine.cached_blocks())
        stored = [h for e in events if e.kind is CacheEventKind.STORED for h in e.block_hashes]
        assert stored[: len(expected)] == expected
    finally:
        engine.set_cache_listener(None)


async def test_a_cache_salt_scopes_the_prefix_cache_and_names_blocks_per_tenant(
    engine: VllmEngine,
) -> None:
    prompt = long_prompt(engine, "salted")
    salted = block_hashes(prompt, 32, tenant_root("team-a"))
    a = dataclasses.replace(request(prompt, max_tokens=2), cache_salt="team-a")
    await collect(engine, a)
    await eventually(lambda: set(salted) <= engine.cached_blocks())  # the router's names
    b = dataclasses.replace(request(prompt, max_tokens=2), cache_salt="team-b")
    other = await collect(engine, b)
    assert other[-1].usage is not None
    assert other[-1].usage.cached_tokens == 0  # another tenant: no hit
    again = await collect(
        engine, dataclasses.replace(request(prompt, max_tokens=2), cache_salt="team-a")
    )
    assert again[-1].usage is not None
    assert again[-1].usage.cached_tokens > 0


async def test_registry_renders_vllm_metric_names(engine: VllmEngine) -> None:
    text = generate_latest(engine.registry).decode()
    for name in (
        m.VLLM_NUM_REQUESTS_RUNNING,
        m.VLLM_NUM_REQUESTS_WAITING,
        m.VLLM_KV_CACHE_USAGE_PERC,
        m.VLLM_TIME_TO_FIRST_TOKEN_SECONDS + "_bucket",
        m.VLLM_INTER_TOKEN_LATENCY_SECONDS + "_bucket",
        m.VLLM_E2E_REQUEST_LATENCY_SECONDS + "_bucket",
        m.VLLM_PREFIX_CACHE_HITS + "_total",
        m.VLLM_PREFIX_CACHE_QUERIES + "_total",
        m.VLLM_GENERATION_TOKENS + "_total",
    ):
        assert f"\n{name}{{" in text, name
    assert 'model_name="tiny-llama"' in text
    # Only vLLM's families: the worker adds its own and the process collector itself.
    assert all(
        line.startswith(("# HELP vllm:", "# TYPE vllm:", "vllm:"))
        for line in text.splitlines()
        if line
    )


async def test_stop_string_ends_the_stream_before_it(engine: VllmEngine) -> None:
    prompt = engine.tokenize("Stop strings are cut by the engine.")
    # Seeded sampling: greedy decoding of random weights repeats one token.
    free = "".join(
        o.text for o in await collect(engine, request(prompt, 24, temperature=1.0, seed=3))
    )
    stop = free[len(free) // 2 :][:2]
    assert stop
    outs = await collect(engine, request(prompt, 24, temperature=1.0, seed=3, stop=(stop,)))
    assert outs[-1].finish_reason is FinishReason.STOP
    text = "".join(o.text for o in outs)
    assert stop not in text
    assert free.startswith(text)


async def test_seeded_sampling_repeats(engine: VllmEngine) -> None:
    prompt = engine.tokenize("Sample with a seed.")

    def seeded() -> EngineRequest:
        return EngineRequest(
            request_id=f"t{next(_ids)}",
            prompt_token_ids=tuple(prompt),
            sampling=Sampling(max_tokens=12, temperature=1.0, seed=7, ignore_eos=True),
        )

    a = [t for o in await collect(engine, seeded()) for t in o.token_ids]
    b = [t for o in await collect(engine, seeded()) for t in o.token_ids]
    assert a == b


async def test_bad_requests_are_invalid_argument(engine: VllmEngine) -> None:
    too_long = [5] * 2000
    with pytest.raises(PreheatError) as err:
        await collect(engine, request(too_long, max_tokens=4))
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert "1024" in err.value.message

    with pytest.raises(PreheatError) as err:
        await collect(engine, request([5, 6, 7], max_tokens=4, top_p=0.0))
    assert err.value.code is ErrorCode.INVALID_ARGUMENT

    with pytest.raises(PreheatError) as err:
        await collect(engine, request([5, 512], max_tokens=4))
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert "vocabulary" in err.value.message


async def test_full_engine_is_resource_exhausted(engine: VllmEngine) -> None:
    prompt = engine.tokenize("Keep the engine busy.")
    streams = [engine.generate(request(prompt, max_tokens=1000)) for _ in range(MAX_QUEUED)]
    firsts = [asyncio.create_task(anext(s)) for s in streams]  # type: ignore[arg-type]
    try:
        # MAX_NUM_SEQS run, the rest wait: the queue is full.
        await eventually(
            lambda: (
                (engine.stats().num_running, engine.stats().num_waiting)
                == (MAX_NUM_SEQS, MAX_QUEUED - MAX_NUM_SEQS)
            ),
            within_s=5,
        )
        with pytest.raises(PreheatError) as err:
            await collect(engine, request(prompt, max_tokens=4))
        assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    finally:
        for t in firsts:
            t.cancel()
        await asyncio.gather(*firsts, return_exceptions=True)
        for s in streams:
            await s.aclose()  # type: ignore[attr-defined]
    await eventually(lambda: engine.stats().num_running == 0)
    await eventually(lambda: engine.stats().num_waiting == 0)
