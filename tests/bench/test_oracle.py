"""The routing benchmark's prefix-cache references: a pooled LRU cache and an infinite one."""

from __future__ import annotations

import pytest

from preheat.bench.oracle import oracle_hit_rate
from preheat.workload.traces import TraceRequest


def req(i: int, blocks: tuple[int, ...], tokens: int, block_tokens: int = 32) -> TraceRequest:
    return TraceRequest(
        arrival_s=float(i),
        input_tokens=tokens,
        output_tokens=1,
        prefix_block_ids=blocks,
        block_tokens=block_tokens,
        index=i,
    )


def test_a_repeated_prefix_hits_up_to_prompt_minus_one_in_whole_blocks() -> None:
    # block_tokens 32, KV blocks of 16: the second request repeats the first's 2 blocks
    # (64 tokens) and adds a partial third: 64 cached. The third repeats the second fully
    # (80 tokens): at most (80 - 1) // 16 * 16 = 64 cached.
    reqs = [req(0, (1, 2), 64), req(1, (1, 2, 3), 80), req(2, (1, 2, 3), 80)]
    r = oracle_hit_rate(reqs, n_gpus=1, capacity_tokens=10_000)
    assert r.prompt_tokens == 224
    assert r.oracle_cached_tokens == 64 + 64
    assert r.infinite_cached_tokens == 64 + 64
    assert r.oracle_hit_rate == pytest.approx(128 / 224)


def test_a_different_prefix_shares_nothing_after_the_divergence() -> None:
    reqs = [req(0, (1, 2, 3), 96), req(1, (1, 9, 3), 96)]
    r = oracle_hit_rate(reqs, n_gpus=1, capacity_tokens=10_000)
    assert r.oracle_cached_tokens == 32  # block 1 only: block 3 follows another prefix


def test_capacity_is_pooled_over_gpus_and_evicts_lru() -> None:
    # Four conversations of 64 tokens each, then each repeated: a pool of 3 x 64 tokens
    # holds three, so under LRU every repeat misses (the classic LRU loop); 4 x 64 holds all.
    first = [req(i, (10 * i + 1, 10 * i + 2), 64) for i in range(4)]
    again = [req(4 + i, (10 * i + 1, 10 * i + 2), 64) for i in range(4)]
    small = oracle_hit_rate(first + again, n_gpus=3, capacity_tokens=64)
    big = oracle_hit_rate(first + again, n_gpus=4, capacity_tokens=64)
    assert small.oracle_cached_tokens == 0
    assert big.oracle_cached_tokens == 4 * 48  # (64 - 1) // 16 * 16 each
    assert small.infinite_cached_tokens == big.infinite_cached_tokens == 4 * 48
    more = oracle_hit_rate(first + again, n_gpus=8, capacity_tokens=64)
    assert more.oracle_hit_rate >= big.oracle_hit_rate >= small.oracle_hit_rate


def test_requests_without_blocks_share_nothing_and_bad_arguments_are_refused() -> None:
    reqs = [req(0, (), 64), req(1, (), 64)]
    assert oracle_hit_rate(reqs, 2, 1000).oracle_cached_tokens == 0
    with pytest.raises(ValueError, match="n_gpus"):
        oracle_hit_rate(reqs, 0, 1000)
    with pytest.raises(ValueError, match="multiple of the KV block size"):
        oracle_hit_rate([req(0, (1,), 20, block_tokens=20)], 1, 1000)
