"""The router's own prefix history: which endpoints it recently sent which prompt blocks to.

An approximate prefix-cache index for endpoints that do not publish their cache
(``WatchCache``): a block routed to an endpoint within ``ttl_s`` is assumed still cached
there. Bounded to ``max_blocks`` distinct block hashes, least recently recorded evicted
first. A plain data structure: time comes in as ``now``; no clock, no I/O. Not thread-safe
(the router owns one per event loop).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence


class PrefixHistory:
    def __init__(self, max_blocks: int = 200_000, ttl_s: float = 600.0) -> None:
        if max_blocks <= 0:
            raise ValueError(f"max_blocks must be > 0, got {max_blocks}")
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self.max_blocks = max_blocks
        self.ttl_s = ttl_s
        # block hash -> endpoint id -> when it was last routed there
        self._blocks: OrderedDict[int, dict[str, float]] = OrderedDict()

    def __len__(self) -> int:
        """Distinct block hashes held."""
        return len(self._blocks)

    def match(self, block_hashes: Sequence[int], now: float) -> dict[str, int]:
        """Endpoint id -> number of leading ``block_hashes`` routed there and not expired.
        Endpoints without even the first block are absent.

        Binary search per endpoint, on an invariant :meth:`record` keeps: for one endpoint,
        a block's prefix blocks were recorded no earlier than the block itself (every record
        writes the whole prompt) and are evicted no earlier (a record leaves the prompt's
        first block most recent), so "block k alive" implies "blocks < k alive".
        O(endpoints x log(blocks)) dict lookups instead of a pass over every block.
        """
        blocks = self._blocks
        n = len(block_hashes)
        first = blocks.get(block_hashes[0]) if n else None
        if not first:
            return {}
        oldest = now - self.ttl_s
        out: dict[str, int] = {}
        for ep, t in first.items():
            if t < oldest:
                continue
            lo, hi = 1, n  # blocks[:lo] are alive for ep; the answer is in [lo, hi]
            while lo < hi:
                mid = (lo + hi + 1) // 2
                seen = blocks.get(block_hashes[mid - 1])
                if seen is not None and seen.get(ep, -math.inf) >= oldest:
                    lo = mid
                else:
                    hi = mid - 1
            out[ep] = lo
        return out

    def record(self, endpoint_id: str, block_hashes: Sequence[int], now: float) -> None:
        """Remember that ``block_hashes`` were routed to ``endpoint_id`` at ``now``.

        Written last block first, so the first block ends most recent and deep blocks are
        evicted before the prefixes they extend (as an engine's prefix cache evicts leaves
        first); :meth:`match` relies on it."""
        blocks = self._blocks
        for h in reversed(block_hashes):
            seen = blocks.get(h)
            if seen is None:
                blocks[h] = {endpoint_id: now}
            else:
                seen[endpoint_id] = now
                blocks.move_to_end(h)
        while len(blocks) > self.max_blocks:
            blocks.popitem(last=False)

    def forget(self, endpoint_id: str) -> None:
        """Drop every record of ``endpoint_id`` (the endpoint is gone)."""
        empty: list[int] = []
        for h, seen in self._blocks.items():
            if seen.pop(endpoint_id, None) is not None and not seen:
                empty.append(h)
        for h in empty:
            del self._blocks[h]
