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

#: The most KV blocks one (simulated) replica may have: a GPU's KV cache is tens of thousands
#: of blocks (25,000 of 16 tokens for an 8B model on an H100); the sim engine keeps a list
#: entry per block, so 10 million is 80 MB, where 10**9 asked for 8 GB
MAX_GPU_BLOCKS = 10_000_000


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    """The chained hash of one block of ``tokens`` following the block named ``parent``."""
    h = hashlib.blake2b(digest_size=8)
    h.update(parent.to_bytes(8, "little"))
    h.update(array("I", tokens).tobytes())
    return int.from_bytes(h.digest(), "little")


def tenant_root(tenant: str) -> int:
    """The chain's root for ``tenant``'s prompts: ``ROOT_HASH`` without a tenant, else a hash of
    its name, so that the same prompt names different blocks for different tenants (one tenant
    cannot tell from cache hits which prompts another sent; vLLM's ``cache_salt`` idea)."""
    if not tenant:
        return ROOT_HASH
    digest = hashlib.blake2b(b"preheat-tenant\0" + tenant.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def block_hashes(tokens: Sequence[int], block_size: int, parent: int = ROOT_HASH) -> list[int]:
    """Chained hashes of every full block of ``tokens`` (a partial tail block is skipped)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    out: list[int] = []
    n_full = len(tokens) // block_size
    if n_full == 0:
        return out
    # the same bytes block_hash() hashes, converted once for the whole prompt
    data = memoryview(array("I", tokens[: n_full * block_size]).tobytes())
    step = 4 * block_size
    blake2b = hashlib.blake2b
    digest = parent.to_bytes(8, "little")  # a block's digest is its name, little-endian
    for start in range(0, n_full * step, step):
        h = blake2b(digest, digest_size=8)
        h.update(data[start : start + step])
        digest = h.digest()
        out.append(int.from_bytes(digest, "little"))
    return out
