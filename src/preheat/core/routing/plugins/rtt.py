"""Scorer ``rtt``: network round trip (ms) from the client to the endpoint.

Formula, first that applies::

    endpoint.rtt_ms                                  measured by the router (EWMA)
    region_rtt_ms[client_region][p.region]           table (either direction)
    remote_region_rtt_ms   (60)                      regions known and different
    cross_zone_rtt_ms      (2)                       same region, zones known and different
    default_rtt_ms         (1)                       otherwise (same zone, or unknown)

Remote regions thus carry their RTT on every request and win only when the local
endpoints' predicted TTFT is worse by more than that (spill-over).

The score (the ranking term) applies a dead-band to that RTT: with ``lo`` the lowest RTT of
the endpoints in play and ``band`` = ``rtt_deadband_ms`` (5)::

    score(p) = lo + max(0, rtt(p) - lo - band)

so RTT differences within the band are not a reason to prefer an endpoint: measured RTTs
of endpoints in one zone differ by the measurement's noise (config.py gives the figures),
and a fastest-pinging worker took more than its share of requests. An endpoint further by
more than the band pays the excess (a remote region: nearly all of its RTT). The predicted
TTFT (admission, logs) uses the RTT itself (:func:`rtt_ms`), not the score.
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
        return deadband({e.id: rtt_ms(e, inp.ctx, inp.config) for e in inp.endpoints}, inp.config)


def deadband(rtts: Mapping[str, float], config: SchedulerConfig) -> dict[str, float]:
    """The score of the module docstring from each endpoint's RTT."""
    if not rtts:
        return {}
    lo = min(rtts.values())
    band = max(0.0, config.rtt_deadband_ms)
    return {eid: lo + max(0.0, r - lo - band) for eid, r in rtts.items()}
