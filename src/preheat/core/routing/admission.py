"""Admission at the router: how much of one pool's demand the router lets through, as pure
functions of a snapshot (``now`` comes in; no clock, no I/O, inputs are not mutated).

Two rules protect a pool's tail even when clients send no deadline:

1. **A default TTFT target** (:func:`ttft_target_ms`): a request that names no deadline and
   no SLO class is admitted against the pool's TTFT objective (the router's
   ``defaultTtftTargetMs``, which ``preheat up`` fills from the pool file); the scheduler
   rejects it when no endpoint predicts its first token within it.
2. **A bound on what the router holds** (:func:`admit`): at most ``limit`` requests of the
   pool in flight (sent to a worker and not finished), ``limit = per_endpoint x routable
   endpoints``, plus ``max_held`` waiting for a routable endpoint (the dispatcher's queue).
   ``per_endpoint`` adapts to the TTFT the router observes against the target
   (:func:`observe_ttft`, a gradient rule as in Netflix's concurrency-limits)::

       over the target:  new = per_endpoint * max(0.5, target / ttft)
       within it:        new = per_endpoint + sqrt(per_endpoint)
       per_endpoint' = per_endpoint + SMOOTHING * (new - per_endpoint)

   a sample within the target grows the limit only while the limit is what holds requests
   back (``in_flight >= limit / 2``); a sample over it shrinks the limit only if its request
   arrived after the limit last shrank (``LimitState.shrunk_at``): the requests admitted
   before were let in under the limit that already shrank for them, so their late first
   tokens say nothing new (TCP's one decrease per round trip). Without that rule each of an
   overload's queued requests shrank the limit again as its first token came, drove it to
   its floor and kept refusing after the queue had drained: in the simulator, 17 pods
   after a minute at 378 req/s refused 566 requests in the next minute that a deadline
   alone would have served (docs/benchmarks.md, *Admission in the simulator*). Bounded by
   ``min_per_endpoint`` below and by the endpoints' ``max_num_seqs`` (what they run at once)
   and ``max_in_flight`` above.

   The predicted TTFT alone misses overload on an engine that takes every request into its
   running batch (each decode step slows down, no queue forms); the observed TTFT does not.

Past the bound a request is refused (RESOURCE_EXHAUSTED, HTTP 429) with a retry-after of the
predicted drain time: ``(in_flight - limit + 1) / completion rate`` (requests finished per
second, observed), clamped to ``[min_retry_after_s, max_retry_after_s]``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from preheat.core.routing.types import Endpoint

#: weight of one TTFT sample in the limit's moving average
SMOOTHING = 0.2
#: a sample over the target shrinks the limit by at most this factor at once
MIN_GRADIENT = 0.5


@dataclass(frozen=True)
class AdmissionConfig:
    """How the router bounds one pool (every field has a default)."""

    #: TTFT target (ms) for requests that name no deadline or SLO class; 0: none (requests
    #: without a deadline are then bounded only by the concurrency limit, at its ceiling)
    default_ttft_target_ms: float = 2000.0
    #: hard ceiling of requests in flight for the pool; 0: the endpoints' ``max_num_seqs`` sum
    max_in_flight: int = 0
    #: the adaptive limit never goes below this many requests per routable endpoint
    min_per_endpoint: int = 2
    #: the adaptive limit's start, per routable endpoint
    initial_per_endpoint: int = 16
    min_retry_after_s: float = 1.0
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        problems = []
        if not self.default_ttft_target_ms >= 0 or math.isinf(self.default_ttft_target_ms):
            problems.append(
                f"default_ttft_target_ms must be >= 0, got {self.default_ttft_target_ms}"
            )
        if self.max_in_flight < 0:
            problems.append(f"max_in_flight must be >= 0, got {self.max_in_flight}")
        if self.min_per_endpoint < 1:
            problems.append(f"min_per_endpoint must be >= 1, got {self.min_per_endpoint}")
        if self.initial_per_endpoint < self.min_per_endpoint:
            problems.append("initial_per_endpoint must be >= min_per_endpoint")
        if not 0 <= self.min_retry_after_s <= self.max_retry_after_s:
            problems.append("need 0 <= min_retry_after_s <= max_retry_after_s")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class LimitState:
    """The adaptive limit, per routable endpoint (a float: it moves by fractions)."""

    per_endpoint: float
    #: when the limit last shrank (the caller's clock; -inf: never)
    shrunk_at: float = -math.inf


def initial_state(config: AdmissionConfig) -> LimitState:
    return LimitState(float(config.initial_per_endpoint))


def ttft_target_ms(
    deadline_ms: float | None, slo_deadline_ms: float | None, config: AdmissionConfig
) -> float | None:
    """The TTFT the request is admitted against: its own deadline, else its SLO class's,
    else the pool's default target (None: no target)."""
    if deadline_ms is not None:
        return deadline_ms
    if slo_deadline_ms is not None:
        return slo_deadline_ms
    return config.default_ttft_target_ms if config.default_ttft_target_ms > 0 else None


