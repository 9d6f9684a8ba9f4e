"""vLLM publishes a request's ``cache_salt`` among the first block's extra keys; the worker
names a salted chain from the salt's root, as the router does for that tenant (pure)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

from preheat.core.blocks import block_hashes, tenant_root
from preheat.engine.base import CacheEvent, CacheEventKind
from preheat.engine.vllm import _CacheIndex

pytestmark = pytest.mark.vllm

B = 4
TOKENS = list(range(100, 112))  # three blocks of four


@pytest.mark.parametrize(
    ("extra_keys", "salt"),
    [
        (None, ""),
        ([None, None, None], ""),
        ([("team-a",), None, None], "team-a"),
        ([("my-lora", ("mm-1", 0), "team-b"), None, None], "team-b"),  # the salt comes last
    ],
)
def test_a_salted_first_block_roots_the_chain_at_the_salt(
    extra_keys: list[tuple[object, ...] | None] | None, salt: str
) -> None:
    idx = _CacheIndex(B)
    events: list[CacheEvent] = []
    idx.listener = events.append
    idx.stored([b"v0", b"v1", b"v2"], None, TOKENS, B, extra_keys)
    want = tuple(block_hashes(TOKENS, B, tenant_root(salt)))
    assert events == [CacheEvent(CacheEventKind.STORED, want)]
    idx.stored([b"v3"], b"v2", list(range(200, 204)), B)  # a later event continues it
    assert idx.cached() == frozenset(
        block_hashes([*TOKENS, *range(200, 204)], B, tenant_root(salt))
    )
