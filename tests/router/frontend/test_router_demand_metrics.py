"""Demand the router turns away reaches the autoscaler (issue 12, item B): the router counts
every request for its pool (``preheat_router_arrivals_total``) and those it refused, by
reason (``preheat_router_refused_total``), and the direct-scrape source reads their rates
from its ``/metrics`` into the policy's :class:`~preheat.core.autoscaling.Demand`."""

from __future__ import annotations

import grpc
import pytest
from frontendkit import MODEL, gen, router, words, workers
from prometheus_client import generate_latest

from preheat.autoscaler.scrape import DirectScrapeSource, parse_router
from preheat.autoscaler.source import SignalQuery
from preheat.core import metric_names as mn
from preheat.core.autoscaling import Context, Direction, ReplicaCounts, decide
from preheat.core.pool import (
    AutoscalingConfig,
    Objective,
    PanicConfig,
    ReplicasConfig,
    ScaleRule,
    Signal,
)
from preheat.core.promtext import parse_samples
from preheat.router.frontend.metrics import RouterMetrics

POOL = "chat"
QUERY = SignalQuery((Objective(Signal.TTFT, 95.0, 400.0),), window_s=60.0)
ARRIVALS = mn.ROUTER_ARRIVALS + "_total"
REFUSED = mn.ROUTER_REFUSED + "_total"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def metrics_text(r: object) -> str:
    async with r.http.get(r.url + "/metrics") as resp:  # type: ignore[attr-defined]
        assert resp.status == 200
        return str(await resp.text())


def counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in parse_samples(text, only=(ARRIVALS, REFUSED))
    }


async def test_refusals_and_arrivals_are_counted_by_pool_and_reason_and_read_as_rates() -> None:
    clock = Clock()
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], pool=POOL) as r,
    ):
        source = DirectScrapeSource(
            lambda: [], routers=lambda: [r.url], pool=POOL, clock=clock, stale_after_s=1e9
        )
        try:
            # the series exist before any request: a rate over zeros is zero, not missing
            before = counters(await metrics_text(r))
            assert before[(ARRIVALS, (("model_name", MODEL), ("pool", POOL)))] == 0.0
            assert (
                before[(REFUSED, (("model_name", MODEL), ("pool", POOL), ("reason", "rejected")))]
                == 0.0
            )
            await source.scrape_routers()

            for k in range(2):  # served
                await r.generate(gen(f"served {k}", 2))
            with pytest.raises(grpc.aio.AioRpcError) as ei:  # admission: deadline unmeetable
                await r.generate(gen(words(3000), 2, ttft_deadline_ms=1))
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            async with r.http.post(
                r.url + "/v1/completions",
                json={"prompt": words(3000, "h"), "max_tokens": 2},
                headers={"x-ttft-deadline-ms": "1"},
            ) as resp:
                assert resp.status == 429
            with pytest.raises(grpc.aio.AioRpcError) as ei:  # malformed: not demand
                await r.generate(gen("x", 2, slo_class="no-such-class"))
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT

            text = await metrics_text(r)
            after = counters(text)
            assert after[(ARRIVALS, (("model_name", MODEL), ("pool", POOL)))] == 4.0
            assert (
                after[(REFUSED, (("model_name", MODEL), ("pool", POOL), ("reason", "rejected")))]
                == 2.0
            )
            assert (
                after[(REFUSED, (("model_name", MODEL), ("pool", POOL), ("reason", "unavailable")))]
                == 0.0
            )
            assert (
                after[(REFUSED, (("model_name", MODEL), ("pool", POOL), ("reason", "deadline")))]
                == 0.0
            )

            clock.t += 20.0
            await source.scrape_routers()
            demand = source.snapshot(QUERY).demand
            assert demand is not None
            assert demand.window_s == 20.0
            assert demand.arrival_rate == pytest.approx(4 / 20)
            assert demand.refused_rate == pytest.approx(2 / 20)
            assert demand.by_reason == (("rejected", pytest.approx(2 / 20)),)
            assert demand.refused_fraction == pytest.approx(0.5)
            # the burst counter was read beside the arrivals it counts (its value depends
            # on which seconds the four arrivals fell in: the pure test below pins it)
            assert demand.arrival_dispersion is not None
            # another pool's series are not this pool's demand
            assert not parse_router(0.0, text, pool="other").counted
        finally:
            await source.close()


async def test_requests_refused_at_zero_replicas_wake_the_pool() -> None:
    """No worker; the router holds requests until its queue timeout and refuses them
    (unavailable). Once nothing is held any more, only the refusal counter says that
    demand arrived: it wakes the pool."""
    clock = Clock()
    async with router([], pool=POOL, queue_timeout_s=0.2) as r:
        source = DirectScrapeSource(
            lambda: [], routers=lambda: [r.url], pool=POOL, clock=clock, stale_after_s=1e9
        )
        try:
            await source.scrape_routers()
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await r.generate(gen(), timeout=10)
                assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
            text = await metrics_text(r)
            assert (
                counters(text)[
                    (REFUSED, (("model_name", MODEL), ("pool", POOL), ("reason", "unavailable")))
                ]
                == 3.0
            )
            clock.t += 30.0
            signals = await source.read(QUERY)
            assert source.held == 0.0  # nothing is held now
            assert not signals.stale
            assert signals.demand is not None
            assert signals.demand.refused_rate == pytest.approx(3 / 30)
            ctx = Context(
                now=clock.t,
                autoscaling=AutoscalingConfig(
                    objectives=QUERY.objectives,
                    window_s=60.0,
                    scale_up=ScaleRule(0.0, 15.0, 4),
                    scale_down=ScaleRule(300.0, 120.0, 1),
                    tolerance=0.1,
                    panic=PanicConfig(False, 2.0, 10.0),
                ),
                replicas=ReplicasConfig(min=0, max=4, warm_standby=0, desired=0),
                counts=ReplicaCounts(),
                signals=signals,
            )
            decision, _ = decide(ctx)
            assert (decision.wake, decision.direction, decision.active) == (
                True,
                Direction.UP,
                1,
            )
        finally:
            await source.close()


def test_the_burst_counter_closes_its_seconds_when_read() -> None:
    """``preheat_router_arrival_burst_total``: three arrivals in one second, one two seconds
    later; each read closes the seconds that ended (a rise of 3, a fall of 3, a rise of 1,
    and that one's fall once its second is over), for each pool's view apart."""
    clock = Clock()
    metrics = RouterMetrics(pool=POOL, clock=clock)
    other = metrics.for_pool("other", "m")
    burst = mn.ROUTER_ARRIVAL_BURST + "_total"

    def read() -> dict[str, float]:
        text = generate_latest(metrics.registry).decode()
        return {s.labels["pool"]: s.value for s in parse_samples(text, only=(burst,))}

    assert read() == {POOL: 0.0, "other": 0.0}  # the series exist from the start
    clock.t = 100.2
    for _ in range(3):
        metrics.observe_arrival()
    assert read()[POOL] == 0.0  # its second is still open
    clock.t = 102.5
    other.observe_arrival()
    metrics.observe_arrival()
    assert read() == {POOL: 18.0, "other": 0.0}
    clock.t = 104.0
    assert read() == {POOL: 20.0, "other": 2.0}
    metrics.forget_pool("other")
    assert read() == {POOL: 20.0}
