"""Scorer ``queue``: expected wait (ms) before the engine starts our prefill.

Formula, for endpoint p::

    ahead    = max(waiting_ahead, own_ahead) (queued before us: the engine's count, or this
                                              router's requests without a first token yet
                                              when the engine's figure lags behind)
    own_ahead     = in_flight - own_behind
    waiting_ahead = num_waiting - engine_behind, when the engine says (else - own_behind)
    own_behind    = this router's in-flight requests at a priority value above ours
    engine_behind = waiting_by_priority's requests at a priority value above ours
    per_req  = cost.prefill_ms(typical), or the endpoint's observed TTFT (EWMA) when that
               is lower (a faster engine than the cost model's); typical = the scheduler's
               EWMA of routed requests' uncached prompt tokens (typical_prompt_alpha), or
               typical_prompt_tokens before the first request
    own_per  = cost.prefill_ms(in_flight_tokens / in_flight) * per_req / cost.prefill_ms(typical)
               (this router's requests ahead at their own prompts' prefill, at the engine's
               speed as per_req has it; per_req when it holds no tokens there)
    overflow = max(0, num_running + ahead + 1 - max_num_seqs)   (requests beyond the slots)
    step     = chunk_shared_ms + decoding * (decode_seq_ms + decode_kv_ms_per_token * context)
    residual = step_residual * step   if ahead == 0 and decoding > 0, else 0
    queue_ms = max(waiting_ahead * per_req, own_ahead * own_per)
               + overflow * slot_wait_ms + num_running * running_seq_ms + residual

Why ``own_per``: the router knows what it sent. Pricing its own requests ahead at the typical
prompt made an endpoint that had been sent long prompts look as cheap as one sent short ones,
and the ``decode-interference`` scorer sends long prompts where few sequences decode: in
the simulator, on the ServeGen day at 60x (Azure conv prompts, 16 pods), the spike of hour 1
piled prompts of 2,500-3,800 tokens on three or four pods whose queues reached 200-1,400 ms
while the router priced each request ahead at the typical 1,100-token prefill
(docs/benchmarks.md, *the router's own queue and a steering budget*).

``residual``: the engine step in progress. A request that reaches an engine which is
decoding waits for the current step to end before its prefill is scheduled; an idle engine
starts it at once. Where this router streams from the endpoint it sees the engine's step
boundaries in the tokens (``RoutingContext.step_clocks``, :class:`StepClock`), so it
predicts that wait from the phase::

    elapsed  = (now - last_token_at) * 1000 + lag_ms    (where the request lands in the step)
    residual = step_ms - elapsed mod step_ms            (clock known and fresh)

Fresh: the last token arrived at most two steps ago (tokens come every step while the
engine decodes; a longer silence is a longer step in progress, a prefill chunk, or a stalled
stream, whose phase is not known) and ``step_clock`` is on. Trusted: the clock's earlier
predictions missed the waits the engine reported (``Timing.queue_ms``) by at most a sixth of
a step on average (``StepClock.error_ms``; a guess misses by a third: on a loaded 2-core
machine, where the trip to a worker varies by 3 ms, the live router's predictions missed by
2.2 ms of a 7.8 ms step and did not correlate with the waits, 0.06). Otherwise the step's
phase is unknown and the request waits half of it on average (``step_residual`` 0.5) of
``step = chunk_shared_ms + decoding * (decode_seq_ms + decode_kv_ms_per_token * context)``.
``decoding`` is this router's own count of requests streaming from the endpoint (fresh; the
engine's ``num_running`` is as old as the last refresh), ``context`` a typical sequence's
context (the typical prompt plus half of ``typical_output_tokens``); ``chunk_shared_ms``,
``decode_seq_ms`` and ``decode_kv_ms_per_token`` are the cost model's decode step (see
``decode.py``). With a prefill ahead, waiting for the step is part of ``per_req``.

Why the phase: between endpoints that are equally loaded, the one whose step is about to
end starts the prefill up to a whole step sooner (7.8 ms for the calibrated H100's decode
step, against a 10-17 ms prefill of a 512-token prompt). Simulated on vLLM's
``prefix_repetition`` workload (3 GPUs, 5 req/s) it took TTFT p50 from 17.0 to 16.3 ms
(docs/benchmarks.md, *decode interference*).

Priority (``RequestInfo.priority``, lower first, vLLM's convention): an engine running
``--scheduling-policy priority`` schedules its waiting queue by (priority, arrival), so only
the waiting work at our priority or higher (a value <= ours) is ahead of us; lower-priority
waiting work is scheduled after us. Running work counts whatever its priority: vLLM 0.32's
scheduler preempts a running request only under KV pressure, never for a waiting
higher-priority one (``preheat.engine.simcore``). Per-priority waiting counts come from the
engine when it reports them (the sim engine, ``WorkerStatus.waiting_by_priority``); for an
engine that does not (vLLM), this router's own record of what it sent and has not seen the
first token of (``Endpoint.in_flight_by_priority``) says how many of the engine's waiting
requests are behind us. The ones behind are taken off ``num_waiting`` (not the ones ahead
summed): the total may be fresher than the per-priority counts (a scrape against the last
Status). Without classes every request has the same priority, nothing is behind, and the
formula is the FCFS one.

Why not ``num_waiting + in_flight`` and the observed TTFT as ``per_req`` (the first
version): our in-flight requests are among the engine's waiting ones, and an observed TTFT
already contains queueing, so both counted the queue twice and the product grew with its
square. That over-steered away from cached endpoints (measured on the Mooncake session
workload, docs/benchmarks.md: hit rate 9-11% -> 11-12%, TTFT p95 ahead of every baseline).

Inputs: ``num_waiting``, ``waiting_by_priority``, ``in_flight``, ``in_flight_by_priority``,
``in_flight_tokens``, ``num_running``, ``decoding``, ``max_num_seqs``, ``observed_ttft_ms``
of the endpoint; its step clock; the request's ``priority``; the cost model. Parameters
(``SchedulerConfig``): ``typical_prompt_tokens`` (1024), ``slot_wait_ms`` (50),
``running_seq_ms`` (0.05), ``step_residual`` (0.5), ``step_clock`` (on), ``chunk_shared_ms``,
``decode_seq_ms``, ``decode_kv_ms_per_token``, ``typical_output_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint, PrefillCost, StepClock

#: a step clock is fresh while its last token is at most this many steps old
CLOCK_FRESH_STEPS = 2.0
#: a step clock is trusted while its predictions miss by at most this share of a step
CLOCK_MAX_ERROR = 1.0 / 6.0


def clock_trusted(clock: StepClock) -> bool:
    """Whether the clock's predictions missed the waits the engine reported by at most
    ``CLOCK_MAX_ERROR`` of a step on average (False before one was checked)."""
    err = clock.error_ms
    return clock.step_ms > 0 and err is not None and err <= CLOCK_MAX_ERROR * clock.step_ms


def phase_residual_ms(clock: StepClock, now: float, *, untrusted: bool = False) -> float | None:
    """The wait (ms) for the engine's step in progress to end, for a request sent at
    ``now``, from its step clock; None when the clock is not fresh or, unless
    ``untrusted`` (to measure its error), not trusted (see the module doc)."""
    step = clock.step_ms
    if not step > 0:
        return None
    if not untrusted and not clock_trusted(clock):
        return None
    elapsed = (now - clock.last_token_at) * 1000.0
    if not 0.0 <= elapsed <= CLOCK_FRESH_STEPS * step:
        return None
    return step - (elapsed + max(0.0, clock.lag_ms)) % step


def step_residual_ms(
    endpoint: Endpoint,
    config: SchedulerConfig,
    typical_tokens: float,
    clock: StepClock | None = None,
    now: float = 0.0,
) -> float:
    """``residual`` of the formula: the wait for the decode step in progress (0 when this
    router has nothing decoding on the endpoint), from ``clock`` (the endpoint's step clock
    as of ``now``) when it is fresh and trusted, else half a step on average."""
    decoding = max(0, endpoint.decoding)
    if decoding == 0:
        return 0.0
    if clock is not None and config.step_clock:
        r = phase_residual_ms(clock, now)
        if r is not None:
            return r
    context = max(0.0, typical_tokens) + max(0, config.typical_output_tokens) / 2
    per_seq = config.decode_seq_ms + config.decode_kv_ms_per_token * context
    return config.step_residual * (config.chunk_shared_ms + decoding * per_seq)


def ahead_split(endpoint: Endpoint, priority: int | None = None) -> tuple[int, int]:
    """``(waiting_ahead, own_ahead)`` of the formula: the engine's queued requests before
    one of ``priority`` (None: every waiting request, FCFS), and this router's own."""
    waiting, own = max(0, endpoint.num_waiting), max(0, endpoint.in_flight)
    if priority is None:
        return waiting, own
    own_behind = sum(n for p, n in endpoint.in_flight_by_priority if p > priority)
    by_priority = endpoint.waiting_by_priority
    behind = (
        own_behind
        if by_priority is None
        else sum(max(0, n) for p, n in by_priority if p > priority)
    )
    return max(0, waiting - behind), max(0, own - own_behind)


