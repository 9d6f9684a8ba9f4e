"""Step 2c: a capacity estimate from the arrival rate and the request mix.

Feedback from observed percentiles says how late the pool already is; it cannot say how
many pods a rate needs. This module estimates that from the engine's costs, the way the
router predicts a TTFT (``preheat.engine.costmodel.CostModel``: prefill time of the
uncached prompt tokens, decode step time ``a + b * batch + c * kv_tokens``).

One pod under continuous batching (vLLM's scheduler: every step runs the batch's decodes
and the waiting prompts' prefills together), arrival rate ``lam`` (req/s), mean prompt
``P`` tokens (``C`` of them cached), mean output ``O`` tokens:

- a decode-only step of ``B`` sequences takes ``s(B) = a + b * B + c * B * (P + O / 2)``;
  a step with a prefill takes the prefill's time plus the decodes riding along:
  ``S = prefill(P - C) + b * B + c * B * (P + O / 2)``;
- the prefill share of the GPU's time is ``u = lam * S``; decodes advance in the rest, so a
  request decodes for ``O * s(B) / (1 - u)`` and ``B = lam * O * s(B) / (1 - u)`` sequences
  decode at once (Little's law, solved by fixed-point iteration);
- TTFT at percentile ``q``: the step in flight, the request's own prefill, and the queue of
  prefills ahead of it, whose tail is taken as an M/M/1 queue's (Poisson arrivals):
  ``ttft_q = s(B) + S + S * ln(u / (1 - q)) / (1 - u)`` when ``u > 1 - q``, else
  ``s(B) + S``; saturated (infinite) when ``u >= 1``, when ``B`` passes ``max_batch`` or
  when ``B * (P + O)`` passes the KV cache.

"""

from __future__ import annotations

import math

from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.types import Mix

__all__ = ["ServiceCost", "combine", "pod_rate", "predicted_ttft_ms", "replicas_for"]


def _state(cost: ServiceCost, mix: Mix, lam: float) -> tuple[float, float, float] | None:
    """(decoding batch B, decode step ms, prefill step ms S) at ``lam`` req/s; None:
    saturated."""
    context = mix.prompt_tokens + mix.output_tokens / 2.0
    prefill = cost.prefill_ms(max(0.0, mix.prompt_tokens - mix.cached_tokens))
    b = 1.0
    for _ in range(60):
        big_s = prefill + cost.ride_ms(b, context)
        u = lam * big_s / 1000.0
        if u >= 1.0:
            return None
        nxt = lam * mix.output_tokens * cost.step_ms(b, context) / 1000.0 / (1.0 - u)
        nxt = max(1.0, nxt)
        if nxt > cost.max_batch or nxt * (mix.prompt_tokens + mix.output_tokens) > cost.kv_tokens:
            return None
        if abs(nxt - b) < 1e-4:
            b = nxt
            break
        b = nxt
    return b, cost.step_ms(b, context), prefill + cost.ride_ms(b, context)


def predicted_ttft_ms(cost: ServiceCost, mix: Mix, lam: float, percentile: float) -> float:
    """TTFT at ``percentile`` (0-100) on one pod at ``lam`` req/s (inf: saturated)."""
    st = _state(cost, mix, lam)
    if st is None:
        return math.inf
    _, step, big_s = st
    u = lam * big_s / 1000.0
    if u >= 1.0:
        return math.inf
    t0 = step + big_s
    tail = 1.0 - percentile / 100.0
    if u <= tail or tail <= 0:
        return t0
    return t0 + big_s * math.log(u / tail) / (1.0 - u)


def pod_rate(
    cost: ServiceCost,
    mix: Mix,
    target_ms: float,
    percentile: float,
    max_utilization: float = 0.9,
) -> float:
    """The highest arrival rate (req/s) one pod takes with its TTFT percentile within
    ``target_ms`` and its prefill share within ``max_utilization``; 0: not even one request
    (the prefill alone exceeds the target)."""
    if predicted_ttft_ms(cost, mix, 1e-9, percentile) > target_ms:
        return 0.0
    lo, hi = 0.0, 1.0
    while _ok(cost, mix, hi, target_ms, percentile, max_utilization) and hi < 1e6:
        lo, hi = hi, hi * 2.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if _ok(cost, mix, mid, target_ms, percentile, max_utilization):
            lo = mid
        else:
            hi = mid
    return lo


def _ok(
    cost: ServiceCost, mix: Mix, lam: float, target: float, pct: float, max_util: float
) -> bool:
    st = _state(cost, mix, lam)
    if st is None or lam * st[2] / 1000.0 > max_util:
        return False
    return predicted_ttft_ms(cost, mix, lam, pct) <= target


def replicas_for(
    arrival_rate: float,
    cost: ServiceCost,
    mix: Mix,
    target_ms: float,
    percentile: float,
    highest: int,
) -> int | None:
    """Pods the arrival rate needs to meet the TTFT objective (at most ``highest``);
    None: no estimate (no rate, or nothing finished to learn the mix from)."""
    if arrival_rate <= 0 or mix.requests <= 0:
        return None
    per_pod = pod_rate(cost, mix, target_ms, percentile)
    if per_pod <= 0:
        return highest
    return max(1, min(highest, math.ceil(round(arrival_rate / per_pod, 9))))


def combine(model: int | None, feedback: int | None, serving: int, late: bool) -> int | None:
    """The latency objective's replicas from the model and the feedback.

    The model is the floor: the rate needs that many whatever the latency says. Late
    (observed over target beyond tolerance): the feedback may ask for more, since the model
    has been wrong, but no more than ``max(2 * model, serving + 1)``: a backlog's latency
    asks for many times the pods, which arrive after it has cleared. Not late: the larger
    of the two (the feedback's scale-down goes no lower than the model)."""
    if model is None:
        return feedback
    if feedback is None:
        return model
    if late:
        return max(model, min(feedback, max(2 * model, serving + 1)))
    return max(model, feedback)
