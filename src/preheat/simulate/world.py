"""The discrete-event simulator: a pool of simulated GPUs on a virtual clock, driven by the
unchanged policies of :mod:`preheat.core`.

One event heap orders everything by virtual time (ties by insertion order, so a run is
reproducible). Per pod a :class:`~preheat.engine.simcore.SimCore` batches, caches and costs
its requests; the simulator wakes it only when its batch changes (a prefill ends, a request
finishes, a decode stretch is re-costed), so a request costs a handful of events, not one
per token. What each part sees, and how stale it is, follows the live system:

- **routers**, one per client region: the engine gauges of every pod as of the last
  refresh (every ``refresh_interval_s``, like the live Status poll / scrape), their own
  in-flight counts and TTFT EWMA (updated at once, like the live data path), each pod's
  prefix cache through a live view (the live ``WatchCache`` stream is near real time), and
  the RTT to each pod. They call ``preheat.core.routing.scheduler.schedule`` (or
  ``SimOptions.route``) on a ``RoutingContext`` built exactly like the live dispatcher's,
  after the live admission (``preheat.core.routing.admission``): the default TTFT target
  (``SimOptions.default_ttft_target_ms``; the SLO, as ``preheat up`` sets the router's from
  the pool's objective) and the adaptive bound on requests in flight.
- **the autoscaler**: every ``autoscale_interval_s`` it scrapes the warm pods' cumulative
  vLLM histograms and gauges into :class:`~preheat.autoscaler.scrape.Scrape` values and
  computes the signals with the live ``preheat up`` code (``autoscaler.scrape.compute``:
  windowed bucket deltas, ``histogram_quantile``), then calls
  ``preheat.core.autoscaling.decide`` (or ``SimOptions.autoscale``). The routers' demand
  counters (valid arrivals at receipt, refusals by reason at the outcome, as the live router
  counts them) are scraped on the same tick and read with the live
  ``autoscaler.scrape.router_demand``: what the routers refuse is demand to the policy.
- **the operator**: each decision, and each pod that gets warm, is one turn of
  ``preheat.core.control.step`` (``assign_roles``: standby promoted first, victims chosen
  by deletion cost), starting pods that go through image pull, load and warm-up before
  they are warm standbys.

Every request ends as exactly one :class:`~preheat.report.record.RequestOutcome`: ``ok``,
``rejected`` (admission, or the engine queue full on every try) or ``error`` (invalid, no
endpoint within the router's queue timeout).
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import cast

from preheat.api.engine_args import sim_options as sim_engine_options
from preheat.autoscaler.scrape import RouterScrape, Scrape, Served, compute, router_demand
from preheat.autoscaler.source import wake_signals, wakes
from preheat.core import autoscaling as core_autoscaling
from preheat.core.autoscaling import PolicyState, ReplicaCounts, Signals
from preheat.core.autoscaling.forecast import accuracy as forecast_accuracy
from preheat.core.autoscaling.forecast import learn
from preheat.core.autoscaling.standby import wanted
from preheat.core.control import ControlState, Observation, signal_query, step, tally
from preheat.core.control.roles import ROLE_ACTIVE, ROLE_DRAINING, ROLE_STANDBY, PodView, RolePlan
from preheat.core.metric_names import (
    INTER_TOKEN_LATENCY_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
)
from preheat.core.pool import PoolConfig, Signal
from preheat.core.routing import admission, calibration
from preheat.core.routing import scheduler as core_scheduler
from preheat.core.routing.admission import AdmissionConfig, AdmissionInput, LimitState
from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.history import PrefixHistory
from preheat.core.routing.plugins.prefix import new_tokens
from preheat.core.routing.types import Endpoint, RequestInfo, RoutingContext, StepClock
from preheat.core.traffic import ladder, lanes
from preheat.core.traffic.arrivals import ArrivalBins
from preheat.core.traffic.classes import PRIORITY_STANDARD, TrafficClass, UnknownClass
from preheat.engine.base import EngineRequest, Sampling
from preheat.engine.costmodel import CostModel
from preheat.engine.sim import SimConfig
from preheat.engine.simcore import Emissions, SimCore
from preheat.report.record import ReplicaSample, RequestOutcome, Run, RunMeta, ScaleEvent
from preheat.simulate.options import SimInputError, SimOptions, client_region_of
from preheat.simulate.prompts import BlockNamer
from preheat.workload.traces import TraceRequest

__all__ = ["SimStats", "engine_config", "simulate"]

# event kinds (the heap orders by (time, sequence); the kind only says what to do)
_ARRIVE, _DELIVER, _WAKE, _REFRESH, _SCALE, _READY, _PROMOTED, _SAMPLE, _TIMEOUT = range(9)

_HIST_BOUNDS: dict[Signal, tuple[float, ...]] = {
    Signal.TTFT: TIME_TO_FIRST_TOKEN_BUCKETS,
    Signal.ITL: INTER_TOKEN_LATENCY_BUCKETS,
    Signal.E2E: REQUEST_LATENCY_BUCKETS,
}


@dataclass(eq=False)
class _Req:
    trace: TraceRequest
    rid: str
    region: str
    hashes: tuple[int, ...] = ()
    info: RequestInfo | None = None
    tried: set[str] = field(default_factory=set)
    attempts: int = 0
    pod: _Pod | None = None
    router_rtt_ms: float = 0.0
    sent_at: float = 0.0  # routed (router -> pod)
    predicted_ms: float = 0.0  # the router's predicted TTFT on ``pod`` when it sent it
    engine_at: float = 0.0  # reached the engine
    first_at: float | None = None  # first token at the engine
    last_at: float | None = None
    itl: list[list[float]] = field(default_factory=list)  # [ms, count] runs
    held_since: float | None = None  # waiting at the router for an endpoint
    lane: lanes.Held | None = None  # its place in the router's wait queue while held
    done: bool = False
    # its traffic class (the trace's ``slo_class``, else the pool's default; "" none) and
    # the engine priority it runs at (the class's; standard without one)
    klass: str = ""
    priority: int = PRIORITY_STANDARD
    new_tokens: int = 0  # its prompt tokens not predicted cached on the pod it was sent to
    admitted: bool = False  # counted in its router's ``admitted`` until it ends
    # its class's ladder step once the pool would have refused it ("": not degraded); a
    # degraded request is served without its target (core.traffic.ladder, as live)
    degraded: str = ""
    max_tokens: int = 0  # what it asks for (its trace's output, or the ladder's clamp)


class _Hist:
    """A pod's cumulative vLLM histogram (counts per bucket, +Inf last)."""

    __slots__ = ("bounds", "counts")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)

    def add(self, value: float, n: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n

    def cumulative(self) -> tuple[tuple[float, float], ...]:
        out: list[tuple[float, float]] = []
        acc = 0.0
        for le, c in zip((*self.bounds, math.inf), self.counts, strict=True):
            acc += c
            out.append((le, acc))
        return tuple(out)


@dataclass(eq=False)
class _Pod:
    name: str
    index: int
    zone: str
    region: str
    created: float
    core: SimCore | None = None
    state: str = "starting"  # starting | standby | promoting | active | draining | stopped
    warm: bool = False
    ready_after: float | None = None  # its cold start (None: warm from t=0)
    reqs: dict[str, _Req] = field(default_factory=dict)
    wake_token: int = 0
    wake_at: float | None = None
    stopped_at: float | None = None
    # the router's view of its engine gauges
    m_running: int = 0
    m_waiting: int = 0
    m_kv: float = 0.0
    m_at: float | None = None
    m_waiting_by: tuple[tuple[int, int], ...] | None = None  # by priority (priority policy)
    cache: frozenset[int] | None = None
    hists: dict[Signal, _Hist] = field(default_factory=dict)
    scrapes: deque[Scrape] = field(default_factory=deque)
    # the engine's request counters (vllm:request_success, prompt_tokens,
    # prefix_cache_hits, generation_tokens), cumulative
    served: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])

    @property
    def role(self) -> str:
        if self.state in ("active", "promoting"):
            return ROLE_ACTIVE
        if self.state == "draining":
            return ROLE_DRAINING
        return ROLE_STANDBY


