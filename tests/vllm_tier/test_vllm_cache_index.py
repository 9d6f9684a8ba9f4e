"""The translation of vLLM's KV events into Preheat block names (pure; no engine)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

from preheat.core.blocks import block_hashes
from preheat.engine.base import CacheEvent, CacheEventKind
from preheat.engine.vllm import _CacheIndex

pytestmark = pytest.mark.vllm

B = 4
TOKENS = list(range(100, 112))  # three blocks of four


def index() -> tuple[_CacheIndex, list[CacheEvent]]:
    idx = _CacheIndex(B)
    events: list[CacheEvent] = []
    idx.listener = events.append
    return idx, events


def test_stored_blocks_get_chained_preheat_hashes_across_events() -> None:
    idx, events = index()
    ours = block_hashes(TOKENS, B)
    idx.stored([b"v0", b"v1"], None, TOKENS[:8], B)
    idx.stored([b"v2"], b"v1", TOKENS[8:], B)  # a later event continues the chain
    assert events == [
        CacheEvent(CacheEventKind.STORED, tuple(ours[:2])),
        CacheEvent(CacheEventKind.STORED, (ours[2],)),
    ]
    assert idx.cached() == frozenset(ours)


def test_removed_translates_and_unknown_hashes_are_ignored() -> None:
    idx, events = index()
    ours = block_hashes(TOKENS, B)
    idx.stored([1, 2, 3], None, TOKENS, B)
    idx.removed([3, 99])
    assert events[-1] == CacheEvent(CacheEventKind.REMOVED, (ours[2],))
    assert idx.cached() == frozenset(ours[:2])


def test_same_preheat_block_from_two_vllm_blocks_is_removed_with_the_last() -> None:
    # vLLM's hash also covers extra keys (cache salt, LoRA): two vLLM blocks, one name of ours.
    idx, events = index()
    idx.stored([1], None, TOKENS[:4], B)
    idx.stored([2], None, TOKENS[:4], B)
    assert len(events) == 1
    idx.removed([1])
    assert len(idx.cached()) == 1
    idx.removed([2])
    assert idx.cached() == frozenset()
    assert events[-1].kind is CacheEventKind.REMOVED


def test_unknown_parent_is_skipped_and_cleared_resets() -> None:
    idx, events = index()
    idx.stored([5], b"never-seen", TOKENS[:4], B)
    assert events == []
    idx.stored([1], None, TOKENS[:4], B)
    idx.cleared()
    assert idx.cached() == frozenset()
    assert events[-1] == CacheEvent(CacheEventKind.CLEARED)


def test_a_failing_listener_does_not_break_the_index() -> None:
    idx = _CacheIndex(B)

    def boom(event: CacheEvent) -> None:
        raise RuntimeError("listener bug")

    idx.listener = boom
    idx.stored([1], None, TOKENS[:4], B)
    assert len(idx.cached()) == 1
