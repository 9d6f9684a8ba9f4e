"""Scorer ``kv-pressure``: a risk penalty (ms) as the KV cache fills (preemption risk).

Formula, with u = kv_cache_usage clipped to [0, 1] and t = kv_pressure_threshold::

    penalty_ms = 0                                            u <= t
               = kv_pressure_max_ms * ((u - t) / (1 - t))**2  u >  t

Parameters (``SchedulerConfig``): ``kv_pressure_threshold`` (0.8), ``kv_pressure_max_ms``
(500 ms at a full cache). Not a physical delay, so it is not part of the predicted TTFT;
it only steers requests away from endpoints about to preempt.
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint


def kv_pressure_ms(endpoint: Endpoint, config: SchedulerConfig) -> float:
    """The formula above for one endpoint."""
    u = min(1.0, max(0.0, endpoint.kv_cache_usage))
    t = config.kv_pressure_threshold
    if u <= t or t >= 1.0:
        return 0.0
    return config.kv_pressure_max_ms * ((u - t) / (1.0 - t)) ** 2


class KvPressure:
    name = "kv-pressure"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        return {e.id: kv_pressure_ms(e, inp.config) for e in inp.endpoints}
