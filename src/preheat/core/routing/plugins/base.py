"""The plugin shapes: a :class:`Filter` narrows the endpoints, a :class:`Scorer` gives each
remaining endpoint a cost in predicted milliseconds (lower is better).

Both receive one :class:`ScoreInput`; neither mutates it, reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.hashing import rendezvous
from preheat.core.routing.types import Endpoint, PrefillCost, RoutingContext


@dataclass(frozen=True)
class ScoreInput:
    """What a plugin sees: the snapshot, the endpoints still in play, the cost model, config."""

    ctx: RoutingContext
    endpoints: tuple[Endpoint, ...]
    cost: PrefillCost
    config: SchedulerConfig
    # uncached prompt tokens of a typical request: the scheduler's running average; 0 (none
    # routed yet) means config.typical_prompt_tokens
    typical_new_tokens: float = 0.0

    @property
    def typical_tokens(self) -> float:
        t = self.typical_new_tokens
        return t if t > 0 else self.config.typical_prompt_tokens

    @cached_property
    def session_bound(self) -> Endpoint | None:
        """The endpoint the request's session is bound to (rendezvous hashing with bounded
        load over ``endpoints``, see ``plugins/session.py``); None without a session id.
        Computed once per input, shared by the session scorer and the scheduler."""
        sid = self.ctx.request.session_id
        if not sid or not self.endpoints:
            return None
        c = self.config
        return rendezvous(sid, self.endpoints, c.session_load_bound, c.session_load_floor)


class Filter(Protocol):
    name: str

    def filter(self, inp: ScoreInput) -> tuple[Endpoint, ...]:
        """The endpoints of ``inp.endpoints`` that stay in play (order kept)."""
        ...


class Scorer(Protocol):
    name: str

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        """Endpoint id -> predicted ms (unweighted) for every endpoint of ``inp.endpoints``."""
        ...


def is_stale(endpoint: Endpoint, now: float, staleness_s: float) -> bool:
    """Metrics never refreshed, or older than ``staleness_s`` at ``now``."""
    return endpoint.metrics_at is None or now - endpoint.metrics_at > staleness_s
