"""Prefix blocks: a prompt cut into fixed-size token blocks named by a chained hash.

Block ``i`` is named ``h_i = H(h_{i-1} || tokens[i*B:(i+1)*B])`` with ``h_{-1} = ROOT``, so two
prompts share block ``i`` exactly when they share every token up to the end of block ``i``.
Only full blocks are named (a partial last block is never cached). The hash is the first 8
bytes of BLAKE2b, as an unsigned 64-bit integer: the same on every worker and router.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

ROOT_HASH = 0


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    """The chained hash of one block of ``tokens`` following the block named ``parent``."""
    h = hashlib.blake2b(digest_size=8)
    h.update(parent.to_bytes(8, "little"))
    h.update(array("I", tokens).tobytes())
    return int.from_bytes(h.digest(), "little")


def block_hashes(tokens: Sequence[int], block_size: int, parent: int = ROOT_HASH) -> list[int]:
    """Chained hashes of every full block of ``tokens`` (a partial tail block is skipped)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    out: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_hash(parent, tokens[start : start + block_size])
        out.append(parent)
    return out