@dataclass(eq=False)
class _Router:
    region: str
    in_flight: dict[str, int] = field(default_factory=dict)
    # pod -> priority -> in flight at it (the queue term's "behind us", as the live store)
    in_flight_by: dict[str, dict[int, int]] = field(default_factory=dict)
    # pod -> uncached prompt tokens of its in-flight requests (``Endpoint.in_flight_tokens``)
    in_flight_tokens: dict[str, int] = field(default_factory=dict)
    decoding: dict[str, int] = field(default_factory=dict)  # past the first token, not done
    ttft_ewma: dict[str, float] = field(default_factory=dict)
    # pod -> (EWMA of its first tokens' observed minus predicted TTFT, when it last changed)
    ttft_error: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    snapshot: tuple[Endpoint, ...] | None = None  # None: rebuild (the routable set changed)
    positions: dict[str, int] = field(default_factory=dict)  # pod -> index in snapshot
    changed: set[str] = field(default_factory=set)  # pods whose entry must be rebuilt
    state: SchedulerState = field(default_factory=SchedulerState)
    history: PrefixHistory | None = None
    # the wait queue (no routable endpoint), by key; it leaves in the live router's
    # order (core.traffic.lanes: class priority, tenants' turns, deadline, arrival)
    held: dict[int, _Req] = field(default_factory=dict)
    held_seq: int = 0
    # admission (core.routing.admission): the adaptive bound on requests in flight, and the
    # requests it admitted that have not ended (the live Dispatcher's ``_in_flight``)
    limit: LimitState = field(default_factory=lambda: LimitState(0.0))
    admitted: int = 0


@dataclass
class SimStats:
    """How much work the run took (for the scale benchmark)."""

    requests: int = 0
    events: int = 0
    schedule_calls: int = 0
    decide_calls: int = 0
    pods_started: int = 0
    peak_pods: int = 0
    wall_s: float = 0.0
    virtual_s: float = 0.0
    gpu_seconds: float = 0.0


def engine_config(pool: PoolConfig, options: SimOptions) -> SimConfig:
    """The simulated replica: the pool's engine args where they apply, then
    ``options.engine_options`` (any ``SimConfig.from_options`` key)."""
    args = dict(pool.engine.args)
    opts: dict[str, object] = {}
    for spec_key, key in (
        ("maxNumSeqs", "max_num_seqs"),
        ("maxModelLen", "max_model_len"),
        ("blockSize", "block_size"),
        ("numGpuBlocks", "num_gpu_blocks"),
        ("timeScale", "time_scale"),
        ("seed", "seed"),
    ):
        if spec_key in args:
            opts[key] = args[spec_key]
    opts.update(sim_engine_options(args))  # the vLLM args the sim models, and modelSize
    opts.setdefault("seed", options.seed)
    if pool.traffic.classes:
        # the pool's classes carry priorities: its workers schedule by them, as the live
        # pool's do (core.manifests.worker_args; a vLLM engine always does)
        opts["scheduling_policy"] = "priority"
    opts.update(options.engine_options)
    return SimConfig.from_options(opts)


