"""The autoscaling policy's inputs, state and output: frozen values, no clock, no I/O.

Every time is a float of seconds on one clock, the caller's (``Context.now``, the source's
``observed_at``): the operator passes its monotonic clock, the simulator a virtual one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.forecast import Forecast, HoltWinters, Outlook
from preheat.core.pool import (
    AutoscalingConfig,
    Objective,
    PredictiveConfig,
    ReplicasConfig,
    Signal,
)


class Direction(enum.Enum):
    UP = "up"
    DOWN = "down"
    HOLD = "hold"


class Cause(enum.Enum):
    """Why the decision is what it is (a metric label: bounded set)."""

    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    PANIC = "panic"
    WAKE = "wake"
    SCALE_TO_ZERO = "scale_to_zero"
    WITHIN_TOLERANCE = "within_tolerance"
    STEADY = "steady"  # the objectives ask for what it has
    STABILIZING = "stabilizing"
    COOLDOWN = "cooldown"
    WARMING = "warming"  # capacity already on its way covers the recommendation
    BOUNDS = "bounds"  # min/max keeps it where it is
    STALE = "stale"  # missing or stale metrics: hold
    IDLE = "idle"  # at zero, nothing to do
    NO_OBJECTIVES = "no_objectives"  # autoscaling off: replicas.desired rules


@dataclass(frozen=True)
class SignalValue:
    """One objective's observation.

    ``value``: ms for latency percentiles, waiting requests summed over the pool for
    ``queueDepth``, the fullest worker's fraction for ``kvCacheUsage``; ``None`` when the
    window saw nothing to measure (no requests finished: not missing data, just no traffic).
    ``short_value``: the same over the panic window (``None``: not computed / no data).
    ``stale``: the source could not read it (scrape failed, series absent, too old).
    ``floor``: latency percentiles read off a histogram, the lower edge (ms) of the bucket
    the percentile lies in (``core.percentiles.bucket_floor``): the true percentile is over
    it and at most the bucket's upper bound, wherever interpolation put ``value`` (None: not
    known).
    """

    signal: Signal
    percentile: float  # latency signals: 0 < p < 100; 0 for the others
    value: float | None
    observed_at: float | None  # None: never observed
    stale: bool = False
    short_value: float | None = None
    samples: float = 0.0  # observations in the window (latency), reporting workers (gauges)
    floor: float | None = None

    def matches(self, objective: Objective) -> bool:
        return self.signal is objective.signal and (
            not objective.signal.is_latency or self.percentile == objective.percentile
        )


@dataclass(frozen=True)
class Demand:
    """What the pool's routers saw over the window, in requests per second: every request
    that arrived for the pool (``arrival_rate``; malformed ones aside) and those they turned
    away unserved (``refused_rate``: admission rejections, no endpoint in time), with the
    refusals by the router's reason. ``window_s``: the span the rates cover.

    The workers' histograms see only what was served; a pool whose router refuses part of
    its traffic serves ``A - R`` of a demand of ``A``.
    """

    arrival_rate: float
    refused_rate: float
    window_s: float
    by_reason: tuple[tuple[str, float], ...] = ()  # (reason, refused per second)
    # the arrivals' index of dispersion over the window (Var / mean of their per-second
    # counts, from the routers' burst counter: core.traffic.arrivals); None: not measured
    arrival_dispersion: float | None = None

    @property
    def refused_fraction(self) -> float:
        """R / A, within [0, 1] (the two counters are read apart: R may overshoot A)."""
        if self.refused_rate <= 0:
            return 0.0
        if self.arrival_rate <= 0:
            return 1.0
        return min(1.0, self.refused_rate / self.arrival_rate)


@dataclass(frozen=True)
class Mix:
    """The requests the pool's workers finished over the window (the workers' counters
    ``vllm:request_success``, ``vllm:prompt_tokens``, ``vllm:prefix_cache_hits``,
    ``vllm:generation_tokens``): how many, and per request the mean prompt tokens, of them
    cached, and output tokens. The capacity estimate (:mod:`~.capacity`) reads it."""

    requests: float
    prompt_tokens: float
    cached_tokens: float
    output_tokens: float


@dataclass(frozen=True)
class SignalQuery:
    """What a metric source is asked for: the pool's objectives and windows (built from the
    pool's config by :func:`preheat.core.control.signal_query`)."""

    objectives: tuple[Objective, ...]
    window_s: float  # autoscaling.window_s
    short_window_s: float = 0.0  # panic.window_s; 0: no short-window values


