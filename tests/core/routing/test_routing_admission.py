"""Table tests of the router's admission (default TTFT target, adaptive bound, drain time)."""

from __future__ import annotations

import pytest
from routingkit import NOW, make_endpoint

from preheat.core.routing.admission import (
    AdmissionConfig,
    AdmissionInput,
    LimitState,
    admit,
    observe_ttft,
    pool_limit,
    ttft_target_ms,
)

CFG = AdmissionConfig(default_ttft_target_ms=1000.0, initial_per_endpoint=8)
TWO = (make_endpoint("w-0", max_num_seqs=64), make_endpoint("w-1", max_num_seqs=64))


@pytest.mark.parametrize(
    ("deadline", "slo", "config", "want"),
    [
        (300.0, 500.0, CFG, 300.0),  # the request's own deadline first
        (None, 500.0, CFG, 500.0),  # then its SLO class's
        (None, None, CFG, 1000.0),  # then the pool's default target
        (None, None, AdmissionConfig(default_ttft_target_ms=0), None),  # 0: no target
    ],
)
def test_ttft_target_of_a_request(
    deadline: float | None, slo: float | None, config: AdmissionConfig, want: float | None
) -> None:
    assert ttft_target_ms(deadline, slo, config) == want


@pytest.mark.parametrize(
    ("per_endpoint", "endpoints", "config", "want"),
    [
        (8.0, TWO, CFG, 16),  # per endpoint x routable endpoints
        (8.0, TWO[:1], CFG, 8),  # one endpoint fewer: half the bound
        (500.0, TWO, CFG, 128),  # at most the endpoints' max_num_seqs
        (0.5, TWO, CFG, 4),  # at least min_per_endpoint (2) each
        (8.0, TWO, AdmissionConfig(default_ttft_target_ms=1000, max_in_flight=10), 10),
        (8.0, TWO, AdmissionConfig(default_ttft_target_ms=0), 128),  # no target: the ceiling
    ],
)
def test_pool_limit(
    per_endpoint: float, endpoints: tuple, config: AdmissionConfig, want: int
) -> None:
    assert pool_limit(LimitState(per_endpoint), endpoints, config) == want


def test_admits_below_the_limit_and_refuses_at_it_with_the_drain_time() -> None:
    state = LimitState(8.0)
    ok = admit(AdmissionInput(NOW, 15, TWO, completions_per_s=4.0), state, CFG)
    assert ok.admitted
    assert ok.limit == 16
    # 16 in flight, 16 allowed: one must finish; 4 finish per second -> 0.25 s -> floor 1 s
    full = admit(AdmissionInput(NOW, 16, TWO, completions_per_s=4.0, pool="p"), state, CFG)
    assert not full.admitted
    assert full.retry_after_s == pytest.approx(1.0)
    # 40 in flight over a limit of 16 at 4/s: 25 to finish -> 6.25 s (the drain time)
    deep = admit(AdmissionInput(NOW, 40, TWO, completions_per_s=4.0), state, CFG)
    assert deep.retry_after_s == pytest.approx(25 / 4.0)
    assert "predicted drain 6.25 s" in deep.explanation
    # a slower pool drains later: the retry-after follows the rate, it is no constant
    slow = admit(AdmissionInput(NOW, 40, TWO, completions_per_s=1.0), state, CFG)
    assert slow.retry_after_s == pytest.approx(25.0)
    capped = admit(AdmissionInput(NOW, 400, TWO, completions_per_s=1.0), state, CFG)
    assert capped.retry_after_s == CFG.max_retry_after_s
    unknown = admit(AdmissionInput(NOW, 40, TWO, completions_per_s=0.0), state, CFG)
    assert unknown.retry_after_s == CFG.min_retry_after_s
    assert "no completion rate" in unknown.explanation


def test_no_routable_endpoint_is_left_to_the_queue() -> None:
    verdict = admit(AdmissionInput(NOW, 999, (), completions_per_s=0.0), LimitState(8.0), CFG)
    assert verdict.admitted


@pytest.mark.parametrize(
    ("ttft_ms", "in_flight", "moves"),
    [
        (3000.0, 16, "down"),  # over the target: shrinks
        (3000.0, 1, "down"),  # over the target even while lightly used
        (200.0, 16, "up"),  # within it while the limit binds: grows
        (200.0, 2, "same"),  # within it while the limit holds nothing back: no signal
    ],
)
def test_the_limit_follows_the_observed_ttft(ttft_ms: float, in_flight: int, moves: str) -> None:
    before = LimitState(8.0)
    after = observe_ttft(before, ttft_ms, 1000.0, in_flight, TWO, CFG)
    if moves == "down":
        assert after.per_endpoint < before.per_endpoint
    elif moves == "up":
        assert after.per_endpoint > before.per_endpoint
    else:
        assert after == before


def test_sustained_overload_drives_the_limit_to_its_floor_and_recovery_raises_it() -> None:
    state = LimitState(64.0)
    for _ in range(200):
        state = observe_ttft(state, 5000.0, 1000.0, 100, TWO, CFG)
    assert state.per_endpoint == CFG.min_per_endpoint
    for _ in range(400):
        limit = pool_limit(state, TWO, CFG)
        state = observe_ttft(state, 100.0, 1000.0, limit, TWO, CFG)
    assert pool_limit(state, TWO, CFG) == 128  # back at the ceiling (max_num_seqs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"default_ttft_target_ms": -1.0},
        {"default_ttft_target_ms": float("nan")},
        {"max_in_flight": -1},
        {"min_per_endpoint": 0},
        {"initial_per_endpoint": 1, "min_per_endpoint": 2},
        {"min_retry_after_s": 5.0, "max_retry_after_s": 1.0},
    ],
)
def test_bad_config_is_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):  # the message names the field
        AdmissionConfig(**kwargs)


def test_a_late_first_token_shrinks_the_limit_once_per_generation_of_requests() -> None:
    """The late first tokens of requests that arrived before the limit last shrank do not
    shrink it again (they were admitted under the limit that shrank for them); a late one
    that arrived after it does. Every late sample of an overload's queue used to shrink it,
    down to its floor, and it kept refusing after the queue drained."""
    start = LimitState(64.0)
    first = observe_ttft(start, 5000.0, 1000.0, 100, TWO, CFG, arrived_at=0.0, now=5.0)
    assert first.per_endpoint < start.per_endpoint
    assert first.shrunk_at == 5.0
    state = first
    for i in range(1, 100):  # the rest of the queue admitted at 0-1 s, first tokens at 5-6 s
        state = observe_ttft(
            state, 5000.0, 1000.0, 100, TWO, CFG, arrived_at=i / 100, now=5.0 + i / 100
        )
    assert state == first
    again = observe_ttft(state, 5000.0, 1000.0, 100, TWO, CFG, arrived_at=5.5, now=10.5)
    assert again.per_endpoint < first.per_endpoint
    assert again.shrunk_at == 10.5
    # within the target it grows as before, whenever the request arrived
    limit = pool_limit(again, TWO, CFG)
    up = observe_ttft(again, 100.0, 1000.0, limit, TWO, CFG, arrived_at=1.0, now=11.0)
    assert up.per_endpoint > again.per_endpoint
    assert up.shrunk_at == 10.5