class _World:
    def __init__(self, pool: PoolConfig, trace: Sequence[TraceRequest], options: SimOptions):
        self.pool = pool
        self.trace = trace
        self.options = options
        self.engine = engine_config(pool, options)
        self.cost: CostModel = self.engine.cost
        self.core_config = self.engine.core_config()
        self.by_priority = self.core_config.scheduling_policy == "priority"
        self.block_size = self.engine.block_size
        self.namer = BlockNamer(self.block_size)
        self.gpus = max(1, pool.resources.gpus)
        self.stats = SimStats(requests=len(trace))
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.pods: dict[str, _Pod] = {}
        self.pod_order: list[_Pod] = []
        self.next_pod = 0
        self.outcomes: list[RequestOutcome | None] = [None] * len(trace)
        self.remaining = len(trace)
        self.events: list[ScaleEvent] = []
        self.samples: list[ReplicaSample] = []
        self.desired = pool.replicas.desired
        self.control = ControlState(policy=_policy_start(pool, options))
        # each evaluation's forecast error (the forecast runs with predictive off too)
        self.forecast_errors: list[float] = []
        # each evaluation's shortfall read (autoscaling.predictive.headroom set)
        self.forecast_shortfalls: list[float] = []
        # the last evaluation's forecast horizon and what set it ("": the configuration)
        self.forecast_horizon: tuple[float, str] | None = None
        zones = pool.topology.zones or ("zone-a",)
        self.zones = tuple(zones)
        default_region = options.network.region_of(self.zones[0])
        self.client_regions = options.client_regions or ((default_region, 1.0),)
        self.routers: dict[str, _Router] = {}
        for region, _ in self.client_regions:
            r = _Router(region)
            if not options.watch_cache:
                r.history = PrefixHistory(ttl_s=options.history_ttl_s)
            self.routers[region] = r
        routing = options.routing or SchedulerConfig(
            hotspot_margin_ms=pool.routing.hotspot_margin_ms
        )
        self.routing = replace(routing, pool=routing.pool or pool.name)
        self.objective_ms = options.ttft_objective_ms or next(
            (o.target for o in pool.autoscaling.objectives if o.signal is Signal.TTFT), 0.0
        )
        target = options.default_ttft_target_ms
        if target is None:  # as preheat up and the Kubernetes discovery configure the router
            target = self.objective_ms or AdmissionConfig().default_ttft_target_ms
        self.admission = AdmissionConfig(
            default_ttft_target_ms=target, max_in_flight=options.max_in_flight
        )
        for r in self.routers.values():
            r.limit = admission.initial_state(self.admission)
        auto = pool.autoscaling
        self.query = signal_query(auto)
        self.scrapes_kept = int(auto.window_s / options.autoscale_interval_s) + 3
        # the routers' demand counters (preheat_router_arrivals / _refused), summed
        self.arrivals = 0
        self.arrival_bins = ArrivalBins()  # preheat_router_arrival_burst
        self.refused: dict[str, int] = {}
        self.router_scrapes: deque[RouterScrape] = deque(maxlen=self.scrapes_kept)
        # how long unchanged figures may keep their stamp (see _refresh_pod)
        self.fresh_for_s = self.routing.staleness_s - options.refresh_interval_s

    # --- heap -----------------------------------------------------------------------------
    def push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))

    # --- pods -----------------------------------------------------------------------------
    def _zone_for_new_pod(self) -> str:
        live = [p for p in self.pod_order if p.state != "stopped"]
        counts = {z: 0 for z in self.zones}
        for p in live:
            if p.zone in counts:
                counts[p.zone] += 1
        return min(self.zones, key=lambda z: (counts[z], self.zones.index(z)))

    def start_pod(self, warm: bool, reason: str) -> _Pod:
        zone = self._zone_for_new_pod()
        name = f"{self.pool.name}-{self.next_pod}"
        pod = _Pod(name, self.next_pod, zone, self.options.network.region_of(zone), self.now)
        self.next_pod += 1
        self.pods[name] = pod
        self.pod_order.append(pod)
        self.stats.pods_started += 1
        live = sum(1 for p in self.pod_order if p.state != "stopped")
        self.stats.peak_pods = max(self.stats.peak_pods, live)
        pod.hists = {s: _Hist(b) for s, b in _HIST_BOUNDS.items()}
        if warm:
            self._make_warm(pod)
        else:
            su = self.options.startup
            load = su.load_s if su.load_s is not None else self._cost_load()
            warmup = su.warmup_s if su.warmup_s is not None else self.cost.warming_s()
            self.push(self.now + su.image_pull_s + load + warmup, _READY, pod)
            self.events.append(ScaleEvent(self.now, "start", reason, self.pool.name, name))
        return pod

    def _cost_load(self) -> float:
        cost = replace(self.cost, page_cache=self.options.startup.page_cache)
        return cost.loading_s()

    def _make_warm(self, pod: _Pod) -> None:
        pod.core = SimCore(self.core_config, self.cost)
        # the router's WatchCache view of the pod's prefix cache: a live view of the engine's
        # cache index (membership is all the scheduler asks of it), not a copy per refresh
        pod.cache = cast(frozenset[int], pod.core.cached_view())
        pod.warm = True
        pod.state = "standby"

    def set_active(self, pod: _Pod) -> None:
        pod.state = "active"
        self._refresh_pod(pod, force=True)
        self._routable_changed()

    def stop_serving(self, pod: _Pod, state: str) -> None:
        was = pod.state in ("active",)
        pod.state = state
        if was:
            self._routable_changed()
        if state == "draining":
            self._maybe_stopped(pod)

    def _maybe_stopped(self, pod: _Pod) -> None:
        if pod.state == "draining" and not pod.reqs:
            pod.state = "stopped"
            pod.stopped_at = self.now
            pod.core = None
            pod.cache = None
            self.events.append(ScaleEvent(self.now, "stop", "drained", self.pool.name, pod.name))
            for r in self.routers.values():
                r.in_flight.pop(pod.name, None)
                r.in_flight_by.pop(pod.name, None)
                r.in_flight_tokens.pop(pod.name, None)
                r.decoding.pop(pod.name, None)
                r.ttft_ewma.pop(pod.name, None)
                if r.history is not None:
                    r.history.forget(pod.name)

    def _routable_changed(self) -> None:
        for r in self.routers.values():
            r.snapshot = None
            r.endpoints = {k: v for k, v in r.endpoints.items() if self.pods[k].state == "active"}
        self._flush_held()

    # --- router view ----------------------------------------------------------------------
    def _refresh_pod(self, pod: _Pod, force: bool = False) -> None:
        core = pod.core
        if core is None:
            return
        if core.has_work():
            self._process(pod, core.advance(self.now))
            self._reschedule(pod)
        running, waiting, kv = core.num_running, core.num_waiting, core.kv_cache_usage
        # per-priority waiting counts, as the live sim worker reports them in its Status;
        # only a pool whose engines schedule by priority needs them (else all are equal)
        by = tuple(sorted(core.waiting_by_priority().items())) if self.by_priority else None
        # metrics_at only matters against the scheduler's staleness bound (is_stale): an
        # idle pod's unchanged figures are re-stamped only when, by the next refresh, they
        # could otherwise look stale; the scheduler decides exactly as with 1 s stamps.
        if (
            force
            or running != pod.m_running
            or waiting != pod.m_waiting
            or kv != pod.m_kv
            or by != pod.m_waiting_by
            or pod.m_at is None
            or self.now - pod.m_at > self.fresh_for_s
        ):
            pod.m_running, pod.m_waiting, pod.m_kv, pod.m_at = running, waiting, kv, self.now
            pod.m_waiting_by = by
            for r in self.routers.values():
                self._touch(r, pod.name)

    def _endpoint(self, router: _Router, pod: _Pod) -> Endpoint:
        ep = router.endpoints.get(pod.name)
        if ep is None:
            ep = Endpoint(
                id=pod.name,
                address=pod.name,
                pool=self.pool.name,
                zone=pod.zone,
                region=pod.region,
                num_running=pod.m_running,
                num_waiting=pod.m_waiting,
                kv_cache_usage=pod.m_kv,
                max_num_seqs=self.engine.max_num_seqs,
                block_size=self.block_size,
                in_flight=router.in_flight.get(pod.name, 0),
                in_flight_by_priority=tuple(sorted(router.in_flight_by.get(pod.name, {}).items())),
                in_flight_tokens=router.in_flight_tokens.get(pod.name, 0),
                waiting_by_priority=pod.m_waiting_by,
                decoding=router.decoding.get(pod.name, 0),
                rtt_ms=self.options.network.rtt_ms(router.region, pod.region),
                metrics_at=pod.m_at,
                cached_blocks=pod.cache if self.options.watch_cache else None,
                observed_ttft_ms=router.ttft_ewma.get(pod.name),
                ttft_error_ms=err[0] if (err := router.ttft_error.get(pod.name)) else None,
                ttft_error_at=err[1] if err else None,
            )
            router.endpoints[pod.name] = ep
        return ep

    def _snapshot(self, router: _Router) -> tuple[Endpoint, ...]:
        snap = router.snapshot
        if snap is None:
            pods = [p for p in self.pod_order if p.state == "active"]
            snap = tuple(self._endpoint(router, p) for p in pods)
            router.positions = {p.name: i for i, p in enumerate(pods)}
            router.changed.clear()
            router.snapshot = snap
        elif router.changed:
            entries = list(snap)
            for name in router.changed:
                i = router.positions.get(name)
                if i is not None:
                    entries[i] = self._endpoint(router, self.pods[name])
            router.changed.clear()
            snap = router.snapshot = tuple(entries)
        return snap

    def _touch(self, router: _Router, pod_name: str) -> None:
        if router.endpoints.pop(pod_name, None) is not None:
            router.changed.add(pod_name)

    # --- requests -------------------------------------------------------------------------
    def _finish(self, req: _Req, outcome: RequestOutcome) -> None:
        if req.done:
            return
        req.done = True
        if req.admitted:
            req.admitted = False
            router = self.routers[req.region]
            router.admitted -= 1
        outcome.slo_class = req.klass
        self.outcomes[req.trace.index] = outcome
        self.remaining -= 1
        # the router's refusal counter, as RouterMetrics.observe_outcome counts it
        reason = _refusal_reason(outcome)
        if reason:
            self.refused[reason] = self.refused.get(reason, 0) + 1

    def _fail(self, req: _Req, kind: str, error: str) -> None:
        t = req.trace
        self._finish(
            req,
            RequestOutcome(
                request_id=req.rid,
                t_s=t.arrival_s,
                outcome=kind,  # type: ignore[arg-type]
                prompt_tokens=t.input_tokens,
                session_id=t.session_id,
                region=req.region,
                error=error,
            ),
        )

    def arrive(self, req: _Req) -> None:
        t = req.trace
        limit = self.engine.max_model_len
        if t.input_tokens + t.output_tokens > limit:
            self._fail(
                req,
                "error",
                f"INVALID_ARGUMENT: prompt ({t.input_tokens} tokens) + max_tokens "
                f"({t.output_tokens}) exceeds the model's context length {limit}",
            )
            return
        try:
            klass = self.pool.traffic.resolve(t.slo_class)
        except UnknownClass as e:  # the live router answers 400
            req.klass = t.slo_class
            self._fail(req, "error", f"INVALID_ARGUMENT: {e}")
            return
        req.max_tokens = t.output_tokens
        if klass is not None:
            req.klass, req.priority = klass.name, klass.priority
        # the TTFT it is admitted against, as the live Dispatcher.prepare sets it: its
        # deadline, else its class's, else the pool's default target
        deadline = self.options.ttft_deadline_ms
        class_ms = klass.ttft_ms if klass is not None and deadline is None else None
        target = admission.ttft_target_ms(deadline, class_ms, self.admission)
        self.arrivals += 1  # a valid request: the router's arrival counter (at receipt)
        self.arrival_bins.observe(self.now)
        req.hashes = self.namer.names(t)
        req.info = RequestInfo(
            request_id=req.rid,
            prompt_tokens=t.input_tokens,
            block_hashes=req.hashes,
            block_size=self.block_size,
            max_tokens=t.output_tokens,
            session_id=t.session_id,
            client_region=req.region,
            ttft_deadline_ms=target,
            deadline_is_default=deadline is None and class_ms is None and target is not None,
            priority=req.priority,
        )
        router = self.routers[req.region]
        verdict = admission.admit(
            AdmissionInput(
                now=self.now,
                in_flight=router.admitted,
                endpoints=self._snapshot(router),
                completions_per_s=0.0,  # only its retry-after reads it
                pool=self.pool.name,
            ),
            router.limit,
            self.admission,
        )
        if not verdict.admitted and not self._degrade(req, klass):
            self._fail(req, "rejected", f"RESOURCE_EXHAUSTED: rejected: {verdict.explanation}")
            return
        router.admitted += 1
        req.admitted = True
        self.route(req)

    def route(self, req: _Req) -> None:
        router = self.routers[req.region]
        endpoints = self._snapshot(router)
        if req.tried:
            endpoints = tuple(e for e in endpoints if e.id not in req.tried)
            if not endpoints:
                self._fail(req, "rejected", "RESOURCE_EXHAUSTED: every endpoint tried was full")
                return
        if not endpoints:
            if len(router.held) >= self.options.max_queue:
                self._fail(req, "rejected", "RESOURCE_EXHAUSTED: router queue full")
                return
            self._hold(router, req)
            return
        assert req.info is not None
        history = router.history
        ctx = RoutingContext(
            now=self.now,
            request=req.info,
            endpoints=endpoints,
            history_matches=history.match(req.hashes, self.now) if history is not None else {},
            region_rtt_ms={},
            step_clocks=self._step_clocks(router, endpoints),
        )
        route = self.options.route if self.options.route is not None else core_scheduler.schedule
        decision, router.state = route(ctx, self.routing, self.cost, router.state)
        self.stats.schedule_calls += 1
        if (
            decision.reason == "rejected"
            and req.klass
            and (req.degraded or self._degrade(req, self.pool.traffic.get(req.klass)))
        ):  # served despite the prediction: the best endpoint, without the target
            relaxed = replace(ctx, request=replace(req.info, ttft_deadline_ms=None))
            decision, router.state = route(relaxed, self.routing, self.cost, router.state)
            self.stats.schedule_calls += 1
        ep = decision.endpoint
        if ep is None:
            if decision.reason == "rejected":
                self._fail(req, "rejected", f"RESOURCE_EXHAUSTED: rejected: {decision.explanation}")
            else:
                self._fail(req, "error", f"UNAVAILABLE: {decision.explanation}")
            return
        pod = self.pods[ep.id]
        if history is not None:
            history.record(pod.name, req.hashes, self.now)
        req.attempts += 1
        req.pod = pod
        req.new_tokens = new_tokens(req.info, decision.cached_blocks)
        self._count_in_flight(router, pod, req, 1)
        rtt = self.options.network.rtt_ms(router.region, pod.region)
        req.router_rtt_ms = rtt
        req.sent_at = self.now
        req.predicted_ms = decision.predicted_ttft_ms
        self.push(
            self.now + (self.options.network.router_overhead_ms + rtt / 2) / 1000.0, _DELIVER, req
        )

    def _step_clocks(
        self, router: _Router, endpoints: tuple[Endpoint, ...]
    ) -> dict[str, StepClock]:
        """The router's step clocks (``RoutingContext.step_clocks``): for each endpoint it
        streams from, the engine's step boundaries as its tokens reach the router (each
        ``rtt / 2`` after the engine's step ends) and the lag the live router measures (its
        TTFT less the engine's: the router's overhead and one RTT)."""
        if not self.routing.step_clock:
            return {}
        out: dict[str, StepClock] = {}
        net = self.options.network
        for e in endpoints:
            if e.decoding <= 0:
                continue
            core = self.pods[e.id].core
            if core is None:
                continue
            rtt = net.rtt_ms(router.region, e.region)
            rhythm = core.step_rhythm(self.now - rtt / 2000.0)
            if rhythm is not None:
                end, dt = rhythm
                out[e.id] = StepClock(end + rtt / 2000.0, dt * 1000.0, net.router_overhead_ms + rtt)
        return out

    def deliver(self, req: _Req) -> None:
        pod = req.pod
        assert pod is not None
        router = self.routers[req.region]
        core = pod.core
        if pod.state != "active" or core is None:
            # the worker refuses (draining/demoted: UNAVAILABLE): the router retries
            self._undo_in_flight(router, pod, req)
            self._retry(req, pod, "UNAVAILABLE: worker not active")
            return
        if core.num_waiting >= self.engine.waiting_limit:
            self._undo_in_flight(router, pod, req)
            self._retry(req, pod, "RESOURCE_EXHAUSTED: engine queue full")
            return
        t = req.trace
        request = EngineRequest(
            req.rid,
            (0,) * t.input_tokens,
            Sampling(max_tokens=req.max_tokens, ignore_eos=True),
            priority=req.priority,
        )
        req.engine_at = self.now
        pod.reqs[req.rid] = req
        self._process(pod, core.add(request, self.now, req.hashes))
        self._reschedule(pod)

    def _degrade(self, req: _Req, klass: TrafficClass | None) -> bool:
        """Whether ``req``, which its pool would refuse, is served anyway by its class's
        ladder (``core.traffic.ladder``: a clamp of its output, or a class that is not
        sheddable queues), as the live ``Dispatcher._degrade``; the fallback-pool step is
        not simulated (one pool)."""
        step = ladder.step_for(klass)
        if klass is None or step in (ladder.REJECT, ladder.FALLBACK):
            return False
        if step == ladder.CLAMP:
            req.max_tokens = ladder.clamp(req.max_tokens, klass)
        req.degraded = step
        return True

    def _count_in_flight(self, router: _Router, pod: _Pod, req: _Req, n: int) -> None:
        """``req`` (``n`` = 1) is now, or (-1) is no longer, one of the router's requests on
        ``pod`` without a first token (the live ``EndpointStore.request_started`` /
        ``first_token``)."""
        router.in_flight[pod.name] = max(0, router.in_flight.get(pod.name, 0) + n)
        tokens = router.in_flight_tokens.get(pod.name, 0) + n * req.new_tokens
        router.in_flight_tokens[pod.name] = max(0, tokens)
        by = router.in_flight_by.setdefault(pod.name, {})
        left = by.get(req.priority, 0) + n
        if left > 0:
            by[req.priority] = left
        else:
            by.pop(req.priority, None)
        self._touch(router, pod.name)

    def _undo_in_flight(self, router: _Router, pod: _Pod, req: _Req) -> None:
        self._count_in_flight(router, pod, req, -1)

    def _retry(self, req: _Req, pod: _Pod, why: str) -> None:
        req.tried.add(pod.name)
        if req.attempts > self.options.max_retries:
            kind = "rejected" if why.startswith("RESOURCE_EXHAUSTED") else "error"
            self._fail(req, kind, why)
            return
        self.route(req)

    def _hold(self, router: _Router, req: _Req) -> None:
        """Holds ``req`` in the router's wait queue until an endpoint is routable (or its
        queue timeout), as the live router's ``Dispatcher._wait_routable`` does. The trace
        names no tenant: every request queues as the anonymous one."""
        klass = self.pool.traffic.get(req.klass) if req.klass else None
        target = self.options.ttft_deadline_ms  # sent with the request: it wins, as live
        if target is None and klass is not None:
            target = klass.ttft_ms
        router.held_seq += 1
        req.lane = lanes.Held(
            key=router.held_seq,
            priority=req.priority,
            deadline=lanes.deadline_of(req.trace.arrival_s, target),
            arrival=self.now,
            klass=req.klass,
        )
        req.held_since = self.now
        router.held[req.lane.key] = req
        self.push(self.now + self.options.queue_timeout_s, _TIMEOUT, req)

    def _flush_held(self) -> None:
        """Routes every held request of a router that has a routable endpoint again, in
        the live router's order (``lanes.serve_order``: class priority first, never FIFO
        across classes). The whole queue leaves at once, so fair queuing's turns start
        afresh each time (``lanes.NO_TURNS``), as the live router's do once its queue
        empties."""
        for router in self.routers.values():
            if not router.held or not self._snapshot(router):
                continue
            held, router.held = router.held, {}
            lanes_of = [r.lane for r in held.values() if r.lane is not None]
            for h in lanes.serve_order(lanes_of, lanes.NO_TURNS):
                req = held[h.key]
                req.lane = None
                if not req.done:
                    req.held_since = None
                    self.route(req)

    def timeout(self, req: _Req) -> None:
        if req.done or req.held_since is None:
            return
        router = self.routers[req.region]
        if req.lane is not None:
            router.held.pop(req.lane.key, None)
            req.lane = None
        self._fail(
            req,
            "error",
            f"UNAVAILABLE: no routable endpoint within {self.options.queue_timeout_s:g}s",
        )

    # --- engines --------------------------------------------------------------------------
    def _reschedule(self, pod: _Pod) -> None:
        core = pod.core
        if core is None:
            return
        t = core.next_event_time()
        if t is None:
            pod.wake_at = None
            return
        if t != pod.wake_at:
            pod.wake_at = t
            pod.wake_token += 1
            self.push(t, _WAKE, (pod, pod.wake_token))

    def wake(self, pod: _Pod, token: int) -> None:
        if token != pod.wake_token or pod.core is None:
            return
        pod.wake_at = None
        self._process(pod, pod.core.advance(self.now))
        self._reschedule(pod)

    def _process(self, pod: _Pod, em: Emissions) -> None:
        if not em.runs and not em.finishes:
            return
        record_itl = self.options.record_itl
        itl_hist = pod.hists[Signal.ITL]
        add, reqs = itl_hist.add, pod.reqs
        for run in em.runs:  # the hot loop: one run per scheduled request per commit
            req = reqs.get(run.request_id)
            if req is None:
                continue
            n = len(run.token_ids)
            t_first, dt = run.t_first, run.dt
            if run.first_index == 0:
                self._first_token(pod, req, t_first)
            elif req.last_at is not None:
                gap = t_first - req.last_at
                add(gap)
                if record_itl:
                    _rle(req.itl, gap * 1000.0, 1)
            if n > 1:
                add(dt, n - 1)
                if record_itl:
                    _rle(req.itl, dt * 1000.0, n - 1)
            req.last_at = t_first + (n - 1) * dt
        for fin in em.finishes:
            req = pod.reqs.pop(fin.request_id, None)
            if req is None:
                continue
            pod.hists[Signal.E2E].add(fin.time - req.engine_at)
            u = fin.usage
            for i, x in enumerate((1, u.prompt_tokens, u.cached_tokens, u.completion_tokens)):
                pod.served[i] += x
            if req.first_at is not None:
                router = self.routers[req.region]
                router.decoding[pod.name] = max(0, router.decoding.get(pod.name, 0) - 1)
                self._touch(router, pod.name)
            half = req.router_rtt_ms / 2000.0
            first = req.first_at if req.first_at is not None else fin.time
            t0 = req.trace.arrival_s
            rtt = req.router_rtt_ms
            overhead = self.options.network.router_overhead_ms
            self._finish(
                req,
                RequestOutcome(
                    request_id=req.rid,
                    t_s=t0,
                    outcome="ok",
                    ttft_ms=(first + half - t0) * 1000.0,
                    e2e_ms=(fin.time + half - t0) * 1000.0,
                    itl_ms=[],
                    itl_runs_ms=req.itl,
                    prompt_tokens=fin.usage.prompt_tokens,
                    cached_tokens=fin.usage.cached_tokens,
                    output_tokens=fin.usage.completion_tokens,
                    session_id=req.trace.session_id,
                    endpoint=pod.name,
                    region=req.region,
                    stages_ms={
                        "route": overhead,
                        "network": rtt,
                        "queue": fin.timing.queue_s * 1000.0,
                        "prefill": fin.timing.prefill_s * 1000.0,
                        "decode": fin.timing.decode_s * 1000.0,
                    },
                ),
            )
        if em.finishes and pod.state == "draining":
            self._maybe_stopped(pod)

    def _first_token(self, pod: _Pod, req: _Req, t: float) -> None:
        req.first_at = t
        pod.hists[Signal.TTFT].add(t - req.engine_at)
        router = self.routers[req.region]
        self._count_in_flight(router, pod, req, -1)
        router.decoding[pod.name] = router.decoding.get(pod.name, 0) + 1
        # the router's upstream TTFT: sent -> first token back (live: EWMA, alpha 0.2)
        observed = (t + req.router_rtt_ms / 2000.0 - req.sent_at) * 1000.0
        prev = router.ttft_ewma.get(pod.name)
        router.ttft_ewma[pod.name] = observed if prev is None else prev + 0.2 * (observed - prev)
        err = router.ttft_error.get(pod.name)
        router.ttft_error[pod.name] = calibration.observe(
            err[0] if err else None,
            err[1] if err else None,
            req.predicted_ms,
            observed,
            t + req.router_rtt_ms / 2000.0,
            self.routing.ttft_error_half_life_s,
        )
        self._touch(router, pod.name)
        target = self.admission.default_ttft_target_ms
        if target > 0:  # the admission limit adapts to the TTFT the client saw, as live
            seen = t + req.router_rtt_ms / 2000.0  # the first token at the router
            arrived = req.trace.arrival_s
            router.limit = admission.observe_ttft(
                router.limit,
                (seen - arrived) * 1000.0,
                target,
                router.admitted,
                self._snapshot(router),
                self.admission,
                arrived_at=arrived,
                now=seen,
            )

    # --- control plane --------------------------------------------------------------------
    def refresh(self) -> None:
        now, fresh = self.now, self.fresh_for_s
        for pod in self.pod_order:
            if pod.state != "active":
                continue
            core = pod.core
            # an idle pod whose figures are fresh enough: nothing can have changed
            if (
                core is not None
                and not core.has_work()
                and pod.m_at is not None
                and now - pod.m_at <= fresh
                and pod.m_running == 0
                and pod.m_waiting == 0
                and pod.m_kv == core.kv_cache_usage
            ):
                continue
            self._refresh_pod(pod)

    def _scrape(self, pod: _Pod) -> Scrape:
        core = pod.core
        assert core is not None
        if core.has_work():
            self._process(pod, core.advance(self.now))
            self._reschedule(pod)
        return Scrape(
            t=self.now,
            ok=True,
            histograms={s: h.cumulative() for s, h in pod.hists.items()},
            waiting=float(core.num_waiting),
            running=float(core.num_running),
            kv_usage=core.kv_cache_usage,
            served=Served(*pod.served),
        )

    def _signals(self) -> Signals:
        history: dict[str, deque[Scrape]] = {}
        for pod in self.pod_order:
            if pod.warm and pod.state in ("active", "standby", "promoting"):
                pod.scrapes.append(self._scrape(pod))
                while len(pod.scrapes) > self.scrapes_kept:
                    pod.scrapes.popleft()
                history[pod.name] = pod.scrapes
        held = sum(len(r.held) for r in self.routers.values())
        self.router_scrapes.append(
            RouterScrape(
                self.now,
                True,
                float(self.arrivals),
                dict(self.refused),
                held,
                True,
                burst=self.arrival_bins.flush(self.now),
                burst_arrivals=float(self.arrivals),
            )
        )
        demand = router_demand({"routers": self.router_scrapes}, self.now, self.query.window_s)
        if not history:
            # a pool at zero: the routers' held requests (preheat_router_queue_depth) and
            # demand counters are what the live Prometheus source reports, fresh.
            if wakes(held, demand):
                return wake_signals(self.query, self.now, float(held), demand)
            return wake_signals(self.query, self.now, 0.0)  # fresh, idle
        sig = compute(
            history, self.query, self.now, self.options.tuning.stale_after_s, demand=demand
        )
        if held:
            sig = replace(sig, in_flight=(sig.in_flight or 0.0) + held)
        return sig

    # --- the loop's glue: observe -> core.control.step -> act ---------------------------
    def views(self) -> tuple[PodView, ...]:
        """The pods as the control loop sees them (stopped ones are gone)."""
        routers = self.routers.values()
        return tuple(
            PodView(
                name=p.name,
                role=p.role,
                warm=p.warm,
                cached_blocks=len(p.cache) if p.cache is not None else 0,
                in_flight=len(p.reqs) + sum(r.in_flight.get(p.name, 0) for r in routers),
                created=p.created,
                ready_after=p.ready_after,
            )
            for p in self.pod_order
            if p.state != "stopped"
        )

    def counts(self) -> ReplicaCounts:
        return tally(self.views())

    def observe(self, signals: Signals | None) -> Observation:
        return Observation(self.now, self.pool, self.desired, self.views(), signals)

    def autoscale(self) -> None:
        policy = self.options.autoscale or core_autoscaling.decide  # looked up now: tests patch it
        obs = self.observe(self._signals())
        decision, plan, self.control = step(
            obs, self.control, tuning=self.options.tuning, policy=policy
        )
        assert decision is not None
        self.stats.decide_calls += 1
        if decision.forecast is not None:
            self.forecast_horizon = (decision.forecast.horizon_s, decision.forecast.basis)
            if decision.forecast.error is not None:
                self.forecast_errors.append(decision.forecast.error)
            if decision.forecast.headroom is not None:
                self.forecast_shortfalls.append(decision.forecast.headroom[1])
        if decision.active != self.desired:
            kind = "scale_up" if decision.active > self.desired else "scale_down"
            self.events.append(
                ScaleEvent(
                    self.now,
                    kind,
                    decision.reason,
                    self.pool.name,
                    "",
                    self.desired,
                    decision.active,
                )
            )
            self.desired = decision.active
        self.act(plan)

    def reconcile(self) -> None:
        self.act(step(self.observe(None), self.control)[1])

    def act(self, plan: RolePlan) -> None:
        for name in plan.victims:
            pod = self.pods[name]
            self.events.append(ScaleEvent(self.now, "drain", plan.reason, self.pool.name, name))
            self.stop_serving(pod, "draining")
        for name, role in plan.changes:
            pod = self.pods[name]
            if role == ROLE_ACTIVE and pod.state == "standby":
                pod.state = "promoting"
                self.events.append(
                    ScaleEvent(self.now, "promote", plan.reason, self.pool.name, name)
                )
                self.push(self.now + self.options.startup.promote_s, _PROMOTED, pod)
            elif role == ROLE_STANDBY and pod.state in ("active", "promoting"):
                self.events.append(
                    ScaleEvent(self.now, "demote", plan.reason, self.pool.name, name)
                )
                self.stop_serving(pod, "standby")
        for _ in range(plan.new_pods):
            self.start_pod(False, plan.reason)

    def ready(self, pod: _Pod) -> None:
        if pod.state != "starting":
            return
        self._make_warm(pod)
        pod.ready_after = self.now - pod.created
        self.events.append(ScaleEvent(self.now, "ready", "warm", self.pool.name, pod.name))
        self.reconcile()

    def promoted(self, pod: _Pod) -> None:
        if pod.state != "promoting":
            return
        self.set_active(pod)

    def sample(self) -> None:
        c = self.counts()
        self.samples.append(ReplicaSample(self.now, c.active, c.standby, c.warming, c.draining))

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> Run:
        wall0 = time.perf_counter()
        o = self.options
        active = self.desired
        standby = wanted(self.pool.replicas, active)
        for _ in range(active + standby):
            self.start_pod(not o.cold_start, "initial")
        if not o.cold_start:
            for p in self.pod_order[:active]:
                self.set_active(p)
        else:
            self.reconcile()
        for i, tr in enumerate(self.trace):
            region = (
                client_region_of(self.client_regions, tr.session_id or f"r{tr.index}", o.seed)
                if len(self.client_regions) > 1
                else self.client_regions[0][0]
            )
            self.push(tr.arrival_s, _ARRIVE, _Req(tr, f"req-{i}", region))
        self.push(o.refresh_interval_s, _REFRESH, None)
        if self.pool.autoscaling.objectives:
            self.push(o.autoscale_interval_s, _SCALE, None)
        self.push(0.0, _SAMPLE, None)
        heap = self.heap
        pop = heapq.heappop
        n_events = 0
        while heap and self.remaining > 0:
            t, _, kind, payload = pop(heap)
            self.now = t
            n_events += 1
            if kind == _WAKE:
                wpod, token = cast(tuple[_Pod, int], payload)
                self.wake(wpod, token)
            elif kind == _ARRIVE:
                self.arrive(payload)  # type: ignore[arg-type]
            elif kind == _DELIVER:
                self.deliver(payload)  # type: ignore[arg-type]
            elif kind == _REFRESH:
                self.refresh()
                self.push(t + o.refresh_interval_s, _REFRESH, None)
            elif kind == _SCALE:
                self.autoscale()
                self.push(t + o.autoscale_interval_s, _SCALE, None)
            elif kind == _READY:
                self.ready(payload)  # type: ignore[arg-type]
            elif kind == _PROMOTED:
                self.promoted(payload)  # type: ignore[arg-type]
            elif kind == _SAMPLE:
                self.sample()
                self.push(t + o.sample_interval_s, _SAMPLE, None)
            elif kind == _TIMEOUT:
                self.timeout(payload)  # type: ignore[arg-type]
        end = self.now
        self.sample()
        gpu_s = 0.0
        for p in self.pod_order:
            stop = p.stopped_at if p.stopped_at is not None else end
            gpu_s += (stop - p.created) * self.gpus
        st = self.stats
        st.events = n_events
        st.virtual_s = end
        st.gpu_seconds = gpu_s
        st.wall_s = time.perf_counter() - wall0
        requests = []
        for i, out in enumerate(self.outcomes):
            if out is None:  # cannot happen: the loop runs until every request ended
                lost = self.trace[i]
                out = RequestOutcome(f"req-{i}", lost.arrival_s, "error", error="not finished")
            requests.append(out)
        meta = RunMeta(
            name=o.name,
            simulated=True,
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            duration_s=end,
            pool=self.pool.name,
            target="simulated",
            ttft_objective_ms=self.objective_ms,
            class_ttft_ms=self.pool.traffic.deadlines_ms,
            extra={
                "gpu_hours": gpu_s / 3600.0,
                "gpus_per_replica": self.gpus,
                "routing_policy": self.routing.policy,
                "seed": o.seed,
                "pods_started": st.pods_started,
                "peak_pods": st.peak_pods,
                "events": n_events,
                "schedule_calls": st.schedule_calls,
                "decide_calls": st.decide_calls,
                **_forecast_extra(
                    self.forecast_errors,
                    self.forecast_shortfalls,
                    self.pool,
                    self.options,
                    self.forecast_horizon,
                ),
            },
        )
        return Run(meta=meta, requests=requests, events=self.events, replicas=self.samples)


