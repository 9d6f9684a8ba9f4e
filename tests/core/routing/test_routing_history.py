"""PrefixHistory: the router's approximate prefix index."""

from __future__ import annotations

import random

import pytest

from preheat.core.routing.history import PrefixHistory


def test_match_counts_leading_blocks_per_endpoint() -> None:
    h = PrefixHistory()
    h.record("a", [1, 2, 3, 4], now=0.0)
    h.record("b", [1, 2, 9], now=0.0)
    assert h.match([1, 2, 3, 4, 5], now=1.0) == {"a": 4, "b": 2}
    assert h.match([1, 2, 9], now=1.0) == {"a": 2, "b": 3}
    assert h.match([7, 1, 2], now=1.0) == {}
    assert h.match([], now=1.0) == {}


def test_expired_blocks_do_not_match() -> None:
    h = PrefixHistory(ttl_s=10.0)
    h.record("a", [1, 2, 3], now=0.0)
    h.record("a", [1], now=8.0)
    assert h.match([1, 2, 3], now=9.0) == {"a": 3}
    assert h.match([1, 2, 3], now=12.0) == {"a": 1}  # blocks 2, 3 expired; 1 refreshed
    assert h.match([1, 2, 3], now=20.0) == {}


def test_bounded_evicts_least_recently_recorded() -> None:
    h = PrefixHistory(max_blocks=3)
    h.record("a", [1, 2], now=0.0)
    h.record("a", [10, 11], now=1.0)  # evicts block 2: the leaf of the older prompt goes first
    assert len(h) == 3
    assert h.match([1, 2], now=2.0) == {"a": 1}
    assert h.match([10, 11], now=2.0) == {"a": 2}
    h.record("a", [20], now=3.0)  # then its prefix
    assert h.match([1, 2], now=4.0) == {}


def test_match_agrees_with_a_block_by_block_scan() -> None:
    rng = random.Random(7)
    h = PrefixHistory(max_blocks=60, ttl_s=50.0)
    prompts = [[rng.randrange(6) for _ in range(rng.randrange(1, 12))] for _ in range(40)]
    for step in range(300):
        p = prompts[rng.randrange(len(prompts))]
        chain = [hash(tuple(p[: i + 1])) for i in range(len(p))]  # chained like block hashes
        now = float(step)
        if rng.random() < 0.5:
            h.record(f"e{rng.randrange(5)}", chain, now)
        got = h.match(chain, now)
        want: dict[str, int] = {}
        for ep in {f"e{i}" for i in range(5)}:
            depth = 0
            for b in chain:
                seen = h._blocks.get(b, {})
                if ep in seen and now - seen[ep] <= h.ttl_s:
                    depth += 1
                else:
                    break
            if depth:
                want[ep] = depth
        assert got == want, (step, chain)


def test_forget_drops_an_endpoint() -> None:
    h = PrefixHistory()
    h.record("a", [1, 2], now=0.0)
    h.record("b", [1], now=0.0)
    h.forget("a")
    assert h.match([1, 2], now=0.0) == {"b": 1}
    assert len(h) == 1
    h.forget("zzz")  # unknown: no-op


@pytest.mark.parametrize(("max_blocks", "ttl_s"), [(0, 1.0), (1, 0.0)])
def test_bad_bounds_are_refused(max_blocks: int, ttl_s: float) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        PrefixHistory(max_blocks=max_blocks, ttl_s=ttl_s)
