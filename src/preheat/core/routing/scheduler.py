"""The scheduler: filters -> scorers (predicted ms) -> one picker, as a pure function.

:func:`schedule` reads no clock (``ctx.now``), does no I/O and mutates nothing; the same
snapshot, config and state give the same decision on every router replica.

The ``preheat`` policy (DESIGN.md, Routing): every scorer gives each endpoint a cost in
predicted milliseconds (``plugins/``; weights from the config), the picker takes the lowest
total. Totals within ``tie_margin_ms`` of the lowest are a tie, which goes to the endpoint
this policy picked least recently (``SchedulerState.last_picked``), then by
``hash64(session id or request id, endpoint id)``: identical endpoints take turns. The
predicted TTFT of an endpoint is the physical part: ``rtt + queue + prefill`` (the measured
RTT; the ``rtt`` scorer ranks with a dead-band, ``plugins/rtt.py``; + the stale penalty);
``kv-pressure``, ``decode-interference`` (the latency a placement adds to the requests
already decoding there) and ``session`` only steer, within ``steer_budget_ms``: an endpoint
whose total without them (its weighted predicted TTFT) is more than that many ms over the
lowest such total is not picked (the session's endpoint excepted: it yields by
``hotspot_margin_ms``; the bound is read among the endpoints the deadline admits). With a
TTFT deadline, only endpoints predicted within it are eligible (the prediction plus how much
later than predicted the endpoint's first tokens have lately come, ``calibration.py``;
the ranking does not read that); none: the request is
rejected with a retry-after of
``max(min_retry_after_s, (best predicted TTFT - deadline) / 1000)`` (the queue drains in
real time). Against the pool's default target (``RequestInfo.deadline_is_default``) a stale
endpoint is judged on its last figures, without the stale penalty: a router that stalled for
longer than ``staleness_s`` (its refreshes could not run) would otherwise refuse every
request that named no deadline until they ran again.

Decision reasons (``REASONS``):

- ``session``: the session's endpoint (rendezvous hashing, bounded load) was chosen (in
  another region than the client, the explanation says it spills over);
- ``spill-over``: the chosen endpoint is in another region than the client;
- ``session-yield``: the session's endpoint was predicted worse than the best by more than
  ``hotspot_margin_ms`` (or was filtered out), so another one was chosen;
- ``prefix``: the chosen endpoint is predicted to hold part of the prompt in its cache;
- ``least-latency``: otherwise;
- ``rejected``: no endpoint predicts within the request's deadline;
- ``no-endpoints``: nothing routable;
- a baseline's policy name, for baselines.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.routing import baselines, calibration
from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import DEFAULT_FILTERS, DEFAULT_SCORERS, SchedulerConfig
from preheat.core.routing.hashing import hash64, load
from preheat.core.routing.plugins.base import ScoreInput, is_stale
from preheat.core.routing.plugins.prefix import cached_blocks, new_tokens, prefill_ms
from preheat.core.routing.plugins.queue import queue_wait_ms
from preheat.core.routing.plugins.registry import FILTERS, SCORERS
from preheat.core.routing.plugins.rtt import rtt_ms
from preheat.core.routing.plugins.session import session_endpoint
from preheat.core.routing.types import (
    Candidate,
    Endpoint,
    PrefillCost,
    RequestInfo,
    RouteDecision,
    RoutingContext,
)

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORERS",
    "POLICIES",
    "REASONS",
    "SchedulerConfig",
    "SchedulerState",
    "predict_ttft_ms",
    "schedule",
]

REASONS: tuple[str, ...] = (
    "session",
    "spill-over",
    "session-yield",
    "prefix",
    "least-latency",
    "rejected",
    "no-endpoints",
)

# the physical terms of the predicted TTFT besides the RTT (which is rtt_ms itself: the rtt
# scorer's output is its dead-banded ranking term)
_PHYSICAL = ("queue", "prefix")

_Baseline = Callable[
    [Sequence[Endpoint], RequestInfo, SchedulerConfig, SchedulerState], baselines.Pick
]
_BASELINES: Mapping[str, _Baseline] = {
    "round-robin": baselines.round_robin,
    "random": baselines.random_pick,
    "least-request": baselines.least_request,
    "p2c": baselines.p2c,
    "chwbl": baselines.chwbl,
    "session-only": baselines.session_only,
}

POLICIES: tuple[str, ...] = ("preheat", "prefix-only", *_BASELINES)


def predict_ttft_ms(
    endpoint: Endpoint, ctx: RoutingContext, cost: PrefillCost, config: SchedulerConfig
) -> float:
    """Predicted TTFT (ms) of ``ctx.request`` on ``endpoint``: rtt + queue + prefill of the
    uncached prompt, plus ``stale_penalty_ms`` when its metrics are stale."""
    t = (
        rtt_ms(endpoint, ctx, config)
        + queue_wait_ms(
            endpoint,
            cost,
            config,
            priority=ctx.request.priority,
            clock=ctx.step_clocks.get(endpoint.id),
            now=ctx.now,
        )
        + prefill_ms(endpoint, ctx, cost)
    )
    if is_stale(endpoint, ctx.now, config.staleness_s):
        t += config.stale_penalty_ms
    return t


def schedule(
    ctx: RoutingContext, config: SchedulerConfig, cost: PrefillCost, state: SchedulerState
) -> tuple[RouteDecision, SchedulerState]:
    """Where ``ctx.request`` goes, and the next state. See the module docstring.

    ``RouteDecision.endpoint`` is None with reason ``rejected`` (deadline unreachable) or
    ``no-endpoints``, both with ``retry_after_s``. Raises ``PreheatError(INVALID_ARGUMENT)``
    only for a config naming an unknown policy, filter or scorer (validate it with
    ``preheat.api.routing`` first).
    """
    endpoints = _filter(ctx, config, cost)
    if not endpoints:
        return _no_endpoints(ctx, config), state
    if config.policy == "preheat":
        decision = _preheat(
            ctx, config, cost, endpoints, config.scorers, state.new_tokens_ewma, state
        )
        return decision, _observe(decision, ctx, config, state)
    if config.policy == "prefix-only":
        return _prefix_only(ctx, config, cost, endpoints), state
    pick = _BASELINES.get(config.policy)
    if pick is None:
        raise PreheatError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown routing policy {config.policy!r}; known: {', '.join(POLICIES)}",
        )
    chosen, new_state, detail = pick(endpoints, ctx.request, config, state)
    return _baseline_decision(ctx, config, cost, chosen, detail), new_state


def _observe(
    decision: RouteDecision, ctx: RoutingContext, config: SchedulerConfig, state: SchedulerState
) -> SchedulerState:
    """The state after routing ``decision``: its uncached prompt tokens folded into the
    running average the queue scorer prices a typical request ahead with, and the chosen
    endpoint's turn recorded for tie-breaking (ids no longer in the snapshot are dropped
    once the record holds twice as many as the snapshot)."""
    e = decision.endpoint
    if e is None:
        return state
    turn = state.decisions + 1
    picked = dict(state.last_picked)
    picked[e.id] = turn
    if len(picked) > 2 * len(ctx.endpoints):
        live = {x.id for x in ctx.endpoints}
        picked = {k: v for k, v in picked.items() if k in live}
    ewma = state.new_tokens_ewma
    alpha = config.typical_prompt_alpha
    if alpha > 0:
        req = ctx.request
        uncached = max(1, new_tokens(req, decision.cached_blocks))
        ewma = float(uncached) if ewma <= 0 else ewma + alpha * (uncached - ewma)
    return dataclasses.replace(state, new_tokens_ewma=ewma, decisions=turn, last_picked=picked)


# --- filters ---------------------------------------------------------------------------


def _filter(
    ctx: RoutingContext, config: SchedulerConfig, cost: PrefillCost
) -> tuple[Endpoint, ...]:
    endpoints = ctx.endpoints
    for name in config.filters:
        f = FILTERS.get(name)
        if f is None:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT,
                f"unknown routing filter {name!r}; known: {', '.join(FILTERS)}",
            )
        endpoints = f.filter(ScoreInput(ctx, endpoints, cost, config))
        if not endpoints:
            break
    return endpoints


def _no_endpoints(ctx: RoutingContext, config: SchedulerConfig) -> RouteDecision:
    n = len(ctx.endpoints)
    why = "none was given" if n == 0 else f"all {n} given were filtered out"
    pool = f" of pool {config.pool!r}" if config.pool else ""
    return RouteDecision(
        endpoint=None,
        predicted_ttft_ms=0.0,
        reason="no-endpoints",
        explanation=f"no routable endpoint{pool}: {why}",
        retry_after_s=config.no_endpoints_retry_after_s,
    )


# --- the preheat policy ----------------------------------------------------------------


def _tie_key(ctx: RoutingContext, endpoint: Endpoint) -> tuple[int, str]:
    key = ctx.request.session_id or ctx.request.request_id
    return (-hash64(key, endpoint.id), endpoint.id)


def _preheat(
    ctx: RoutingContext,
    config: SchedulerConfig,
    cost: PrefillCost,
    endpoints: tuple[Endpoint, ...],
    scorers: Sequence[tuple[str, float]],
    typical_new_tokens: float = 0.0,
    state: SchedulerState | None = None,
) -> RouteDecision:
    inp = ScoreInput(ctx, endpoints, cost, config, typical_new_tokens)
    raw: dict[str, Mapping[str, float]] = {}
    for name in _scorer_names(tuple(scorers)):
        scorer = SCORERS.get(name)  # looked up per call: the registry is the one source
        if scorer is None:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT,
                f"unknown routing scorer {name!r}; known: {', '.join(SCORERS)}",
            )
        raw[name] = scorer.score(inp)
    session_on = any(n == "session" for n, _ in scorers)
    bound = session_endpoint(inp) if session_on else None

    candidates: list[Candidate] = []
    ttft: dict[str, float] = {}
    keyed: list[tuple[tuple[float, bool, str], Candidate]] = []
    weighted = [(name, w, raw[name]) for name, w in scorers]
    physical = [raw[name] for name in _PHYSICAL]
    bound_id = bound.id if bound is not None else None
    now, staleness_s, penalty = ctx.now, config.staleness_s, config.stale_penalty_ms
    rtt_of = {e.id: rtt_ms(e, ctx, config) for e in endpoints}
    for e in endpoints:
        eid = e.id
        terms = {name: w * r[eid] for name, w, r in weighted}
        t = sum(r[eid] for r in physical) + rtt_of[eid]
        if is_stale(e, now, staleness_s):
            terms["stale"] = penalty
            t += penalty
        c = Candidate(e, terms)
        candidates.append(c)
        ttft[eid] = t
        keyed.append(((sum(terms.values()), eid != bound_id, eid), c))  # = rank(c), once

    def rank(c: Candidate) -> tuple[float, bool, str]:
        not_bound = bound is None or c.endpoint.id != bound.id
        return (c.total_ms, not_bound, c.endpoint.id)

    keyed.sort(key=lambda kc: kc[0])
    turns = state.last_picked if state is not None else {}
    margin = config.tie_margin_ms
    ranked = _break_ties(ctx, [c for _, c in keyed], rank, margin, turns)
    deadline = ctx.request.ttft_deadline_ms
    admitted = ttft
    late: dict[str, float] = {}
    if deadline is not None:
        admitted = dict(ttft)
        hl = config.ttft_error_half_life_s
        for c in ranked:
            e = c.endpoint
            # stale figures do not refuse a default target
            if ctx.request.deadline_is_default:
                admitted[e.id] -= c.terms.get("stale", 0.0)
            miss = calibration.late_ms(e.ttft_error_ms, e.ttft_error_at, now, hl)
            if miss > 0:
                late[e.id] = miss
                admitted[e.id] += miss
    eligible = ranked
    if deadline is not None:
        eligible = _break_ties(
            ctx, [c for c in ranked if admitted[c.endpoint.id] <= deadline], rank, margin, turns
        )
    if not eligible:
        assert deadline is not None
        best = min(ranked, key=lambda c: (admitted[c.endpoint.id], c.endpoint.id))
        best_t = admitted[best.endpoint.id]
        retry = max(config.min_retry_after_s, (best_t - deadline) / 1000.0)
        return RouteDecision(
            endpoint=None,
            predicted_ttft_ms=best_t,
            reason="rejected",
            explanation=(
                f"rejected: best predicted TTFT {best_t:.0f} ms on {best.endpoint.id} exceeds "
                f"the deadline of {deadline:.0f} ms ({_breakdown(best, raw, ctx, rtt_of)}"
                f"{_late_note(late.get(best.endpoint.id, 0.0))}); "
                f"retry after {retry:.2f} s"
            ),
            candidates=tuple(ranked),
            retry_after_s=retry,
        )
    eligible = _within_budget(ctx, eligible, config.steer_budget_ms, bound_id, rank, margin, turns)
    chosen = eligible[0]
    e = chosen.endpoint
    n_cached = cached_blocks(e, ctx)
    req = ctx.request
    if bound is not None and e.id == bound.id:
        reason = "session"
    elif req.client_region and e.region and e.region != req.client_region:
        reason = "spill-over"
    elif bound is not None:
        reason = "session-yield"
    elif n_cached > 0:
        reason = "prefix"
    else:
        reason = "least-latency"

    parts = [
        f"predicted TTFT {ttft[e.id]:.0f} ms on {e.id} ({_breakdown(chosen, raw, ctx, rtt_of)})"
    ]
    if reason == "session-yield" and bound is not None:
        bc = next((c for c in candidates if c.endpoint.id == bound.id), None)
        if bc is None:
            parts.append(f"session's endpoint {bound.id} is not eligible")
        else:
            parts.append(
                f"session's endpoint {bound.id} yields at {ttft[bound.id]:.0f} ms "
                f"(total {bc.total_ms:.0f} ms, margin {config.hotspot_margin_ms:.0f} ms)"
            )
    elif reason == "spill-over" or (
        reason == "session" and req.client_region and e.region and e.region != req.client_region
    ):
        # a session kept on a remote endpoint is a spill-over too: say so
        parts.append(f"spill-over from region {req.client_region} to {e.region}")
    alt = next((c for c in ranked if c is not chosen), None)
    if alt is not None:
        more = ""
        di = alt.terms.get("decode-interference", 0.0)
        if di > 0:
            more = f" (+{di:.0f} ms decode-interference: its running requests' added latency)"
        parts.append(f"best alternative {alt.endpoint.id} at {ttft[alt.endpoint.id]:.0f} ms{more}")
    return RouteDecision(
        endpoint=e,
        predicted_ttft_ms=ttft[e.id],
        reason=reason,
        explanation=f"{reason}: " + "; ".join(parts),
        cached_blocks=n_cached,
        candidates=tuple(ranked),
    )


def _within_budget(
    ctx: RoutingContext,
    eligible: list[Candidate],
    budget: float | None,
    bound_id: str | None,
    rank: Callable[[Candidate], tuple[float, bool, str]],
    margin_ms: float,
    turns: Mapping[str, int],
) -> list[Candidate]:
    """``eligible`` (ranked, non-empty) less the candidates the steering terms may not pick:
    a total without them (:func:`_unsteered_ms`) more than ``budget`` ms over the lowest
    one among ``eligible`` (the session's endpoint ``bound_id`` is kept; None: no bound)."""
    if budget is None or len(eligible) < 2:
        return eligible
    base = {c.endpoint.id: _unsteered_ms(c) for c in eligible}
    limit = min(base.values()) + max(0.0, budget)
    kept = [c for c in eligible if base[c.endpoint.id] <= limit or c.endpoint.id == bound_id]
    return _break_ties(ctx, kept, rank, margin_ms, turns)


#: the preheat policy's terms that steer without being part of the predicted TTFT
STEERING: frozenset[str] = frozenset({"kv-pressure", "decode-interference", "session"})


def _unsteered_ms(c: Candidate) -> float:
    """A candidate's total less its steering terms (``STEERING``): its weighted predicted
    TTFT (the queue at its weight, the prefill, the RTT, any stale penalty), as
    ``steer_budget_ms`` reads it."""
    return sum(ms for name, ms in c.terms.items() if name not in STEERING)


@functools.lru_cache(maxsize=64)
def _scorer_names(scorers: tuple[tuple[str, float], ...]) -> tuple[str, ...]:
    """The configured scorers plus the physical ones, sorted (computed once per config)."""
    return tuple(sorted({n for n, _ in scorers} | set(_PHYSICAL)))


def _break_ties(
    ctx: RoutingContext,
    ranked: list[Candidate],
    rank: Callable[[Candidate], tuple[float, bool, str]],
    margin_ms: float = 0.0,
    turns: Mapping[str, int] | None = None,
) -> list[Candidate]:
    """``ranked`` (sorted by ``rank``) with the candidates tied for first moved to the front
    in tie order. Tied: the same session binding as the first and a total within
    ``margin_ms`` of its total (``tie_margin_ms``). Tie order: the endpoint picked least
    recently first (``turns``: endpoint id -> the decision that last picked it; never picked
    comes first), then :func:`_tie_key` (the hash of the session or request id), so equal
    endpoints take turns. Only the tied ones are ordered: the rest keep their rank."""
    if len(ranked) < 2:
        return ranked
    total, bound = rank(ranked[0])[:2]
    limit = total + max(0.0, margin_ms)
    tied = [c for c in ranked if rank(c)[1] == bound and c.total_ms <= limit]
    if len(tied) == 1:
        return ranked
    seen = {id(c) for c in tied}
    t = turns or {}
    tied.sort(key=lambda c: (t.get(c.endpoint.id, -1), *_tie_key(ctx, c.endpoint)))
    return tied + [c for c in ranked if id(c) not in seen]


def _late_note(miss_ms: float) -> str:
    """The breakdown's note of the endpoint's recent TTFT miss (``calibration.py``)."""
    return f"; +{miss_ms:.0f} ms its first tokens came later than predicted" if miss_ms else ""


def _breakdown(
    c: Candidate,
    raw: Mapping[str, Mapping[str, float]],
    ctx: RoutingContext,
    rtt_of: Mapping[str, float],
) -> str:
    eid = c.endpoint.id
    s = (
        f"rtt {rtt_of[eid]:.0f}, queue {raw['queue'][eid]:.0f}, "
        f"prefill {raw['prefix'][eid]:.0f}; "
        f"{cached_blocks(c.endpoint, ctx)}/{len(ctx.request.block_hashes)} blocks cached"
    )
    kv = c.terms.get("kv-pressure", 0.0)
    if kv > 0:
        s += f"; kv-pressure {kv:.0f}"
    di = c.terms.get("decode-interference", 0.0)
    if di > 0:
        s += f"; decode-interference {di:.0f}"
    if "stale" in c.terms:
        s += "; stale metrics"
    return s


def _prefix_only(
    ctx: RoutingContext, config: SchedulerConfig, cost: PrefillCost, endpoints: tuple[Endpoint, ...]
) -> RouteDecision:
    """Baseline: the prefix scorer alone (ties: load, then hash of the request)."""

    def key(e: Endpoint) -> tuple[float, int, int, str]:
        return (prefill_ms(e, ctx, cost), load(e), *_tie_key(ctx, e))

    e = min(endpoints, key=key)
    n = cached_blocks(e, ctx)
    return _baseline_decision(
        ctx, config, cost, e, f"{n}/{len(ctx.request.block_hashes)} blocks cached", n
    )


def _baseline_decision(
    ctx: RoutingContext,
    config: SchedulerConfig,
    cost: PrefillCost,
    e: Endpoint,
    detail: str,
    n_cached: int | None = None,
) -> RouteDecision:
    t = predict_ttft_ms(e, ctx, cost, config)
    return RouteDecision(
        endpoint=e,
        predicted_ttft_ms=t,
        reason=config.policy,
        explanation=f"{config.policy}: {e.id} ({detail}); predicted TTFT {t:.0f} ms",
        cached_blocks=cached_blocks(e, ctx) if n_cached is None else n_cached,
    )