def _policy_start(pool: PoolConfig, options: SimOptions) -> PolicyState:
    """The policy's state at t=0: fresh, its forecast having learned
    ``options.forecast_history`` (with the pool's season length)."""
    if not options.forecast_history:
        return PolicyState()
    pred = pool.autoscaling.predictive
    hw = options.tuning.smoothing(pred)
    # predicting at the horizon the pool starts with (its pods' cold start is not measured
    # yet), so the history teaches the forecast's error and shortfall too
    return PolicyState(forecast=learn(None, options.forecast_history, hw, pred.horizon(None)))


def _forecast_extra(
    errors: list[float],
    shortfalls: list[float],
    pool: PoolConfig,
    options: SimOptions,
    horizon: tuple[float, str] | None,
) -> dict[str, object]:
    """``meta.extra["forecast"]``: how far off the arrival-rate forecast was over the run
    ({} when it made no checked prediction: no router figures, or a run too short), its
    horizon at the last evaluation and what set it (``horizon_basis``: "" for the
    configuration, else the pods' measured cold start), its season's period and how much
    history it started from (s before t=0); with a headroom, the shortfall it read (median
    and p90 over the evaluations that read one)."""
    acc = forecast_accuracy(errors)
    if acc is None:
        return {}
    history = options.forecast_history
    h, basis = horizon or (pool.autoscaling.predictive.horizon(None), "")
    room = forecast_accuracy(shortfalls)
    headroom = (
        {}
        if room is None
        else {
            "headroom": {
                "percentile": pool.autoscaling.predictive.headroom,
                "mode": "keep" if pool.autoscaling.predictive.headroom_keeps else "size",
                "evaluations": room.count,
                "shortfall_median": room.median,
                "shortfall_p90": room.p90,
            }
        }
    )
    return {
        "forecast": {
            **headroom,
            "horizon_s": h,
            "horizon_basis": basis,
            "period_s": pool.autoscaling.predictive.period_s,
            "history_s": -history[0][0] if history else 0.0,
            "acting": pool.autoscaling.predictive.enabled,
            "evaluations": acc.count,
            "error_median": acc.median,
            "error_p90": acc.p90,
        }
    }


def _refusal_reason(outcome: RequestOutcome) -> str:
    """The router's refusal reason for a request's outcome ("": not refused)."""
    if outcome.outcome == "rejected":
        return "rejected"
    if outcome.outcome == "error" and outcome.error.startswith("UNAVAILABLE"):
        return "unavailable"
    return ""


def _rle(runs: list[list[float]], value: float, count: int) -> None:
    if runs and runs[-1][0] == value:
        runs[-1][1] += count
    else:
        runs.append([value, float(count)])


def simulate(
    pool: PoolConfig, trace: Sequence[TraceRequest], options: SimOptions | None = None
) -> tuple[Run, SimStats]:
    """Replays ``trace`` against ``pool`` in virtual time; the run record and the work done.

    Deterministic: the same pool, trace and options give the same record (but for
    ``meta.started_at``, the wall clock). Raises :class:`SimInputError` for options that
    cannot run (e.g. a bad engine option).
    """
    opts = options or SimOptions()
    try:
        world = _World(pool, trace, opts)
    except ValueError as e:
        raise SimInputError(str(e)) from None
    run = world.run()
    return run, world.stats