def _ceiling_per_endpoint(endpoints: Sequence[Endpoint], config: AdmissionConfig) -> float:
    n = max(1, len(endpoints))
    seqs = sum(max(1, e.max_num_seqs) for e in endpoints) / n if endpoints else math.inf
    if config.max_in_flight > 0:
        seqs = min(seqs, config.max_in_flight / n)
    return max(float(config.min_per_endpoint), seqs)


def observe_ttft(
    state: LimitState,
    ttft_ms: float,
    target_ms: float,
    in_flight: int,
    endpoints: Sequence[Endpoint],
    config: AdmissionConfig,
    *,
    arrived_at: float | None = None,
    now: float | None = None,
) -> LimitState:
    """The limit after one request's first token came ``ttft_ms`` after it arrived (see
    the module docstring). ``in_flight``: the pool's requests in flight at that moment;
    ``arrived_at`` and ``now``: when the request arrived and the first token came, on one
    clock (None: unknown, and every late first token shrinks the limit)."""
    if target_ms <= 0 or not math.isfinite(ttft_ms) or ttft_ms < 0:
        return state
    cur = state.per_endpoint
    n = max(1, len(endpoints))
    late = ttft_ms > target_ms
    if not late and in_flight < cur * n / 2:
        return state  # the limit held nothing back: a good sample says nothing about it
    if late and arrived_at is not None and arrived_at < state.shrunk_at:
        return state  # admitted before the limit shrank: already answered
    new = cur * max(MIN_GRADIENT, target_ms / ttft_ms) if late else cur + math.sqrt(cur)
    nxt = cur + SMOOTHING * (new - cur)
    nxt = min(_ceiling_per_endpoint(endpoints, config), max(float(config.min_per_endpoint), nxt))
    shrunk_at = state.shrunk_at
    if late and now is not None and nxt < cur:
        shrunk_at = now
    return dataclasses.replace(state, per_endpoint=nxt, shrunk_at=shrunk_at)


@dataclass(frozen=True)
class Admission:
    admitted: bool
    limit: int  # the pool's bound on requests in flight at this moment
    explanation: str
    retry_after_s: float | None = None


@dataclass(frozen=True)
class AdmissionInput:
    """What :func:`admit` decides from: a snapshot of the pool at ``now``."""

    now: float
    in_flight: int  # the pool's requests this router has sent and not yet finished
    endpoints: tuple[Endpoint, ...]  # routable ones
    completions_per_s: float  # observed rate of finished requests (0: unknown)
    pool: str = ""


def pool_limit(state: LimitState, endpoints: Sequence[Endpoint], config: AdmissionConfig) -> int:
    """The pool's bound on requests in flight: per endpoint x routable endpoints, within
    the ceiling (at least ``min_per_endpoint`` per endpoint); with no default target, the
    ceiling."""
    ceiling = _ceiling_per_endpoint(endpoints, config)
    if config.default_ttft_target_ms <= 0:
        per = ceiling  # no target to adapt to: only the ceiling bounds
    else:
        per = max(float(config.min_per_endpoint), min(ceiling, state.per_endpoint))
    limit = math.floor(per * len(endpoints) + 1e-9)
    if config.max_in_flight > 0:
        limit = min(limit, config.max_in_flight)
    return limit


def admit(inp: AdmissionInput, state: LimitState, config: AdmissionConfig) -> Admission:
    """Admits one more request, or refuses it with the predicted drain time as retry-after.
    With no routable endpoint it admits (the dispatcher's bounded queue holds it)."""
    if not inp.endpoints:
        return Admission(True, 0, "no routable endpoint: held in the router's queue")
    limit = pool_limit(state, inp.endpoints, config)
    if inp.in_flight < limit:
        return Admission(True, limit, f"{inp.in_flight} of {limit} in flight")
    excess = inp.in_flight - limit + 1
    if inp.completions_per_s > 0:
        drain = excess / inp.completions_per_s
        how = f"{excess} to finish at {inp.completions_per_s:.1f}/s"
    else:
        drain = config.min_retry_after_s
        how = "no completion rate observed yet"
    retry = min(config.max_retry_after_s, max(config.min_retry_after_s, drain))
    pool = f"pool {inp.pool!r}" if inp.pool else "the pool"
    return Admission(
        False,
        limit,
        f"{pool} is at its concurrency limit ({inp.in_flight} of {limit} requests in flight "
        f"on {len(inp.endpoints)} endpoint(s)); predicted drain {drain:.2f} s ({how}); "
        f"retry after {retry:.2f} s",
        retry_after_s=retry,
    )