def requests_ahead(endpoint: Endpoint, priority: int | None = None) -> int:
    """``ahead`` of the formula: the requests queued on ``endpoint`` before one of
    ``priority`` (None: every waiting request, FCFS)."""
    return max(ahead_split(endpoint, priority))


def queue_wait_ms(
    endpoint: Endpoint,
    cost: PrefillCost,
    config: SchedulerConfig,
    typical_ms: float | None = None,
    typical_tokens: float | None = None,
    priority: int | None = None,
    clock: StepClock | None = None,
    now: float = 0.0,
) -> float:
    """The formula above for one endpoint (``typical_ms``: the typical prefill, if known;
    ``typical_tokens``: its prompt tokens, default ``typical_prompt_tokens``; ``priority``:
    the request's, None for every waiting request; ``clock``: the endpoint's step clock as
    of ``now``, None: unknown)."""
    waiting_ahead, own_ahead = ahead_split(endpoint, priority)
    ahead = max(waiting_ahead, own_ahead)
    running = max(0, endpoint.num_running)
    residual = 0.0
    if ahead == 0:
        tokens = config.typical_prompt_tokens if typical_tokens is None else typical_tokens
        residual = step_residual_ms(endpoint, config, tokens, clock, now)
        if running < endpoint.max_num_seqs:
            return running * config.running_seq_ms + residual
    typical = (
        typical_ms if typical_ms is not None else cost.prefill_ms(config.typical_prompt_tokens, 0)
    )
    per_req = typical
    if endpoint.observed_ttft_ms is not None:
        per_req = min(per_req, max(0.0, endpoint.observed_ttft_ms))
    own_per = per_req
    if endpoint.in_flight > 0 and endpoint.in_flight_tokens > 0 and typical > 0:
        # this router's requests ahead at their own prompts' prefill, at the engine's speed
        # against the cost model as the observed TTFT says it (per_req / typical <= 1)
        mean = endpoint.in_flight_tokens / endpoint.in_flight
        own_per = cost.prefill_ms(max(1, round(mean)), 0) * (per_req / typical)
    overflow = max(0, running + ahead + 1 - endpoint.max_num_seqs)
    return (
        max(waiting_ahead * per_req, own_ahead * own_per)
        + overflow * config.slot_wait_ms
        + running * config.running_seq_ms
        + residual
    )


class Queue:
    name = "queue"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        tokens = inp.typical_tokens
        typical = inp.cost.prefill_ms(max(1, round(tokens)), 0)
        ctx = inp.ctx
        prio, clocks, now = ctx.request.priority, ctx.step_clocks, ctx.now
        return {
            e.id: queue_wait_ms(
                e, inp.cost, inp.config, typical, tokens, prio, clocks.get(e.id), now
            )
            for e in inp.endpoints
        }
