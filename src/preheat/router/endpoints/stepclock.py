"""An engine's step rhythm from the token frames a router streams from it.

An engine ends every step with one token for each sequence it decodes, so the frames a
router receives from an endpoint arrive in bursts, one burst per step. The estimator keeps:

- the step's boundary: the arrival of the first frame of the latest burst (later frames of
  the same step are frames that arrived within half a step of it: their delay is noise);
- the step's length: an EWMA of the inter-token latency of single streams (a frame's gap to
  the previous frame of the same request, per token);
- the lag: an EWMA of the router's TTFT of a request less the engine's own (the request's
  trip to the engine plus the first token's trip back: RTT and both ends' processing);
- the error: an EWMA of how far the clock's prediction of a request's wait for the step in
  progress missed the wait the worker reported (``Timing.queue_ms``); the scheduler uses
  the clock only while it is small (``core/routing/plugins/queue.py``).

:meth:`StepClockEstimator.clock` gives them as a :class:`~preheat.core.routing.types.StepClock`
for the queue scorer (``core/routing/plugins/queue.py``), which predicts from it how long a
request sent now waits for the step in progress. Until a lag was measured the endpoint's
RTT stands in for it.
"""

from __future__ import annotations

import dataclasses

from preheat.core.routing.types import StepClock
from preheat.router.endpoints.rtt import Ewma


class StepClockEstimator:
    def __init__(self, alpha: float) -> None:
        self.step = Ewma(alpha)
        self.lag = Ewma(alpha)
        self.error = Ewma(alpha)
        self._boundary: float | None = None
        self._clock: StepClock | None = None

    def token(self, at: float, itl_ms: float | None = None, rtt_ms: float | None = None) -> bool:
        """A token frame arrived at ``at`` (seconds, the router's clock); ``itl_ms`` is its
        stream's gap to its previous frame per token (None for a stream's first token).
        Returns whether :meth:`clock` changed (a new step's boundary, or the first)."""
        if itl_ms is not None and itl_ms > 0:
            self.step.update(itl_ms)
        step = self.step.value
        if step is None:
            return False
        b = self._boundary
        if b is not None and 0.0 <= (at - b) * 1000.0 < step / 2:
            return False  # the same step's burst
        self._boundary = at
        self._clock = StepClock(at, step, self._lag_ms(rtt_ms), self.error.value)
        return True

    def lag_sample(self, lag_ms: float) -> None:
        """The router's TTFT of a request less the engine's own (ms)."""
        lag = self.lag.update(max(0.0, lag_ms))
        if self._clock is not None:
            self._clock = dataclasses.replace(self._clock, lag_ms=lag)

    def error_sample(self, error_ms: float) -> None:
        """How far one prediction of the wait for the step in progress missed (ms)."""
        error = self.error.update(abs(error_ms))
        if self._clock is not None:
            self._clock = dataclasses.replace(self._clock, error_ms=error)

    def clock(self) -> StepClock | None:
        """The latest boundary, step, lag and error; None before a step was measured."""
        return self._clock

    def _lag_ms(self, rtt_ms: float | None) -> float:
        if self.lag.value is not None:
            return self.lag.value
        return max(0.0, rtt_ms) if rtt_ms is not None else 0.0
