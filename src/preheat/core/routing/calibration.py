"""How late an endpoint's first tokens have come against this router's predictions.

The predicted TTFT (``scheduler.predict_ttft_ms``: rtt + queue + prefill) is a model. Under
overload it under-predicts: prompts queued on an engine are prefilled in steps that also
carry every running sequence's decode, and several prefills share a step, so a request
predicted to start in 300-440 ms started in 500-650 (the simulator on the ServeGen day at
10x, 17 pods, the overloaded minute at 420-480 s: served-late requests' actual minus
predicted TTFT had a median of 219 ms; docs/benchmarks.md, *The prediction's miss*). A
request admitted on such a prediction against a TTFT target is served late, and its place
in the queue makes the requests behind it late too.

So the router keeps, per endpoint, an EWMA of how much later each first token came than it
predicted when it sent the request (``observe``), and the scheduler adds the positive part
of it to the endpoint's predicted TTFT when it checks a deadline (``late_ms``): an endpoint
that has been slower than its model is admitted against a target as slow as it has been.
The miss fades with a half-life (``SchedulerConfig.ttft_error_half_life_s``) since the
last first token, so an endpoint the correction closed (no request sent, no new sample)
opens again within seconds, and one sample is worth less the older it is. Only the
admission reads it: the ranking between endpoints is the model's, unchanged.

Pure: values in, values out; ``now`` is the router's clock (seconds).
"""

from __future__ import annotations

import math

#: weight of one first token in the EWMA (as the router's observed TTFT: alpha 0.2)
ALPHA = 0.2


def faded(error_ms: float | None, at: float | None, now: float, half_life_s: float) -> float:
    """``error_ms`` as of ``now``, halved every ``half_life_s`` since ``at`` (0 when there is
    none, or when ``half_life_s`` <= 0: the correction is off)."""
    if error_ms is None or at is None or not half_life_s > 0 or not math.isfinite(error_ms):
        return 0.0
    age = max(0.0, now - at)
    return error_ms * math.pow(0.5, age / half_life_s)


def observe(
    error_ms: float | None,
    at: float | None,
    predicted_ms: float,
    observed_ms: float,
    now: float,
    half_life_s: float,
) -> tuple[float | None, float | None]:
    """The EWMA ``(error_ms, at)`` after a first token came ``observed_ms`` after its
    request was sent, where the router had predicted ``predicted_ms`` (the model's
    prediction, without this correction). The previous value fades to ``now`` first.
    With the correction off (``half_life_s`` <= 0) nothing is kept: the input, unchanged."""
    if not half_life_s > 0:
        return error_ms, at
    miss = observed_ms - predicted_ms
    if not math.isfinite(miss):
        return (error_ms if error_ms is not None else 0.0), (at if at is not None else now)
    if error_ms is None or at is None:
        return miss, now
    prev = faded(error_ms, at, now, half_life_s)
    return prev + ALPHA * (miss - prev), now


def late_ms(error_ms: float | None, at: float | None, now: float, half_life_s: float) -> float:
    """What the scheduler adds to an endpoint's predicted TTFT against a deadline: the
    endpoint's faded miss where its first tokens came later than predicted, else 0."""
    return max(0.0, faded(error_ms, at, now, half_life_s))
