"""Block names for trace prompts without token ids or hashing (the simulator's fast path).

A live worker names block ``i`` of a prompt by a chained hash of its tokens
(``preheat.core.blocks``); two prompts share a block exactly when every token up to its end
is the same. A trace prompt's text is fixed by its trace block ids
(``workload.traces.prompt_text``: block id ``b`` always becomes the same words; the last
block is a prefix of its text), so the same equality holds for a cheaper name:
``hash((chain of trace ids up to the trace block, position in it))``. Prefix-cache hits,
the router's cached-block counts and evictions are the same as live; only the numbers that
name the blocks differ. Requests without trace blocks get names of their own.

Integer tuple hashes do not depend on ``PYTHONHASHSEED``: runs are reproducible.
"""

from __future__ import annotations

from preheat.workload.traces import TraceRequest

_MASK = (1 << 63) - 1
_SUB_BITS = 6  # sub-blocks of one trace block get consecutive names: chain << 6 | k
_CHAIN_MASK = (1 << (64 - _SUB_BITS)) - 1  # names stay below 2**64 (SimCore chains them)


class BlockNamer:
    """Names the full ``block_size``-token blocks of trace prompts; memoizes per trace
    block chain, so a shared prefix is named once. The sub-blocks of a trace block are named
    ``chain << 6 | k``: consecutive integers, made at C speed."""

    def __init__(self, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self.block_size = block_size
        self._chain: dict[tuple[int, int], int] = {}

    def names(self, req: TraceRequest) -> tuple[int, ...]:
        bs = self.block_size
        n_full = req.input_tokens // bs
        ids = req.prefix_block_ids
        if not ids:
            base = (hash(("unique", req.index)) & _CHAIN_MASK) << _SUB_BITS
            return (
                tuple(range(base, base + n_full))
                if n_full <= 1 << _SUB_BITS
                else tuple(hash((base, k)) & _MASK for k in range(n_full))
            )
        bt = req.block_tokens
        if bt % bs or bt // bs > 1 << _SUB_BITS:
            return self._general(req, n_full)
        per = bt // bs
        out: list[int] = []
        chain = 0
        for b in ids:
            key = (chain, b)
            c = self._chain.get(key)
            if c is None:
                c = hash(key) & _CHAIN_MASK
                self._chain[key] = c
            chain = c
            base = c << _SUB_BITS
            out.extend(range(base, base + per))
            if len(out) >= n_full:
                break
        return tuple(out[:n_full])

    def _general(self, req: TraceRequest, n_full: int) -> tuple[int, ...]:
        """Blocks that straddle trace blocks: name each by the chain of every trace block it
        touches and its token range."""
        bs, bt = self.block_size, req.block_tokens
        ids = req.prefix_block_ids
        chains: list[int] = []
        chain = 0
        for b in ids:
            chain = hash((chain, b)) & _MASK
            chains.append(chain)
        out: list[int] = []
        for i in range(n_full):
            last_tok = (i + 1) * bs - 1
            j = min(last_tok // bt, len(chains) - 1)
            out.append(hash((chains[j], i * bs - j * bt, last_tok - j * bt)) & _MASK)
        return tuple(out)
