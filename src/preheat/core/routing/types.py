"""The values routing decisions are made from and return. Pure: no I/O, no clock.

Predicted TTFT on endpoint p (DESIGN.md, Routing):
    network RTT(client -> p) + expected queue wait(p) + prefill time(uncached prompt tokens on p)
Scorers contribute milliseconds to that sum; the picker takes the lowest total.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol


class PrefillCost(Protocol):
    """Predicted prefill milliseconds (``preheat.engine.costmodel.CostModel`` is one)."""

    def prefill_ms(self, new_tokens: int, cached_tokens: int = 0) -> float: ...


@dataclass(frozen=True)
class Endpoint:
    """One worker as the router sees it at ``RoutingContext.now``.

    ``metrics_at`` is when its load figures were last refreshed (scrape or Status); data
    older than the scheduler's staleness bound counts as saturated.
    """

    id: str  # worker id (pod name)
    address: str  # host:port of its gRPC server
    pool: str = ""
    zone: str = ""
    region: str = ""
    num_running: int = 0  # engine: running sequences
    num_waiting: int = 0  # engine: waiting sequences
    kv_cache_usage: float = 0.0  # 0..1
    max_num_seqs: int = 256
    block_size: int = 16
    in_flight: int = 0  # requests this router has sent and not yet seen the first token of
    # ``in_flight`` by request priority (RequestInfo.priority): ((priority, count), ...),
    # sorted; requests not in it count as ahead of everyone (a record kept without classes)
    in_flight_by_priority: tuple[tuple[int, int], ...] = ()
    # the prompt tokens of ``in_flight`` that were not predicted cached when they were sent
    # (what their prefills cost: the queue term prices the requests ahead by them)
    in_flight_tokens: int = 0
    # the engine's waiting sequences by priority (WorkerStatus.waiting_by_priority), sorted
    # ((priority, count), ...); None: the engine does not say (vLLM), then this router's own
    # ``in_flight_by_priority`` says which of ``num_waiting`` are behind a request
    waiting_by_priority: tuple[tuple[int, int], ...] | None = None
    # requests this router is streaming from the endpoint after their first token (decoding
    # there now; fresher than the engine's num_running, which is as old as metrics_at)
    decoding: int = 0
    rtt_ms: float | None = None  # EWMA of measured round trips from this router; None: unknown
    metrics_at: float | None = None  # router clock (seconds); None: never refreshed
    # precise prefix index: block hashes the worker reports cached (WatchCache); None: unknown.
    # Read-only here; the router passes its live set (no copy per snapshot: a cache holds
    # 10^5 blocks), so it is left out of equality and hashing.
    cached_blocks: AbstractSet[int] | None = field(default=None, compare=False, hash=False)
    # observed mean prefill+queue per request on this endpoint (EWMA), ms; None: unknown
    observed_ttft_ms: float | None = None
    # how much later than this router predicted its first tokens came here (EWMA of observed
    # minus predicted TTFT, ms; ``calibration.py``) and when it last changed (router clock,
    # seconds); None: not measured. Added to the prediction against a deadline.
    ttft_error_ms: float | None = None
    ttft_error_at: float | None = None
    tokenizer: str = ""  # the engine's tokenizer name (WorkerStatus.tokenizer); "" = unknown
    # the port of its OpenAI HTTP API on the host of ``address`` (WorkerStatus.openai_port);
    # 0: none (the router then speaks gRPC Generate to it)
    openai_port: int = 0


@dataclass(frozen=True)
class RequestInfo:
    request_id: str
    prompt_tokens: int
    block_hashes: tuple[int, ...] = ()  # chained hashes of the prompt's full blocks
    block_size: int = 16  # tokens per block in block_hashes
    max_tokens: int = 0
    session_id: str = ""
    client_region: str = ""
    client_zone: str = ""
    ttft_deadline_ms: float | None = None  # admission: reject when no endpoint predicts within
    # the deadline is the pool's default target (the request named none, nor a class): the
    # stale penalty does not count against it (stale figures are not a prediction; the
    # concurrency limit still bounds what the pool holds)
    deadline_is_default: bool = False
    # the engine priority it will run at (lower first, vLLM's convention: 0 interactive,
    # 1 standard, 2 batch); the queue scorer counts only the waiting work at this value or
    # lower (``plugins/queue.py``)
    priority: int = 1


@dataclass(frozen=True, slots=True)
class StepClock:
    """An engine's step rhythm as this router sees it in the tokens it streams from it.

    An engine emits one token per decoding sequence at the end of every step, so the
    token frames a router receives mark the engine's step boundaries: ``last_token_at``
    (router clock, seconds) is when the latest one arrived, ``step_ms`` the engine's step
    (the inter-token latency this router observes there), and ``lag_ms`` the request's trip
    to the engine plus the token's trip back (the router's TTFT of a request less the
    engine's own: RTT and both ends' processing). A request sent at ``now`` reaches the
    engine ``lag_ms`` after the step boundary phase that ``now`` shows here, so it waits
    ``step_ms - ((now - last_token_at) * 1000 + lag_ms) mod step_ms`` for the step in
    progress to end (``plugins/queue.py``). ``error_ms`` is how far such predictions missed
    the waits the engine then reported, on average (None: not measured yet); a clock that
    misses by more than a sixth of a step is not used (a guess misses by a third).
    """

    last_token_at: float
    step_ms: float
    lag_ms: float = 0.0
    error_ms: float | None = 0.0


@dataclass(frozen=True)
class RoutingContext:
    now: float
    request: RequestInfo
    endpoints: tuple[Endpoint, ...]
    # approximate prefix index from this router's own history: endpoint id -> number of
    # the request's leading blocks routed there recently (computed by PrefixHistory.match)
    history_matches: Mapping[str, int] = field(default_factory=dict)
    # region -> region -> RTT ms, for endpoints without a measured rtt_ms
    region_rtt_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # endpoint id -> its engine's step rhythm from the tokens this router streams from it
    # (only endpoints it streams from; read-only: the router passes its live map, which
    # changes only between decisions)
    step_clocks: Mapping[str, StepClock] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    """An endpoint's score breakdown: every term in predicted milliseconds."""

    endpoint: Endpoint
    terms: Mapping[str, float]  # scorer name -> weighted ms

    @property
    def total_ms(self) -> float:
        return sum(self.terms.values())


@dataclass(frozen=True)
class RouteDecision:
    """The chosen endpoint (None: rejected), the predicted TTFT, and why."""

    endpoint: Endpoint | None
    predicted_ttft_ms: float
    reason: str  # short machine label, e.g. "session", "prefix", "least-latency", "rejected"
    explanation: str  # a sentence an SRE can read in a trace
    cached_blocks: int = 0  # blocks predicted to hit the prefix cache on the endpoint
    candidates: tuple[Candidate, ...] = ()
    retry_after_s: float | None = None  # with a rejection
