"""Filters.

``same-pool``: keep endpoints whose ``pool`` equals ``config.pool``; no-op when it is empty.

``fresh``: drop endpoints whose metrics are stale (``metrics_at`` None or older than
``config.staleness_s`` at ``ctx.now``): stale data counts as saturated. When *every*
endpoint is stale they are all kept, and the scheduler adds ``config.stale_penalty_ms`` to
each (term ``stale``), so a deadline rejects them and they serve only as a last resort.

``same-region``: keep endpoints in the client's region (``request.client_region``); when
the request names no region, or no endpoint is in it, all are kept (a region without
capacity still gets served rather than failed). Not in the defaults: adding it gives the
"local-only" baseline of the geography benchmark, where remote regions are never used
while a local endpoint exists, however loaded.
"""

from __future__ import annotations

from preheat.core.routing.plugins.base import ScoreInput, is_stale
from preheat.core.routing.types import Endpoint


class SamePool:
    name = "same-pool"

    def filter(self, inp: ScoreInput) -> tuple[Endpoint, ...]:
        pool = inp.config.pool
        if not pool:
            return inp.endpoints
        return tuple(e for e in inp.endpoints if e.pool == pool)


class Fresh:
    name = "fresh"

    def filter(self, inp: ScoreInput) -> tuple[Endpoint, ...]:
        now, bound = inp.ctx.now, inp.config.staleness_s
        fresh = tuple(e for e in inp.endpoints if not is_stale(e, now, bound))
        return fresh if fresh else inp.endpoints


class SameRegion:
    name = "same-region"

    def filter(self, inp: ScoreInput) -> tuple[Endpoint, ...]:
        region = inp.ctx.request.client_region
        if not region:
            return inp.endpoints
        local = tuple(e for e in inp.endpoints if e.region == region)
        return local if local else inp.endpoints
