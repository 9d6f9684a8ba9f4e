"""Stable 64-bit hashes for routing (BLAKE2b, never ``hash()``): every router replica and
every run computes the same values, so replicas with the same snapshot agree.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence

from preheat.core.routing.types import Endpoint


@functools.lru_cache(maxsize=1 << 16)
def hash64(*parts: str | int) -> int:
    """An unsigned 64-bit hash of ``parts`` (strings and integers, order-sensitive).

    Each part is written as a type tag, its length and its text, so ``("ab", "c")`` and
    ``("a", "bc")`` differ; one BLAKE2b call over the whole. Memoised (a pure function;
    the router hashes the same session against the same endpoints on every request).
    """
    text = "".join(
        f"i{len(t)}:{t}" if isinstance(p, int) else f"s{len(p)}:{p}"
        for p in parts
        for t in (str(p),)
    )
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def load(endpoint: Endpoint) -> int:
    """Requests on an endpoint: running + waiting in the engine + in flight from this router."""
    return endpoint.num_running + endpoint.num_waiting + endpoint.in_flight


def load_capacity(endpoints: Sequence[Endpoint], bound: float, floor: int = 1) -> int:
    """Consistent hashing with bounded loads: ``max(floor, ceil(c * (total load + 1) / n))``.

    An endpoint may take one more request while ``load + 1 <= capacity``.
    """
    if not endpoints:
        return 0
    total = sum(load(e) for e in endpoints)
    return max(1, floor, math.ceil(bound * (total + 1) / len(endpoints)))


def rendezvous(
    key: str, endpoints: Sequence[Endpoint], bound: float, floor: int = 1
) -> Endpoint | None:
    """Highest-random-weight endpoint for ``key`` among those under the load bound.

    Weight = hash64(key, endpoint id); an endpoint with ``load + 1 > capacity`` (see
    :func:`load_capacity`) is skipped.
    Falls back to the least-loaded endpoint when every one is over (cannot happen with
    ``bound >= 1``, kept for safety). None only when ``endpoints`` is empty.
    """
    if not endpoints:
        return None
    cap = load_capacity(endpoints, bound, floor)
    best: Endpoint | None = None
    best_w = -1
    for e in endpoints:
        if load(e) + 1 > cap:
            continue
        w = hash64(key, e.id)
        if w > best_w or (w == best_w and best is not None and e.id < best.id):
            best, best_w = e, w
    if best is None:
        best = min(endpoints, key=lambda e: (load(e), e.id))
    return best
