"""Token coalescing (``preheat.wire.coalesce``): what goes out when, and that nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.wire.coalesce import CoalesceConfig, coalesce


def chunk(i: int, final: bool = False) -> pb.GenerateResponse:
    return pb.GenerateResponse(
        text=f"t{i} ",
        token_ids=[i],
        finish_reason=pb.FINISH_REASON_LENGTH if final else pb.FINISH_REASON_UNSPECIFIED,
    )


async def upstream(
    gaps_s: Sequence[float], fail_at: int | None = None
) -> AsyncIterator[pb.GenerateResponse]:
    """One token after each gap; the last is final. ``fail_at``: raise before that token."""
    for i, gap in enumerate(gaps_s):
        await asyncio.sleep(gap)
        if i == fail_at:
            raise RuntimeError("upstream broke")
        yield chunk(i, final=i == len(gaps_s) - 1)


async def collect(
    source: AsyncIterator[pb.GenerateResponse], config: CoalesceConfig
) -> list[tuple[float, list[int]]]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    return [(loop.time() - start, list(c.token_ids)) async for c in coalesce(source, config)]


async def test_off_passes_every_chunk_through() -> None:
    out = await collect(upstream([0.0] * 5), CoalesceConfig(max_tokens=1))
    assert [ids for _, ids in out] == [[0], [1], [2], [3], [4]]


async def test_count_flush_first_token_alone_and_last_closes() -> None:
    out = await collect(upstream([0.0] * 10), CoalesceConfig(max_tokens=4, max_delay_s=1.0))
    ids = [ids for _, ids in out]
    assert ids[0] == [0]  # the first token is never held
    assert [t for part in ids for t in part] == list(range(10))  # nothing lost, in order
    assert all(len(part) == 4 for part in ids[1:-1])
    assert len(ids[-1]) <= 4


async def test_delay_flushes_a_slow_stream() -> None:
    # In lockstep: upstream sends token i+1 only once token i came out. Flushing on count
    # alone (4 tokens) would never send token 1, so the stream would stall; the delay
    # (10 ms) sends each token on its own. The bound only catches that stall.
    received = asyncio.Queue[int]()

    async def lockstep(n: int) -> AsyncIterator[pb.GenerateResponse]:
        for i in range(n):
            yield chunk(i, final=i == n - 1)
            if i < n - 1:
                assert await received.get() == i

    out: list[list[int]] = []

    async def consume() -> None:
        async for c in coalesce(lockstep(5), CoalesceConfig(max_tokens=4, max_delay_s=0.01)):
            out.append(list(c.token_ids))
            for t in c.token_ids:
                received.put_nowait(t)

    await asyncio.wait_for(consume(), 60)
    assert out == [[0], [1], [2], [3], [4]]


async def test_error_propagates_after_what_was_sent() -> None:
    got: list[int] = []

    async def drain() -> None:
        async for c in coalesce(
            upstream([0.0] * 6, fail_at=3), CoalesceConfig(max_tokens=2, max_delay_s=1.0)
        ):
            got.extend(c.token_ids)

    with pytest.raises(RuntimeError, match="upstream broke"):
        await drain()
    assert got[:1] == [0]
    assert set(got) <= {0, 1, 2}


async def test_closing_early_stops_the_reader() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[pb.GenerateResponse]:
        i = 0
        try:
            while True:
                await asyncio.sleep(0.001)
                yield chunk(i)
                i += 1
        finally:
            closed.set()

    gen = coalesce(endless(), CoalesceConfig(max_tokens=3, max_delay_s=0.5))
    first = await anext(gen)
    second = await anext(gen)
    await gen.aclose()
    assert list(first.token_ids) == [0]
    assert list(second.token_ids) == [1, 2, 3]
    await asyncio.wait_for(closed.wait(), 60)  # a bound that only catches a hang


@pytest.mark.parametrize(
    ("tokens", "delay_s", "message"),
    [(0, 0.01, "coalesce tokens"), (2000, 0.01, "coalesce tokens"), (4, 5.0, "coalesce delay")],
)
def test_bad_settings_say_what_is_wrong(tokens: int, delay_s: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CoalesceConfig(max_tokens=tokens, max_delay_s=delay_s)
