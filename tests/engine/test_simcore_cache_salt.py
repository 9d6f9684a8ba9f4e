"""A request's ``cache_salt`` (its tenant) scopes the sim engine's prefix cache: the same
prompt under another salt is a miss, so ``usage.cached_tokens`` tells a tenant nothing of
another's prompts, and the blocks are named as the router names them for that tenant."""

from __future__ import annotations

from preheat.core.blocks import block_hashes, tenant_root
from preheat.engine.base import CacheEvent, CacheEventKind, EngineRequest, Sampling
from preheat.engine.costmodel import CostModel
from preheat.engine.simcore import CoreConfig, SimCore

PROMPT = tuple(range(1000, 1100))  # six full blocks of 16


def _cached_tokens(core: SimCore, rid: str, salt: str, at: float) -> int:
    core.add(EngineRequest(rid, PROMPT, Sampling(max_tokens=1), cache_salt=salt), at)
    while (t := core.next_event_time()) is not None:
        for f in core.advance(t).finishes:
            if f.request_id == rid:
                return f.usage.cached_tokens
    raise AssertionError(f"{rid} did not finish")


def test_the_same_prompt_is_cached_only_within_its_salt() -> None:
    events: list[CacheEvent] = []
    core = SimCore(CoreConfig(), CostModel.default(), events.append)
    assert _cached_tokens(core, "a1", "team-a", 0.0) == 0
    assert _cached_tokens(core, "b1", "team-b", 10.0) == 0  # another tenant: a miss
    assert _cached_tokens(core, "n1", "", 20.0) == 0  # no tenant: a miss too
    assert _cached_tokens(core, "a2", "team-a", 30.0) == 96  # its own tenant: a hit
    stored = {h for e in events if e.kind is CacheEventKind.STORED for h in e.block_hashes}
    for salt in ("team-a", "team-b", ""):  # named as the router names them
        assert set(block_hashes(list(PROMPT), 16, tenant_root(salt))) <= stored
