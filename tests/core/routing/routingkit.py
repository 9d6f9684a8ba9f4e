"""Helpers for routing tests: literal endpoints, requests, contexts and a linear cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from preheat.core.routing.types import Endpoint, RequestInfo, RoutingContext, StepClock

NOW = 1000.0


@dataclass(frozen=True)
class LinearCost:
    """prefill_ms = per_token_ms * new tokens (cached tokens are free)."""

    per_token_ms: float = 0.1

    def prefill_ms(self, new_tokens: int, cached_tokens: int = 0) -> float:
        return self.per_token_ms * max(0, new_tokens)


COST = LinearCost()


def make_endpoint(
    id: str = "w-0",
    *,
    queue: int = 0,
    running: int = 0,
    in_flight: int = 0,
    decoding: int = 0,
    kv: float = 0.0,
    max_num_seqs: int = 256,
    cached_blocks: Sequence[int] | None = None,
    rtt_ms: float | None = None,
    region: str = "",
    zone: str = "",
    pool: str = "",
    age_s: float | None = 0.0,
    observed_ttft_ms: float | None = None,
    waiting_by_priority: Mapping[int, int] | None = None,
    in_flight_by_priority: Mapping[int, int] | None = None,
    in_flight_tokens: int = 0,
) -> Endpoint:
    """An endpoint with ``queue`` waiting requests, refreshed ``age_s`` before NOW (None: never)."""
    return Endpoint(
        id=id,
        address=f"{id}:50051",
        pool=pool,
        zone=zone,
        region=region,
        num_running=running,
        num_waiting=queue,
        kv_cache_usage=kv,
        max_num_seqs=max_num_seqs,
        in_flight=in_flight,
        in_flight_tokens=in_flight_tokens,
        decoding=decoding,
        rtt_ms=rtt_ms,
        metrics_at=None if age_s is None else NOW - age_s,
        cached_blocks=None if cached_blocks is None else frozenset(cached_blocks),
        observed_ttft_ms=observed_ttft_ms,
        waiting_by_priority=None
        if waiting_by_priority is None
        else tuple(sorted(waiting_by_priority.items())),
        in_flight_by_priority=tuple(sorted((in_flight_by_priority or {}).items())),
    )


def make_request(
    *,
    request_id: str = "r-1",
    prompt_tokens: int = 1024,
    blocks: Sequence[int] | None = None,
    session: str = "",
    region: str = "",
    zone: str = "",
    deadline_ms: float | None = None,
    max_tokens: int = 0,
    priority: int = 1,
) -> RequestInfo:
    """A request; ``blocks`` defaults to 1..prompt_tokens//16 (distinct fake block hashes)."""
    hashes = tuple(range(1, prompt_tokens // 16 + 1)) if blocks is None else tuple(blocks)
    return RequestInfo(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        block_hashes=hashes,
        session_id=session,
        client_region=region,
        client_zone=zone,
        ttft_deadline_ms=deadline_ms,
        max_tokens=max_tokens,
        priority=priority,
    )


def make_ctx(
    endpoints: Sequence[Endpoint],
    request: RequestInfo | None = None,
    *,
    history: Mapping[str, int] | None = None,
    region_rtt_ms: Mapping[str, Mapping[str, float]] | None = None,
    now: float = NOW,
    step_clocks: Mapping[str, StepClock] | None = None,
) -> RoutingContext:
    return RoutingContext(
        now=now,
        request=request if request is not None else make_request(),
        endpoints=tuple(endpoints),
        history_matches=dict(history or {}),
        region_rtt_ms=dict(region_rtt_ms or {}),
        step_clocks=dict(step_clocks or {}),
    )


def picked(decision: object) -> str | None:
    """The chosen endpoint's id (None: rejected / no endpoints)."""
    ep = getattr(decision, "endpoint", None)
    return None if ep is None else str(ep.id)
