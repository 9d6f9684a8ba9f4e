"""The scheduler's frozen internal configuration; its defaults are the ``preheat`` policy.

The external, validated schema (camelCase YAML/JSON) is ``preheat.api.routing``; it ends in
:class:`SchedulerConfig`. Every field has a default, so ``SchedulerConfig()`` is usable as is.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Scorers of the ``preheat`` policy with their weights: every term is predicted milliseconds,
#: so a weight of 1 adds the physical estimate as is.
#: The queue term is weighted 0.75: a predicted wait is less certain than the prefill a
#: cache hit saves (requests ahead may hit the cache or end early), so the ranking leans a
#: little towards the cache. Measured (docs/benchmarks.md, simulated routing on Mooncake):
#: hit rate 23.6% -> 24.5% of an oracle's 26.7% at 16 GPUs with p95 TTFT 1,537 -> 1,541 ms;
#: 0.5 costs p95 (1,634 ms). The predicted TTFT itself (admission, logs) is unweighted.
#: ``decode-interference`` (ms of latency added to the requests already decoding there, summed
#: over them) is weighted 0.05, chosen in the simulator (`preheat bench sim --part decode`,
#: docs/benchmarks.md: Mooncake at two loads on 16 GPUs, Azure conv at two loads on 4): the
#: largest weight tried (0.02, 0.05, 0.1, 0.2) that keeps TTFT p95 within 2% of weight 0 in
#: all four. On overloaded Mooncake it cuts TPOT p95 by 16% and e2e p95 by 11%; 0.1 costs
#: 56% of TTFT p95 there. Its price is in TTFT p99 where long prompts meet busy GPUs
#: (Mooncake, 16 GPUs, 4,000 requests: p99 1,697 -> 2,140 ms, p95 1,541 -> 1,551 ms).
DEFAULT_SCORERS: tuple[tuple[str, float], ...] = (
    ("queue", 0.75),
    ("prefix", 1.0),
    ("rtt", 1.0),
    ("kv-pressure", 1.0),
    ("session", 1.0),
    ("decode-interference", 0.05),
)

#: Filters of every policy, in order.
DEFAULT_FILTERS: tuple[str, ...] = ("same-pool", "fresh")


@dataclass(frozen=True)
class SchedulerConfig:
    """How :func:`preheat.core.routing.scheduler.schedule` decides.

    ``policy`` picks the decision procedure: ``preheat`` (filters -> weighted ms scorers ->
    lowest total) or a baseline (``round-robin``, ``random``, ``least-request``, ``p2c``,
    ``chwbl``, ``prefix-only``, ``session-only``). The filters run for every policy.
    """

    policy: str = "preheat"
    #: (scorer name, weight) pairs for the ``preheat`` policy; names from ``SCORERS``.
    scorers: tuple[tuple[str, float], ...] = DEFAULT_SCORERS
    #: filter names from ``FILTERS``, applied in order.
    filters: tuple[str, ...] = DEFAULT_FILTERS
    #: endpoint metrics older than this (or never refreshed) count as saturated.
    staleness_s: float = 5.0
    #: ms added to a stale endpoint's prediction (it is kept only when nothing fresh is left).
    stale_penalty_ms: float = 10_000.0
    #: a session's bound endpoint keeps it unless its predicted total exceeds the best
    #: endpoint's by more than this (then the binding yields: reason "session-yield").
    hotspot_margin_ms: float = 150.0
    #: bounded-load factor c for rendezvous hashing and chwbl: an endpoint is eligible while
    #: load + 1 <= ceil(c * (total load + 1) / number of endpoints).
    session_load_bound: float = 1.25
    #: sessions only: the load bound never drops below this many requests per endpoint, so
    #: a lightly loaded pool keeps every session in place (the margin rule guards latency).
    session_load_floor: int = 4
    #: rtt scorer: differences in RTT up to this many ms from the closest endpoint's are not
    #: a reason to prefer one endpoint over another (its ranking term is the closest RTT plus
    #: only the excess beyond the band; the predicted TTFT keeps the measured RTT). Measured
    #: RTTs between endpoints of one zone differ by the measurement's noise, not by distance:
    #: on loopback on a loaded 2-core machine they read 3-8 ms and moved by 1-2 ms
    #: (docs/benchmarks.md, vLLM's serving benchmark), which outweighed the decode-interference
    #: term and sent more requests to whichever worker pinged fastest. Zones of a region
    #: differ by about 1-2 ms, less than one engine step; regions (tens of ms) still count.
    rtt_deadband_ms: float = 5.0
    #: the preheat policy: candidates whose weighted totals are within this many ms of the
    #: best are tied, and a tie goes to the one picked least recently (so identical endpoints
    #: take turns, as round-robin, instead of the first of a hash order taking the burst). Half
    #: a millisecond is below anything the cost model resolves (one decoding sequence adds
    #: 0.01-0.06 ms per step, a prefill step is 20 ms or more).
    tie_margin_ms: float = 0.5
    #: the preheat policy: what only steers (``kv-pressure``, ``decode-interference``,
    #: ``session``) may pick an endpoint whose weighted predicted TTFT (its total without
    #: them) is at most this many ms over the lowest one (the session's endpoint excepted: it
    #: yields by ``hotspot_margin_ms``); None: no bound. Without it, in the simulator, the
    #: neighbours' decode latency sent long prompts to the few endpoints where little
    #: decoded and their queues took the TTFT tail past a 500 ms SLO (docs/benchmarks.md,
    #: *The router's own queue and a steering budget*). 25 ms: a few decode steps, and
    #: less than a 1,000-token prefill on an H100.
    steer_budget_ms: float | None = 25.0
    #: RTT assumed when it is neither measured nor in ``region_rtt_ms`` (same region).
    default_rtt_ms: float = 1.0
    #: RTT assumed between two different zones of one region when not measured.
    cross_zone_rtt_ms: float = 2.0
    #: RTT assumed when a region pair is missing from ``region_rtt_ms``.
    remote_region_rtt_ms: float = 60.0
    #: prompt length (tokens) whose prefill stands for "a typical request" in the queue
    #: estimate when an endpoint has no observed TTFT.
    typical_prompt_tokens: int = 1024
    #: weight of each routed request in the EWMA of uncached prompt tokens that replaces
    #: ``typical_prompt_tokens`` once requests were routed (0: keep the fixed value).
    typical_prompt_alpha: float = 0.05
    #: ms one running sequence adds to every engine step our prefill shares (decode work).
    running_seq_ms: float = 0.05
    #: queue: share of the engine step in progress a new request waits for, on average,
    #: before its prefill can start, when this router has requests decoding on the endpoint
    #: and none waiting for a first token, where the step's phase is not known
    #: (``step_clock``; arrivals are independent of the phase: half of it). An idle engine
    #: starts at once; so between an idle and a decoding endpoint the queue term differs by
    #: half a decode step (``chunk_shared_ms`` + the decoding sequences' share,
    #: ``decode_seq_ms`` and ``decode_kv_ms_per_token`` each).
    step_residual: float = 0.5
    #: queue: where this router streams from an endpoint, predict the wait for the step in
    #: progress from the step boundaries its tokens show (``RoutingContext.step_clocks``)
    #: instead of ``step_residual`` of a step; off: always the average.
    step_clock: bool = True
    #: ms to wait for a free sequence slot, per request beyond ``max_num_seqs``.
    slot_wait_ms: float = 50.0
    #: decode-interference: most prompt tokens one engine step prefills (vLLM's
    #: max_num_batched_tokens; the sim engine's default).
    chunk_tokens: int = 8192
    #: decode-interference: ms of a prefill chunk's own step that the decode step it joins
    #: pays anyway (weights read once, launches): the cost model's step with no decodes
    #: (``CostModel.step_fixed_ms``, 6.5 ms, fitted to mixed_step_h100.json's chunk-alone
    #: steps; running a chunk in a decode step saved 5.5-7 ms there).
    chunk_shared_ms: float = 6.54
    #: decode-interference: ms one more decoding sequence adds to every step
    #: (``CostModel.decode_b_ms``; 0.0096 ms, the graph-replayed decode steps' fit).
    decode_seq_ms: float = 0.0096
    #: decode-interference: ms per token of that sequence's context (its KV read each step;
    #: ``CostModel.decode_c_ms``; 0.0424 us per token in mixed_step_h100.json).
    decode_kv_ms_per_token: float = 4.25e-5
    #: decode-interference: output tokens a running neighbour still decodes, and the new
    #: request's own when it gives no max_tokens.
    typical_output_tokens: int = 256
    #: KV-cache usage above which the kv-pressure penalty starts.
    kv_pressure_threshold: float = 0.8
    #: kv-pressure penalty (ms) at 100% KV-cache usage; grows quadratically from the threshold.
    kv_pressure_max_ms: float = 500.0
    #: only endpoints of this pool (filter ``same-pool``); empty: any pool.
    pool: str = ""
    #: chwbl: blocks of the prompt that form the hash key (the chained hash of block K-1).
    chwbl_prefix_blocks: int = 8
    #: chwbl: virtual nodes per endpoint on the hash ring.
    chwbl_virtual_nodes: int = 64
    #: admission: the half-life (s) of an endpoint's TTFT miss (how much later than predicted
    #: its first tokens came, ``calibration.py``), which is added to its predicted TTFT when
    #: it is checked against a deadline; 0 turns the correction off.
    ttft_error_half_life_s: float = 2.0
    #: smallest retry-after (s) of a rejection.
    min_retry_after_s: float = 0.1
    #: retry-after (s) when there is no routable endpoint.
    no_endpoints_retry_after_s: float = 1.0
