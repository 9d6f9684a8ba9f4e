"""An engine's step rhythm from the token frames the router streams from it
(``StepClockEstimator``, ``EndpointStore.token``/``upstream_lag``/``step_clocks``)."""

from __future__ import annotations

import pytest
from endpointkit import running_store, sim_workers

from preheat.router.endpoints import StaticDiscovery
from preheat.router.endpoints.stepclock import StepClockEstimator


def test_no_clock_before_a_step_was_measured() -> None:
    est = StepClockEstimator(0.5)
    assert not est.token(10.0)  # a stream's first token says nothing of the step
    assert est.clock() is None


def test_the_first_frame_of_a_step_is_its_boundary() -> None:
    est = StepClockEstimator(0.5)
    assert est.token(10.000, itl_ms=8.0, rtt_ms=1.5)
    c = est.clock()
    assert c is not None
    assert (c.last_token_at, c.step_ms, c.lag_ms) == (10.000, 8.0, 1.5)  # RTT until a lag
    # other streams' tokens of the same step, within half a step: the same boundary
    assert not est.token(10.001, itl_ms=8.0)
    assert not est.token(10.0035, itl_ms=8.0)
    assert est.clock() == c
    # the next step's first frame moves it
    assert est.token(10.008, itl_ms=8.0)
    c2 = est.clock()
    assert c2 is not None
    assert c2.last_token_at == 10.008


def test_the_step_follows_the_streams_inter_token_latency() -> None:
    est = StepClockEstimator(0.5)
    est.token(1.0, itl_ms=8.0)
    est.token(1.010, itl_ms=12.0)  # a longer step (a prefill chunk rode in it)
    c = est.clock()
    assert c is not None
    assert c.step_ms == pytest.approx(10.0)
    est.token(1.020, itl_ms=None)  # a new stream's first token: a boundary, not a step
    c = est.clock()
    assert c is not None
    assert (c.last_token_at, c.step_ms) == (1.020, pytest.approx(10.0))


def test_a_measured_lag_replaces_the_rtt() -> None:
    est = StepClockEstimator(0.5)
    est.token(1.0, itl_ms=8.0, rtt_ms=5.0)
    est.lag_sample(2.0)
    c = est.clock()
    assert c is not None
    assert c.lag_ms == 2.0
    est.lag_sample(-3.0)  # a clock skew cannot make it negative
    est.token(1.02, itl_ms=8.0, rtt_ms=5.0)
    c = est.clock()
    assert c is not None
    assert c.lag_ms == pytest.approx(1.0)


def test_the_error_of_its_predictions_is_kept_with_the_clock() -> None:
    est = StepClockEstimator(0.5)
    est.token(1.0, itl_ms=8.0)
    c = est.clock()
    assert c is not None
    assert c.error_ms is None  # not measured: the scheduler does not trust it yet
    est.error_sample(-2.0)  # waited 2 ms less than predicted
    est.error_sample(1.0)
    c = est.clock()
    assert c is not None
    assert c.error_ms == pytest.approx(1.5)
    est.token(1.008, itl_ms=8.0)  # kept across steps
    c = est.clock()
    assert c is not None
    assert c.error_ms == pytest.approx(1.5)


async def test_the_store_keeps_a_clock_per_endpoint_and_forgets_unknown_ids() -> None:
    t = [100.0]
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        async with running_store(source, clock=lambda: t[0]) as store:
            await store.wait_ready(1, timeout_s=10)
            assert store.step_clocks() == {}
            store.token("w-0")
            assert store.step_clocks() == {}  # no step yet
            t[0] = 100.008
            store.token("w-0", itl_ms=8.0)
            c = store.step_clocks()["w-0"]
            assert (c.last_token_at, c.step_ms) == (100.008, 8.0)
            store.upstream_lag("w-0", 3.0)
            assert store.step_clocks()["w-0"].lag_ms == 3.0
            store.upstream_lag("w-0", float("nan"))  # ignored
            assert store.step_clocks()["w-0"].lag_ms == 3.0
            assert store.step_clocks()["w-0"].error_ms is None
            store.step_error("w-0", -0.5)
            assert store.step_clocks()["w-0"].error_ms == 0.5
            store.step_error("w-0", float("nan"))  # ignored
            assert store.step_clocks()["w-0"].error_ms == 0.5
            store.token("nope", itl_ms=8.0)  # unknown ids are ignored
            assert set(store.step_clocks()) == {"w-0"}
