"""A class's degradation ladder: what the router does with a request its pool would serve
too late (every endpoint predicted past the class's TTFT target) or cannot take now (the
pool at its bound on requests in flight). In order:

0. ``fallback-pool``: the class names ``degrade.fallbackPool`` and that pool (a smaller or
   distilled model) predicts a start within the target: the request goes there, as that
   pool's model (the router's dispatcher decides this step before the others);
1. ``clamp-output``: the class names a degraded ``maxTokens``: the request is served with
   ``max_tokens`` capped to it (shorter answers drain the pool sooner; the response says
   it was clamped, and ``finish_reason: length`` stays honest);
2. ``queue``: a class that is not sheddable is served anyway (it waits in the engine's
   queue, where its priority puts it ahead of lower classes) within its request timeout;
3. ``reject``: a sheddable class is refused early (429 / RESOURCE_EXHAUSTED with
   Retry-After from the prediction): what a request without a class gets too.

Pure.
"""

from __future__ import annotations

from preheat.core.traffic.classes import TrafficClass

FALLBACK = "fallback-pool"
CLAMP = "clamp-output"
QUEUE = "queue"
REJECT = "reject"
STEPS = (FALLBACK, CLAMP, QUEUE, REJECT)


def step_for(klass: TrafficClass | None) -> str:
    """The ladder's step for a request of ``klass`` that its pool would serve too late."""
    if klass is None:
        return REJECT
    if klass.degraded_max_tokens > 0:
        return CLAMP
    if not klass.sheddable:
        return QUEUE
    return REJECT


def clamp(max_tokens: int, klass: TrafficClass) -> int:
    """``max_tokens`` capped to the class's degraded limit (unchanged without one)."""
    cap = klass.degraded_max_tokens
    return min(max_tokens, cap) if cap > 0 else max_tokens
