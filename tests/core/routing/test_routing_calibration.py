"""The prediction's miss (``core/routing/calibration.py``): an endpoint whose first tokens
have come later than predicted is admitted against a deadline as slow as it has been; the
miss fades, and the ranking does not read it."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from routingkit import COST, NOW, make_ctx, make_endpoint, make_request, picked

from preheat.core.routing import calibration
from preheat.core.routing.scheduler import SchedulerConfig, SchedulerState, schedule
from preheat.core.routing.types import Endpoint

CFG = SchedulerConfig()
HL = CFG.ttft_error_half_life_s


def missed(endpoint_id: str, miss_ms: float, at: float = NOW) -> Endpoint:
    """An idle endpoint whose first tokens came ``miss_ms`` later than predicted, at ``at``."""
    return dataclasses.replace(make_endpoint(endpoint_id), ttft_error_ms=miss_ms, ttft_error_at=at)


def test_the_first_sample_is_the_miss_and_later_ones_move_it_by_alpha() -> None:
    err, at = calibration.observe(None, None, 300.0, 550.0, NOW, HL)
    assert (err, at) == (250.0, NOW)
    err2, at2 = calibration.observe(err, at, 300.0, 300.0, NOW, HL)  # on time: it shrinks
    assert at2 == NOW
    assert err2 == 250.0 * (1 - calibration.ALPHA)


def test_the_miss_halves_every_half_life_and_is_off_at_zero() -> None:
    assert calibration.late_ms(200.0, NOW, NOW + HL, HL) == 100.0
    assert calibration.late_ms(200.0, NOW, NOW + 2 * HL, HL) == 50.0
    assert calibration.late_ms(200.0, NOW, NOW + 5, 0.0) == 0.0
    assert calibration.late_ms(None, None, NOW, HL) == 0.0
    # an early endpoint is not made faster than its model: only lateness is added
    assert calibration.late_ms(-80.0, NOW, NOW, HL) == 0.0


def test_with_the_correction_off_nothing_is_kept() -> None:
    """The live router and the simulator both call ``observe``: off keeps no miss in either
    (the gauge shows no endpoint), not one that is recorded and then ignored."""
    assert calibration.observe(None, None, 300.0, 900.0, NOW, 0.0) == (None, None)
    assert calibration.observe(40.0, NOW - 1, 300.0, 900.0, NOW, 0.0) == (40.0, NOW - 1)


@given(
    prev=st.floats(-2_000, 2_000),
    age=st.floats(0, 60),
    predicted=st.floats(0, 5_000),
    observed=st.floats(0, 5_000),
)
def test_a_sample_moves_the_faded_miss_towards_it_and_never_past(
    prev: float, age: float, predicted: float, observed: float
) -> None:
    before = calibration.faded(prev, NOW, NOW + age, HL)
    after, at = calibration.observe(prev, NOW, predicted, observed, NOW + age, HL)
    miss = observed - predicted
    assert at == NOW + age
    assert min(before, miss) - 1e-6 <= after <= max(before, miss) + 1e-6


def test_an_endpoint_that_has_been_late_is_refused_against_a_deadline() -> None:
    # predicted 102 ms (a 1024-token prefill, idle); its first tokens came 450 ms late
    late = missed("w-0", 450.0)
    req = make_request(deadline_ms=500.0)
    d, _ = schedule(make_ctx([late], req), CFG, COST, SchedulerState())
    assert d.reason == "rejected"
    assert "later than predicted" in d.explanation
    assert d.predicted_ttft_ms > 500.0
    # the same endpoint without the miss, or with the correction off, is admitted
    d, _ = schedule(make_ctx([make_endpoint("w-0")], req), CFG, COST, SchedulerState())
    assert picked(d) == "w-0"
    off = dataclasses.replace(CFG, ttft_error_half_life_s=0.0)
    d, _ = schedule(make_ctx([late], req), off, COST, SchedulerState())
    assert picked(d) == "w-0"


def test_the_refusal_opens_again_as_the_miss_fades() -> None:
    late = missed("w-0", 450.0)
    req = make_request(deadline_ms=500.0)
    # 102 ms predicted + 450 ms faded: within 500 once the miss is under 398 ms
    d, _ = schedule(make_ctx([late], req, now=NOW + 0.1), CFG, COST, SchedulerState())
    assert d.reason == "rejected"
    d, _ = schedule(make_ctx([late], req, now=NOW + HL), CFG, COST, SchedulerState())
    assert picked(d) == "w-0"


def test_the_deadline_goes_to_an_endpoint_that_keeps_its_predictions() -> None:
    # w-0 is predicted sooner (nothing queued) but has been 450 ms late; w-1 has a request
    # ahead and keeps its predictions: the deadline is met on w-1
    eps = [missed("w-0", 450.0), make_endpoint("w-1", queue=1)]
    d, _ = schedule(make_ctx(eps, make_request(deadline_ms=500.0)), CFG, COST, SchedulerState())
    assert picked(d) == "w-1"


def test_without_a_deadline_the_ranking_ignores_the_miss() -> None:
    eps = [missed("w-0", 450.0), make_endpoint("w-1", queue=1)]
    d, _ = schedule(make_ctx(eps, make_request()), CFG, COST, SchedulerState())
    assert picked(d) == "w-0"
    # and the prediction it reports is the model's, which the next sample is measured on
    assert d.predicted_ttft_ms < 200.0
