"""The router front ends' Prometheus metrics (``preheat_router_*``), in a registry of their own.

Every series of a pool is labelled ``pool`` and ``model_name``; a router of several pools
gives each its view (:meth:`RouterMetrics.for_pool`) over the same metrics.

Latencies are measured by the router from receipt, so they include routing and the network
hop to the worker. Predicted vs. observed: every proxied request observes the ratio of its
router-measured TTFT to the scheduler's prediction, and the absolute error; cache
predictions are checked by counting predicted cached blocks against the worker-reported
``usage.cached_tokens / block_size`` of the same requests.

Demand, for the autoscaler (whose other signals are the workers' histograms of what was
served): every valid request for the pool counts as an arrival when it has been prepared
(:meth:`RouterMetrics.observe_arrival`, ``preheat_router_arrivals_total{pool}``: at
receipt, so that a long stream is not counted only when it ends), and every request's
outcome is recorded once, in :meth:`RouterMetrics.observe_outcome`, where one turned away
unserved counts as refused
(``preheat_router_refused_total{pool,reason}``; reason ``rejected``: admission, 429 /
RESOURCE_EXHAUSTED; ``unavailable``: no endpoint in time, or every try failed before the
first token; ``deadline``: no first token within the request's deadline). The autoscaler
reads their rates over its window, arrivals less ``preheat_router_rate_limited_total`` (a
tenant's requests over its quota: no pool size would serve them).
"""

from __future__ import annotations

import copy
import enum
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from preheat.core import metric_names as mn
from preheat.core.errors import ErrorCode
from preheat.core.routing.plugins.queue import clock_trusted
from preheat.core.routing.types import StepClock
from preheat.core.traffic.arrivals import ArrivalBins


class RouterOutcome(enum.Enum):
    OK = "ok"
    INVALID = "invalid"  # malformed request (INVALID_ARGUMENT / 400)
    REJECTED = "rejected"  # admission: deadline cannot be met, queue full (429)
    UNAVAILABLE = "unavailable"  # no endpoint, or every try failed before the first token
    FAILED = "failed"  # the worker failed after tokens were sent
    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    RATE_LIMITED = "rate_limited"  # over its tenant's quota (429): not demand the pool refused
    ERROR = "error"

    @property
    def refused(self) -> str:
        """The refusal reason this outcome counts as ("": not refused)."""
        return _REFUSED.get(self, "")

    @classmethod
    def of_error(cls, code: ErrorCode) -> RouterOutcome:
        """The outcome a request refused or failed with ``code`` is counted as."""
        return _ERROR_OUTCOMES.get(code, cls.ERROR)


_ERROR_OUTCOMES = {
    ErrorCode.INVALID_ARGUMENT: RouterOutcome.INVALID,
    ErrorCode.RESOURCE_EXHAUSTED: RouterOutcome.REJECTED,
    ErrorCode.UNAVAILABLE: RouterOutcome.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: RouterOutcome.DEADLINE,
    ErrorCode.CANCELLED: RouterOutcome.CANCELLED,
}


# outcomes of requests that got no token: demand the pool did not serve. DEADLINE is
# always before the first token (a stream failing later is FAILED).
_REFUSED = {
    RouterOutcome.REJECTED: mn.REFUSED_REJECTED,
    RouterOutcome.UNAVAILABLE: mn.REFUSED_UNAVAILABLE,
    RouterOutcome.DEADLINE: mn.REFUSED_DEADLINE,
}


class RouterMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        pool: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        pm = [mn.LABEL_POOL, mn.LABEL_MODEL]  # every pool's series: its name and model
        pr = [*pm, mn.LABEL_REASON]
        self.requests = Counter(
            mn.ROUTER_REQUESTS,
            "Requests by front end and outcome",
            [mn.LABEL_API, mn.LABEL_OUTCOME],
            registry=r,
        )
        self.decisions = Counter(
            mn.ROUTER_DECISIONS, "Routing decisions by pool and reason", pr, registry=r
        )
        self.ttft = Histogram(
            mn.ROUTER_TTFT_SECONDS,
            "Receipt at the router to first token sent, seconds",
            pr,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            mn.ROUTER_ITL_SECONDS,
            "Time between output tokens as relayed, seconds",
            pr,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            mn.ROUTER_E2E_SECONDS,
            "Receipt at the router to last token, seconds",
            pr,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            mn.ROUTER_OVERHEAD_SECONDS,
            "Router stage: receipt to the upstream call (validate, tokenize, schedule), seconds",
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.predicted_ttft = Histogram(
            mn.ROUTER_PREDICTED_TTFT_SECONDS,
            "The scheduler's predicted TTFT of the chosen endpoint, seconds",
            pm,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft_ratio = Histogram(
            mn.ROUTER_TTFT_PREDICTION_RATIO,
            "Observed TTFT / predicted TTFT (1.0: exact)",
            pm,
            buckets=mn.PREDICTION_RATIO_BUCKETS,
            registry=r,
        )
        self.ttft_error = Histogram(
            mn.ROUTER_TTFT_PREDICTION_ERROR_SECONDS,
            "|observed TTFT - predicted TTFT|, seconds",
            pm,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.predicted_cached = Counter(
            mn.ROUTER_PREDICTED_CACHED_BLOCKS,
            "Prefix blocks predicted to hit the chosen endpoint's cache",
            pm,
            registry=r,
        )
        self.actual_cached = Counter(
            mn.ROUTER_ACTUAL_CACHED_BLOCKS,
            "Prefix blocks the worker reported cached (usage.cached_tokens / block_size)",
            pm,
            registry=r,
        )
        self.retries = Counter(
            mn.ROUTER_RETRIES,
            "Requests re-routed after a worker failed before the first token",
            pm,
            registry=r,
        )
        self.queue_depth = Gauge(
            mn.ROUTER_QUEUE_DEPTH, "Requests waiting for a routable endpoint", pm, registry=r
        )
        self.in_flight = Gauge(mn.ROUTER_IN_FLIGHT, "Proxied streams open", pm, registry=r)
        self.arrivals = Counter(
            mn.ROUTER_ARRIVALS,
            "Valid requests that arrived for the pool (served, held or refused)",
            pm,
            registry=r,
        )
        self.refused = Counter(
            mn.ROUTER_REFUSED,
            "Requests turned away unserved (rejected: admission; unavailable: no endpoint; "
            "deadline: no first token in time)",
            pr,
            registry=r,
        )
        self.class_requests = Counter(
            mn.ROUTER_CLASS_REQUESTS,
            "Requests by SLO class and outcome (slo_class '': the pool declares no classes)",
            [*pm, mn.LABEL_SLO_CLASS, mn.LABEL_OUTCOME],
            registry=r,
        )
        self.class_ttft = Histogram(
            mn.ROUTER_CLASS_TTFT_SECONDS,
            "Receipt at the router to first token sent, by SLO class, seconds",
            [*pm, mn.LABEL_SLO_CLASS],
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.degraded = Counter(
            mn.ROUTER_DEGRADED,
            "Requests the pool would have served too late or refused, by the step of their "
            "class's degradation ladder taken (clamp-output, queue, reject)",
            [*pm, mn.LABEL_SLO_CLASS, mn.LABEL_STEP],
            registry=r,
        )
        self.response_cache = Counter(
            mn.ROUTER_RESPONSE_CACHE,
            "Deterministic requests looked up in the pool's response cache, and answers "
            "stored (result: hit, miss, bypass, store)",
            [*pm, mn.LABEL_RESULT],
            registry=r,
        )
        self.rate_limited = Counter(
            mn.ROUTER_RATE_LIMITED,
            "Requests a tenant's quota refused (429), by the quota entry and the limit hit",
            [*pm, mn.LABEL_TENANT, mn.LABEL_LIMIT],
            registry=r,
        )
        # arrivals per second of each (pool, model), for preheat_router_arrival_burst_total
        # (shared by every view, read at scrape time: :class:`ArrivalBurstCollector`)
        self.bursts = ArrivalBurstCollector(clock)
        r.register(self.bursts)
        self.pool = ""
        self.model = ""
        self._bound: tuple[str, str] | None = None
        if pool is not None:
            self.bind_pool(pool)

    def bind_pool(self, pool: str, model: str = "") -> None:
        """The pool (and model) this view counts for: the labels of its series; the demand
        counters and gauges exist from the start (a rate over zeros is a zero, not a
        missing series)."""
        if self._bound is not None and self._bound != (pool, model):
            self._remove(*self._bound)
        self.pool, self.model = pool, model
        self._bound = (pool, model)
        self.arrivals.labels(pool, model)
        self.bursts.bins(pool, model)
        for reason in _REFUSED.values():
            self.refused.labels(pool, model, reason)
        self.queue_depth.labels(pool, model)
        self.in_flight.labels(pool, model)

    def for_pool(self, pool: str, model: str = "") -> RouterMetrics:
        """A view for one of several pools: the same registry and metrics, its own
        ``pool`` and ``model_name`` labels."""
        view = copy.copy(self)
        view._bound = None
        view.bind_pool(pool, model)
        return view

    def forget_pool(self, pool: str) -> None:
        """Removes every series of ``pool`` (a pool deleted from discovery)."""
        for family in self._families():
            for values in list(family._metrics):
                if values[0] == pool:
                    family.remove(*values)
        self.bursts.forget(lambda p, _: p == pool)

    def _remove(self, pool: str, model: str) -> None:
        for family in self._families():
            for values in list(family._metrics):
                if values[:2] == (pool, model):
                    family.remove(*values)
        self.bursts.forget(lambda p, m: (p, m) == (pool, model))

    def _families(self) -> tuple[Counter | Gauge | Histogram, ...]:
        """The families labelled by pool (first) and model (second)."""
        return (
            self.decisions,
            self.ttft,
            self.itl,
            self.e2e,
            self.predicted_ttft,
            self.ttft_ratio,
            self.ttft_error,
            self.predicted_cached,
            self.actual_cached,
            self.retries,
            self.arrivals,
            self.refused,
            self.queue_depth,
            self.in_flight,
            self.class_requests,
            self.class_ttft,
            self.rate_limited,
            self.degraded,
            self.response_cache,
        )

    @property
    def series(self) -> tuple[str, str]:
        """This view's (pool, model) label values."""
        return (self.pool, self.model)

    def observe_arrival(self) -> None:
        """A valid request for the pool arrived (once per request, before it is routed)."""
        self.arrivals.labels(self.pool, self.model).inc()
        self.bursts.observe(self.pool, self.model)

    def observe_outcome(
        self, api: str, outcome: RouterOutcome, *, reason: str = "", slo_class: str | None = None
    ) -> None:
        """Records one request's outcome (once per request); ``reason``: a finer refusal
        reason than the outcome's own (a bounded set); ``slo_class``: its class ("": none;
        None: not known yet, e.g. a malformed request: not counted by class)."""
        self.requests.labels(api, outcome.value).inc()
        if slo_class is not None:
            self.class_requests.labels(self.pool, self.model, slo_class, outcome.value).inc()
        refused = outcome.refused
        if refused:
            self.refused.labels(self.pool, self.model, reason or refused).inc()


class ArrivalBurstCollector(Collector):
    """``preheat_router_arrival_burst_total{pool, model_name}``: the sum, over the
    one-second bins of a pool's arrivals (those ``preheat_router_arrivals_total`` counts),
    of the squared difference of consecutive bins' counts (:mod:`preheat.core.traffic.arrivals`).
    Over a window, ``increase(burst) / (2 * increase(arrivals))`` is the arrivals' index of
    dispersion (1: Poisson; more: they come in bursts), which the autoscaler's capacity
    estimate sizes for. Bins are closed at scrape time (``clock``: monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._bins: dict[tuple[str, str], ArrivalBins] = {}

    def bins(self, pool: str, model: str) -> ArrivalBins:
        """The pool's bins (created on first use: the series exists from the start)."""
        got = self._bins.get((pool, model))
        if got is None:
            got = self._bins[(pool, model)] = ArrivalBins()
        return got

    def observe(self, pool: str, model: str) -> None:
        self.bins(pool, model).observe(self._clock())

    def forget(self, which: Callable[[str, str], bool]) -> None:
        for key in [k for k in self._bins if which(*k)]:
            del self._bins[key]

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            mn.ROUTER_ARRIVAL_BURST,
            "Sum over one-second bins of the squared change in arrivals from the bin before: "
            "increase(this) / (2 * increase(arrivals)) is the arrivals' index of dispersion",
            labels=[mn.LABEL_POOL, mn.LABEL_MODEL],
        )
        now = self._clock()
        for (pool, model), bins in sorted(self._bins.items()):
            family.add_metric([pool, model], bins.flush(now))
        yield family


#: each pool's (name, model, endpoint id -> its TTFT miss now, ms), for :class:`TtftMissCollector`
MissViews = Callable[[], Iterable[tuple[str, str, Mapping[str, float]]]]


class TtftMissCollector(Collector):
    """``preheat_router_ttft_miss_seconds``: how much later than this router predicted each
    endpoint's first tokens have lately come, as admission adds it to the endpoint's
    predicted TTFT against a target (``core/routing/calibration.py``: the EWMA of observed
    minus predicted TTFT, faded by its half-life since the last first token; 0 when they
    came on time or early). Read at scrape time; labels ``pool``, ``model_name``,
    ``endpoint``; an endpoint with no first token yet has none."""

    def __init__(self, views: MissViews) -> None:
        self._views = views

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            mn.ROUTER_TTFT_MISS_SECONDS,
            "How much later than predicted an endpoint's first tokens have lately come "
            "(what admission adds to its predicted TTFT), seconds",
            labels=[mn.LABEL_POOL, mn.LABEL_MODEL, mn.LABEL_ENDPOINT],
        )
        for pool, model, misses in self._views():
            for endpoint, ms in sorted(misses.items()):
                family.add_metric([pool, model, endpoint], ms / 1000.0)
        yield family


#: each pool's (name, model, endpoint id -> step clock), for :class:`StepClockCollector`
ClockViews = Callable[[], Iterable[tuple[str, str, Mapping[str, StepClock]]]]


class StepClockCollector(Collector):
    """Each endpoint's engine step clock as the router reads it from the tokens it streams
    (``core/routing/plugins/queue.py``), read at scrape time, so an endpoint's series go
    with it: ``preheat_router_step_clock_step_seconds`` (the step), ``..._error_seconds``
    (how far its predictions of a request's wait for the step in progress missed the waits
    the worker reported, on average; absent until one was checked) and ``..._trusted``
    (1 while that is at most a sixth of a step: the scheduler then predicts the wait from
    the clock's phase, where the pool's ``stepClock`` is on and the last token is at most
    two steps old; 0: it assumes half a step). Labels ``pool``, ``model_name``,
    ``endpoint``; an endpoint this router has streamed nothing from has none."""

    def __init__(self, views: ClockViews) -> None:
        self._views = views

    def collect(self) -> Iterator[Metric]:
        labels = [mn.LABEL_POOL, mn.LABEL_MODEL, mn.LABEL_ENDPOINT]
        step = GaugeMetricFamily(
            mn.ROUTER_STEP_CLOCK_STEP_SECONDS,
            "An endpoint's engine step as seen in the tokens streamed from it, seconds",
            labels=labels,
        )
        error = GaugeMetricFamily(
            mn.ROUTER_STEP_CLOCK_ERROR_SECONDS,
            "How far the step clock's predicted waits for the step in progress missed the "
            "waits the worker reported (moving average), seconds",
            labels=labels,
        )
        trusted = GaugeMetricFamily(
            mn.ROUTER_STEP_CLOCK_TRUSTED,
            "1 while the step clock's predictions miss by at most a sixth of a step (the "
            "scheduler uses its phase), else 0",
            labels=labels,
        )
        for pool, model, clocks in self._views():
            for endpoint, clock in sorted(clocks.items()):
                values = [pool, model, endpoint]
                step.add_metric(values, clock.step_ms / 1000.0)
                if clock.error_ms is not None:
                    error.add_metric(values, clock.error_ms / 1000.0)
                trusted.add_metric(values, 1.0 if clock_trusted(clock) else 0.0)
        yield step
        yield error
        yield trusted
