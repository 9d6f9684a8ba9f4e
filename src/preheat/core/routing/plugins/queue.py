"""Scorer ``queue``: expected wait (ms) before the engine starts our prefill.

Formula, for endpoint p::

    ahead    = max(num_waiting, in_flight)   (queued before us: the engine's count, or this
                                              router's requests without a first token yet
                                              when the engine's figure lags behind)
    per_req  = cost.prefill_ms(typical), or the endpoint's observed TTFT (EWMA) when that
               is lower (a faster engine than the cost model's); typical = the scheduler's
               EWMA of routed requests' uncached prompt tokens (typical_prompt_alpha), or
               typical_prompt_tokens before the first request
    overflow = max(0, num_running + ahead + 1 - max_num_seqs)   (requests beyond the slots)
    step     = chunk_shared_ms + decoding * (decode_seq_ms + decode_kv_ms_per_token * context)
    residual = step_residual * step   if ahead == 0 and decoding > 0, else 0
    queue_ms = ahead * per_req + overflow * slot_wait_ms + num_running * running_seq_ms
               + residual

``residual``: the engine step in progress. A request that reaches an engine which is
decoding waits for the current step to end before its prefill is scheduled (on average half
a step: ``step_residual`` 0.5); an idle engine starts it at once. ``decoding`` is this
router's own count of requests streaming from the endpoint (fresh; the engine's
``num_running`` is as old as the last refresh), ``context`` a typical sequence's context
(the typical prompt plus half of ``typical_output_tokens``); ``chunk_shared_ms``,
``decode_seq_ms`` and ``decode_kv_ms_per_token`` are the cost model's decode step (see
``decode.py``). With a prefill ahead, waiting for the step is part of ``per_req``.

Why not ``num_waiting + in_flight`` and the observed TTFT as ``per_req`` (the first
version): our in-flight requests are among the engine's waiting ones, and an observed TTFT
already contains queueing, so both counted the queue twice and the product grew with its
square. That over-steered away from cached endpoints (measured on the Mooncake session
workload, docs/benchmarks.md: hit rate 9-11% -> 11-12%, TTFT p95 ahead of every baseline).

Inputs: ``num_waiting``, ``in_flight``, ``num_running``, ``decoding``, ``max_num_seqs``,
``observed_ttft_ms`` of the endpoint; the cost model. Parameters (``SchedulerConfig``):
``typical_prompt_tokens`` (1024), ``slot_wait_ms`` (50), ``running_seq_ms`` (0.05),
``step_residual`` (0.5), ``chunk_shared_ms``, ``decode_seq_ms``, ``decode_kv_ms_per_token``,
``typical_output_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint, PrefillCost


def step_residual_ms(endpoint: Endpoint, config: SchedulerConfig, typical_tokens: float) -> float:
    """``residual`` of the formula: the wait for the decode step in progress (0 when this
    router has nothing decoding on the endpoint)."""
    decoding = max(0, endpoint.decoding)
    if decoding == 0:
        return 0.0
    context = max(0.0, typical_tokens) + max(0, config.typical_output_tokens) / 2
    per_seq = config.decode_seq_ms + config.decode_kv_ms_per_token * context
    return config.step_residual * (config.chunk_shared_ms + decoding * per_seq)


def queue_wait_ms(
    endpoint: Endpoint,
    cost: PrefillCost,
    config: SchedulerConfig,
    typical_ms: float | None = None,
    typical_tokens: float | None = None,
) -> float:
    """The formula above for one endpoint (``typical_ms``: the typical prefill, if known;
    ``typical_tokens``: its prompt tokens, default ``typical_prompt_tokens``)."""
    ahead = max(max(0, endpoint.num_waiting), max(0, endpoint.in_flight))
    running = max(0, endpoint.num_running)
    residual = 0.0
    if ahead == 0:
        tokens = config.typical_prompt_tokens if typical_tokens is None else typical_tokens
        residual = step_residual_ms(endpoint, config, tokens)
        if running < endpoint.max_num_seqs:
            return running * config.running_seq_ms + residual
    per_req = (
        typical_ms if typical_ms is not None else cost.prefill_ms(config.typical_prompt_tokens, 0)
    )
    if endpoint.observed_ttft_ms is not None:
        per_req = min(per_req, max(0.0, endpoint.observed_ttft_ms))
    overflow = max(0, running + ahead + 1 - endpoint.max_num_seqs)
    return (
        ahead * per_req
        + overflow * config.slot_wait_ms
        + running * config.running_seq_ms
        + residual
    )


class Queue:
    name = "queue"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        tokens = inp.typical_tokens
        typical = inp.cost.prefill_ms(max(1, round(tokens)), 0)
        return {
            e.id: queue_wait_ms(e, inp.cost, inp.config, typical, tokens) for e in inp.endpoints
        }