@dataclass(frozen=True)
class Signals:
    """A metric source's snapshot for one pool.

    ``requests``: requests that arrived (or finished) over the window; ``in_flight``:
    requests running or waiting now, including those a router holds for a pool at zero.
    Both ``None`` when unknown; they drive scale-to-zero (idle) and the wake signal.
    ``demand``: what the routers saw arrive and refused over the window (``None``: no
    router counters read); refused demand is demand (see :mod:`~.demand`).
    """

    values: tuple[SignalValue, ...] = ()
    observed_at: float | None = None
    stale: bool = True
    requests: float | None = None
    in_flight: float | None = None
    error: str = ""  # why it is stale, for the reason text
    demand: Demand | None = None
    mix: Mix | None = None  # the window's request mix (None: no token counters read)

    def find(self, objective: Objective) -> SignalValue | None:
        return next((v for v in self.values if v.matches(objective)), None)


@dataclass(frozen=True)
class ReplicaCounts:
    """Pods observed now, by state (``warming``: started, not yet warm), and the pool's
    measured cold start (the median, over the pods whose start was seen, of creation to
    warm; None: none measured)."""

    active: int = 0
    standby: int = 0
    warming: int = 0
    draining: int = 0
    cold_start_s: float | None = None


@dataclass(frozen=True)
class PolicyTuning:
    """Knobs the pool spec does not (yet) carry."""

    stale_after_s: float = 30.0  # a snapshot older than this reads as stale
    scale_to_zero_delay_s: float = 300.0  # idle this long before going to zero (min: 0)
    # a latency objective's feedback step: at most this factor over the serving pods per
    # evaluation (ceil(serving * min(observed / target, factor))); see recommend.needed
    max_latency_factor: float = 3.0
    # the capacity estimate (capacity.py) for TTFT objectives, from the routers' arrival
    # rate and the workers' request mix; None: feedback only
    cost: ServiceCost | None = field(default_factory=ServiceCost)
    # autoscaling.predictive's smoothing (level, trend, season); the season's length is the
    # pool's autoscaling.predictive.period (it replaces period_s here)
    holt_winters: HoltWinters = field(default_factory=HoltWinters)

    def smoothing(self, predictive: PredictiveConfig) -> HoltWinters:
        """The forecast's smoothing for a pool: ``holt_winters`` with its season's length
        and whether it keeps a weekly season."""
        return replace(self.holt_winters, period_s=predictive.period_s, weekly=predictive.weekly)


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between evaluations (returned, never mutated)."""

    history: tuple[tuple[float, int], ...] = ()  # (time, recommendation), oldest first
    last_scale_at: float | None = None
    last_direction: Direction = Direction.HOLD
    panic_until: float | None = None
    idle_since: float | None = None
    # the first evaluation (this process's start, or the pool's): the scale-down window
    # before it was not seen, and an unseen window holds the current size (a new pool's
    # starting size too: proposal 0007, revised twice)
    since: float | None = None
    # (time, active pods serving) at each evaluation that had the routers' demand figures,
    # over the demand window: the pods that served (and refused) what the window counted
    serving: tuple[tuple[float, int], ...] = ()
    # the arrival-rate forecast's state (None: no rate yet); kept with predictive off too
    forecast: Forecast | None = None
    # since when an objective has been late although the capacity estimate says the
    # serving pods suffice (None: not so now); feedback corrects the estimate after a window
    late_since: float | None = None
    # the pool's last measured cold start (``ReplicaCounts.cold_start_s``), kept for when
    # the pods that measured it have left (pods warm at the start have none)
    cold_start_s: float | None = None


@dataclass(frozen=True)
class Context:
    """Everything ``decide`` reads. ``replicas.desired`` is the active count the pool is
    converging to now (the last decision, or a manual ``kubectl scale``)."""

    now: float
    autoscaling: AutoscalingConfig
    replicas: ReplicasConfig
    counts: ReplicaCounts
    signals: Signals
    state: PolicyState = field(default_factory=PolicyState)
    tuning: PolicyTuning = field(default_factory=PolicyTuning)


@dataclass(frozen=True)
class Plan:
    """How the pods get from the observed counts to the decision (``core.control.roles``
    picks which)."""

    promote: int = 0  # standby -> active (instant)
    start: int = 0  # new pods (refill standby, or active when standby ran out)
    demote: int = 0  # active -> standby (standby was short)
    remove: int = 0  # drained and deleted (core.control.roles.choose_victims picks them)


@dataclass(frozen=True)
class Decision:
    active: int  # desired active replicas
    standby: int  # desired warm standby replicas
    previous: int  # the active count it was converging to before
    direction: Direction
    cause: Cause
    reason: str
    recommendation: int | None  # raw (before stabilization, limits, bounds); None: none
    plan: Plan
    signals: Signals
    panic: bool = False
    wake: bool = False
    # the arrival-rate forecast made at this evaluation (acting only with
    # autoscaling.predictive on); None: none made
    forecast: Outlook | None = None
