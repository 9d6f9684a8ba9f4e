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
    ``target_ms`` and at most ``max_utilization`` of the rate that saturates it (the
    prefill share reaching 1, or the decoding batch outgrowing the batch or the KV cache);
    0: not even one request (the prefill alone exceeds the target).

    The headroom: near saturation the decoding batch, and with it the step time and the
    TTFT, climbs steeply (the model's p99 at 400 and 500 ms differs by a few percent of
    the rate), so a pool sized at the knee is saturated by the first rate a little over
    the window's mean."""
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
    if max_util > 0 and math.isinf(predicted_ttft_ms(cost, mix, lam / max_util, pct)):
        return False  # within max_util of saturation
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


def combine(
    model: int | None,
    feedback: int | None,
    *,
    serving: int,
    desired: int,
    late: bool,
    persistent: bool,
) -> int | None:
    """An objective's replicas from the model and its feedback.

    ``model``: the pods the arrival rate needs (:func:`replicas_for`); ``feedback``: what
    the objective's observed value asks for; ``serving``: the active pods that produced it;
    ``desired``: the size the pool converges to (serving plus those warming or promoted);
    ``late``: the observation is over its target beyond tolerance; ``persistent``: the pool
    has been late, with the model saying the serving pods suffice, for a whole window.

    - Not late: the larger of the two (feedback's scale-down goes no lower than the model).
    - Late, with pods coming that cover the model (``desired > serving``, ``desired >=
      model``): no more than ``desired``. A backlog's latency and queue ask for many times
      the pods, which arrive after it has cleared; the pods already coming clear it.
    - Late, with the model above the serving pods: the model. The rate explains the
      lateness, and sizes the pool for it.
    - Late although the model says the serving pods suffice: the model is wrong, or the
      window was noisy (a p99 of a few hundred requests is a couple of them). Feedback
      corrects the model once the lateness has lasted a whole window (``persistent``), to
      no more than ``2 * model``; until then it holds ``desired``. The bound is on the
      model, not on the serving pods: a latency no pod count can meet (the tail's own
      prefill over the target) does not grow the pool by one more pod each window.
    """
    if model is None:
        return feedback
    if feedback is None:
        return model
    if not late:
        return max(model, feedback)
    coming = desired > serving and desired >= model
    if coming or model > serving or not persistent:
        return max(model, min(feedback, desired))
    return max(model, min(feedback, 2 * model))
