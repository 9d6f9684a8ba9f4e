"""Scorer ``session``: stickiness of a session to one endpoint, as a bonus in ms.

The session's endpoint is chosen by rendezvous (highest-random-weight) hashing with bounded
load: weight(p) = BLAKE2b(session_id, p.id), over endpoints with ``load + 1 <= capacity``,
``capacity = max(session_load_floor, ceil(session_load_bound * (total load + 1) / n))``
(load = running + waiting + in_flight; defaults 1.25 and 4). Every router replica with the
same snapshot binds a session to the same endpoint; adding or removing an endpoint moves
only the sessions bound to it.

Formula::

    session_ms(p) = -hotspot_margin_ms   if p is the session's endpoint
                  = 0                    otherwise, or when the request has no session id

With weight 1 the bound endpoint wins unless its other terms exceed the best endpoint's
by more than ``hotspot_margin_ms`` (150): then the binding yields ("session-yield"), and
returns by itself once the endpoint recovers, as this is a function of the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint


def session_endpoint(inp: ScoreInput) -> Endpoint | None:
    """The endpoint the request's session is bound to (None without a session id)."""
    return inp.session_bound


class Session:
    name = "session"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        bound = session_endpoint(inp)
        bonus = -inp.config.hotspot_margin_ms
        return {
            e.id: (bonus if bound is not None and e.id == bound.id else 0.0) for e in inp.endpoints
        }
