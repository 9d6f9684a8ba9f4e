"""Scorer ``queue``: expected wait (ms) before the engine starts our prefill.

Formula, for endpoint p::

    ahead    = num_waiting + in_flight                 (queued before us: engine + this router)
    per_req  = observed_ttft_ms            if known    (EWMA of this endpoint's TTFT)
             = cost.prefill_ms(typical_prompt_tokens)  otherwise
    overflow = max(0, num_running + ahead + 1 - max_num_seqs)   (requests beyond the slots)
    queue_ms = ahead * per_req + overflow * slot_wait_ms + num_running * running_seq_ms

Inputs: ``num_waiting``, ``in_flight``, ``num_running``, ``max_num_seqs``,
``observed_ttft_ms`` of the endpoint; the cost model. Parameters (``SchedulerConfig``):
``typical_prompt_tokens`` (1024), ``slot_wait_ms`` (50), ``running_seq_ms`` (0.05).
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint, PrefillCost


def queue_wait_ms(
    endpoint: Endpoint,
    cost: PrefillCost,
    config: SchedulerConfig,
    typical_ms: float | None = None,
) -> float:
    """The formula above for one endpoint (``typical_ms``: the typical prefill, if known)."""
    ahead = max(0, endpoint.num_waiting) + max(0, endpoint.in_flight)
    running = max(0, endpoint.num_running)
    if ahead == 0 and running < endpoint.max_num_seqs:
        return running * config.running_seq_ms
    if endpoint.observed_ttft_ms is not None:
        per_req = max(0.0, endpoint.observed_ttft_ms)
    elif typical_ms is not None:
        per_req = typical_ms
    else:
        per_req = cost.prefill_ms(config.typical_prompt_tokens, 0)
    overflow = max(0, running + ahead + 1 - endpoint.max_num_seqs)
    return ahead * per_req + overflow * config.slot_wait_ms + running * config.running_seq_ms


class Queue:
    name = "queue"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        typical = inp.cost.prefill_ms(inp.config.typical_prompt_tokens, 0)
        return {e.id: queue_wait_ms(e, inp.cost, inp.config, typical) for e in inp.endpoints}
