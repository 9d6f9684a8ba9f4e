"""The degradation ladder's step for a request the pool would serve too late."""

from __future__ import annotations

import pytest

from preheat.core.traffic.classes import TrafficClass
from preheat.core.traffic.ladder import CLAMP, QUEUE, REJECT, clamp, step_for


@pytest.mark.parametrize(
    ("klass", "step"),
    [
        (None, REJECT),  # no class: rejected early, as before
        (TrafficClass(name="a", ttft_ms=1), REJECT),  # sheddable, no clamp
        (TrafficClass(name="a", ttft_ms=1, degraded_max_tokens=64), CLAMP),
        (TrafficClass(name="a", ttft_ms=1, sheddable=False), QUEUE),
        (TrafficClass(name="a", ttft_ms=1, sheddable=False, degraded_max_tokens=8), CLAMP),
    ],
)
def test_the_ladder_clamps_then_queues_the_unsheddable_then_rejects(
    klass: TrafficClass | None, step: str
) -> None:
    assert step_for(klass) == step


def test_clamp_caps_max_tokens_and_never_raises_it() -> None:
    k = TrafficClass(name="a", ttft_ms=1, degraded_max_tokens=64)
    assert clamp(500, k) == 64
    assert clamp(10, k) == 10
    assert clamp(500, TrafficClass(name="b", ttft_ms=1)) == 500
