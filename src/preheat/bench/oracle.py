"""Prefix-cache hit rates a router cannot beat by much: the reference for the routing
benchmark. Pure functions of a trace; no clock, no I/O.

Hit rate everywhere here is token-weighted, as the simulator's run record counts it:
``sum(cached prompt tokens) / sum(prompt tokens)``, where a request's cached tokens are the
longest run of its leading full KV blocks (``block_size`` tokens each) already cached on
the GPU that serves it, at most ``prompt - 1`` tokens (the engine always computes the last
prompt token), i.e. at most ``(prompt - 1) // block_size`` blocks.

Two references, computed in one pass (:func:`oracle_hit_rate`):

``oracle`` (global view, the pool's KV as one cache): one LRU cache of ``n_gpus *
    capacity_tokens`` (the simulated engine's ``num_gpu_blocks * block_size`` per GPU),
    requests in arrival order, each request's blocks touched (or inserted) after it is
    served. This is what a router with perfect knowledge achieves on these GPUs when it
    never has to split a conversation to balance load and no KV is pinned by running
    requests: every prefix is cached exactly once in the pool and evicted
    least-recently-used across all GPUs. A router keeps each GPU's cache separately
    (the globally shared system prompt once per GPU: negligible) and must also balance
    load, so it gets below this. Why not "each request to the GPU holding its longest
    prefix, ignoring load": with a prefix every request shares (Mooncake's block 0), that
    greedy rule sends the whole trace to the first GPU and uses one GPU's cache only
    (4.4% on the Mooncake trace on 16 or 64 GPUs, against 24% and 36% here), so it is no
    bound at all.
``infinite`` (one shared cache of unbounded size): every block ever seen is cached
    everywhere: the trace's own prefix reuse, an upper bound no finite pool reaches
    (36.6% of block references for the Mooncake conversation trace, per its README).

Blocks: a trace block (``TraceRequest.prefix_block_ids``, ``block_tokens`` tokens each, the
last one partial) is identified by the chain of ids up to it (equal ids at equal positions
after equal prefixes = the same KV). ``block_tokens`` must be a multiple of ``block_size``;
a GPU holds, per trace block, the number of its leading tokens cached in full KV blocks.
Requests without block ids share nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from preheat.workload.traces import TraceRequest


@dataclass(frozen=True)
class OracleResult:
    prompt_tokens: int
    oracle_cached_tokens: int
    infinite_cached_tokens: int
    n_gpus: int
    capacity_tokens: int

    @property
    def oracle_hit_rate(self) -> float:
        return self.oracle_cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def infinite_hit_rate(self) -> float:
        return self.infinite_cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _blocks(req: TraceRequest, block_size: int) -> list[tuple[int, int]]:
    """(chain key, tokens of this trace block that fill whole KV blocks) per trace block."""
    ids = req.prefix_block_ids
    if not ids:
        return []
    bt = req.block_tokens
    if bt % block_size:
        raise ValueError(
            f"trace blocks of {bt} tokens are not a multiple of the KV block size {block_size}"
        )
    out: list[tuple[int, int]] = []
    chain = 0
    for j, b in enumerate(ids):
        chain = hash((chain, b))
        tokens = bt if j < len(ids) - 1 else req.input_tokens - bt * (len(ids) - 1)
        out.append((chain, (max(0, tokens) // block_size) * block_size))
    return out


def oracle_hit_rate(
    requests: Sequence[TraceRequest], n_gpus: int, capacity_tokens: int, block_size: int = 16
) -> OracleResult:
    """Both references of the module docstring for ``requests`` (taken in arrival order)."""
    if n_gpus <= 0:
        raise ValueError(f"n_gpus must be > 0, got {n_gpus}")
    if capacity_tokens < block_size:
        raise ValueError(f"capacity_tokens must hold a block, got {capacity_tokens}")
    capacity = n_gpus * capacity_tokens
    held: OrderedDict[int, int] = OrderedDict()  # chain key -> tokens cached, LRU first
    used = 0
    seen: dict[int, int] = {}  # infinite cache: chain key -> tokens ever cached
    prompt_total = oracle_total = infinite_total = 0
    for req in sorted(requests, key=lambda r: (r.arrival_s, r.index)):
        blocks = _blocks(req, block_size)
        limit = max(0, (req.input_tokens - 1) // block_size * block_size)
        prompt_total += req.input_tokens
        infinite_total += min(_prefix(blocks, seen), limit)
        oracle_total += min(_prefix(blocks, held), limit)
        for key, tokens in blocks:
            if seen.get(key, 0) < tokens:
                seen[key] = tokens
            have = held.get(key)
            if have is None:
                held[key] = tokens
                used += tokens
            else:
                if tokens > have:
                    held[key] = tokens
                    used += tokens - have
                held.move_to_end(key)
        while used > capacity and held:
            _, tokens = held.popitem(last=False)
            used -= tokens
    return OracleResult(prompt_total, oracle_total, infinite_total, n_gpus, capacity_tokens)


def _prefix(blocks: Sequence[tuple[int, int]], cache: Mapping[int, int]) -> int:
    """Leading tokens of ``blocks`` found in ``cache`` (a partly held block ends the run)."""
    run = 0
    for key, tokens in blocks:
        have = cache.get(key, 0)
        run += min(have, tokens)
        if have < tokens:
            break
    return run
