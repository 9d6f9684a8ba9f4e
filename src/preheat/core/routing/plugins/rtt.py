"""Scorer ``rtt``: network round trip (ms) from the client to the endpoint.

Formula, first that applies::

    endpoint.rtt_ms                                  measured by the router (EWMA)
    region_rtt_ms[client_region][p.region]           table (either direction)
    remote_region_rtt_ms   (60)                      regions known and different
    cross_zone_rtt_ms      (2)                       same region, zones known and different
    default_rtt_ms         (1)                       otherwise (same zone, or unknown)

Remote regions thus carry their RTT on every request and win only when the local
endpoints' predicted TTFT is worse by more than that (spill-over).
Inputs: ``endpoint.rtt_ms``, ``region``, ``zone``; ``request.client_region``,
``client_zone``; ``ctx.region_rtt_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint, RoutingContext


def rtt_ms(endpoint: Endpoint, ctx: RoutingContext, config: SchedulerConfig) -> float:
    """The formula above for one endpoint."""
    if endpoint.rtt_ms is not None:
        return max(0.0, endpoint.rtt_ms)
    client, region = ctx.request.client_region, endpoint.region
    if client and region:
        table = ctx.region_rtt_ms
        if region in table.get(client, {}):
            return max(0.0, table[client][region])
        if client in table.get(region, {}):
            return max(0.0, table[region][client])
        if client != region:
            return config.remote_region_rtt_ms
    if ctx.request.client_zone and endpoint.zone and ctx.request.client_zone != endpoint.zone:
        return config.cross_zone_rtt_ms
    return config.default_rtt_ms


class Rtt:
    name = "rtt"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        return {e.id: rtt_ms(e, inp.ctx, inp.config) for e in inp.endpoints}
