"""The router's own prefix history: which endpoints it recently sent which prompt blocks to.

An approximate prefix-cache index for endpoints that do not publish their cache
(``WatchCache``): a block routed to an endpoint within ``ttl_s`` is assumed still cached
there. Bounded to ``max_blocks`` distinct block hashes, least recently recorded evicted
first. A plain data structure: time comes in as ``now``; no clock, no I/O. Not thread-safe
(the router owns one per event loop).
"""

from __future__ import annotations

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
        """
        out: dict[str, int] = {}
        active: set[str] | None = None
        for i, h in enumerate(block_hashes):
            seen = self._blocks.get(h)
            if not seen:
                break
            alive = {ep for ep, t in seen.items() if now - t <= self.ttl_s}
            active = alive if active is None else active & alive
            if not active:
                break
            for ep in active:
                out[ep] = i + 1
        return out

    def record(self, endpoint_id: str, block_hashes: Sequence[int], now: float) -> None:
        """Remember that ``block_hashes`` were routed to ``endpoint_id`` at ``now``."""
        blocks = self._blocks
        for h in block_hashes:
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
