"""Baseline autoscalers with the call shape of :func:`preheat.core.autoscaling.decide`:
``policy(ctx) -> (Decision, PolicyState)``, pure (``ctx.now``, no clock, no I/O), so the
simulator and, in principle, the operator run them through the same code path as ours.

Each is a frozen dataclass of its parameters whose ``__call__`` is the policy; the defaults
are the upstream defaults. They read the pool-wide gauges of :class:`Signals`:
``in_flight`` (requests running or waiting now) and the ``queueDepth`` value (waiting
requests summed over the pool); they ignore ``ctx.autoscaling`` (our objectives) but keep
``ctx.replicas`` (min, max, warm standby), so "with and without warm standby" is the same
``ReplicasConfig`` switch as for our policy: a scale-up promotes standby first (the plan
comes from :func:`preheat.core.autoscaling.standby.plan`).

:class:`Hpa`: the Kubernetes HorizontalPodAutoscaler (autoscaling/v2), average utilization
    Source: kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/ (algorithm
    details, default behavior) and KEP-4951 (tolerance).
    ``utilization = in_flight / (active * slots_per_replica)`` is the pods' average
    batch-slot utilization (the ``vllm:num_requests_running``-per-``max_num_seqs`` gauge,
    read as its latest value as the Prometheus adapter serves it; waiting requests count,
    so it exceeds 1 when requests queue).
    1. ``ratio = utilization / target_utilization``; within ``1 ± tolerance`` (0.1) the
       recommendation is the current replica count, else
       ``desired = ceil(active * ratio)`` (= ``ceil(in_flight / (slots * target))``);
    2. scale-down stabilization: the highest recommendation of the last
       ``down_stabilization_s`` (300 s); scale-up: the latest (0 s window); a stored
       recommendation counts while it is strictly younger than the window, as upstream
       (``rec.timestamp.After(cutoff)``). The first evaluation stores the current size as
       a recommendation (upstream's ``recordInitialRecommendation``), so a new HPA, or one
       whose controller restarted, holds its size for one scale-down window;
    3. scale-up rate limit (``selectPolicy: Max`` of ``Percent 100`` and ``Pods 4`` per
       ``period_s`` 15 s): at most ``max(2 * current, current + 4)`` per evaluation;
       scale-down ``Percent 100`` per 15 s (no limit); then ``[min, max]``;
    4. evaluated every ``sync_period_s`` (15 s, ``--horizontal-pod-autoscaler-sync-period``):
       calls in between hold and leave the state as it was.

:class:`Keda`: a KEDA ScaledObject with a queue trigger (e.g. Prometheus
    ``vllm:num_requests_waiting``, ``metricType: AverageValue``, ``threshold``)
    Source: keda.sh/docs/latest/reference/scaledobject-spec/ and
    keda.sh/docs/latest/concepts/scaling-deployments/. KEDA feeds the metric to an HPA it
    owns, so 1 -> N is the HPA's ``AverageValue`` rule on the pool-wide queue:
    ``desired = ceil(queue / threshold)`` (tolerance 0.1 on ``queue / (threshold *
    active)``), with the HPA's default behavior as above, evaluated every
    ``polling_interval_s`` (30 s). ``cooldown_period_s`` (300 s) applies only to scaling
    to zero: with ``min: 0`` KEDA itself (not its HPA, which cannot go to zero) scales the
    pool to zero from any size once the trigger has been inactive (no queue, nothing in
    flight) that long, and wakes it at the first request. A trigger never active since
    the first poll (the ScaledObject's creation here) waits ``initial_cooldown_period_s``
    instead (``initialCooldownPeriod``, default 0: a new ScaledObject with ``min: 0`` and
    no traffic goes to zero at its first poll, as upstream's scale executor does when
    ``LastActiveTime`` is nil).

:class:`Kpa`: the Knative Pod Autoscaler, concurrency mode
    Source: knative.dev/docs/serving/autoscaling/kpa-specific/ and
    knative.dev/docs/serving/autoscaling/concurrency/ (target, target utilization).
    Observed concurrency (``in_flight``) is sampled at every call (Knative's autoscaler
    ticks every 2 s; the caller should call at least that often) and kept in
    ``PolicyState.history`` as ``(t, in_flight)`` samples.
    ``stable = mean over stable_window_s`` (60 s), ``panic = mean over panic_window_s``
    (6 s = 10% of stable); ``per_pod = target_concurrency * target_utilization`` (0.7);
    ``desired_stable = ceil(stable / per_pod)``, ``desired_panic = ceil(panic / per_pod)``.
    Panic starts when ``desired_panic / ready >= panic_threshold`` (2.0 = 200%) and lasts
    until a whole stable window passes without that; in panic the pool scales to
    ``max(current, desired_panic)`` and never down. Otherwise ``desired_stable``. Rates:
    up at most ``max_scale_up_rate`` (1000x) of ready pods, down at most to
    ``ready / max_scale_down_rate`` (2.0) per evaluation; then ``[min, max]``.

:class:`Scheduled`: a fixed size per hour of the day, set in advance
    What a careful SRE sets from last week's traffic (a CronJob patching ``replicas``, or
    KEDA's cron scaler): ``sizes[i]`` holds over ``[i * slot_s, (i + 1) * slot_s)`` of
    the day (``ctx.now`` from the replay's start, the day repeating), and each size comes
    in ``lead_s`` early (a pod's cold start) and goes one slot late: the target is the
    larger of the slot now and the slot at ``now + lead_s``. Reads no signal.

Every decision carries a reason in the same style as ours; stale or missing signals hold
(as the HPA does when it cannot read its metric).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from preheat.core.autoscaling import standby
from preheat.core.autoscaling.types import (
    Cause,
    Context,
    Decision,
    Direction,
    PolicyState,
    Signals,
)
from preheat.core.pool import Signal

__all__ = [
    "BASELINES",
    "Hpa",
    "HpaBehavior",
    "Keda",
    "Kpa",
    "Scheduled",
    "hpa_desired",
    "kpa_desired",
]


def _ceil(x: float) -> int:
    return math.ceil(round(x, 9))


def _stale(ctx: Context) -> str:
    s = ctx.signals
    if s.observed_at is None:
        return "no metrics yet"
    age = ctx.now - s.observed_at
    if s.stale or age > ctx.tuning.stale_after_s:
        err = f": {s.error}" if s.error else ""
        return f"no fresh metrics for {age:.0f} s (source stale{err})"
    return ""


def _queue(signals: Signals) -> float | None:
    for v in signals.values:
        if v.signal is Signal.QUEUE_DEPTH and not v.stale:
            return v.value if v.value is not None else 0.0
    return None


def _decision(
    ctx: Context,
    target: int,
    cause: Cause,
    reason: str,
    rec: int | None,
    *,
    panic: bool = False,
) -> Decision:
    current = ctx.replicas.desired
    stand = standby.wanted(ctx.replicas, target)
    direction = (
        Direction.UP if target > current else Direction.DOWN if target < current else Direction.HOLD
    )
    if direction is Direction.HOLD and cause in (Cause.SCALE_UP, Cause.SCALE_DOWN):
        cause = Cause.STEADY
    p = standby.plan(ctx.counts, target, stand)
    if direction is not Direction.HOLD:
        reason = f"{reason}; {standby.describe(target - current, p)}"
    return Decision(
        active=target,
        standby=stand,
        previous=current,
        direction=direction,
        cause=cause,
        reason=reason,
        recommendation=rec,
        plan=p,
        signals=ctx.signals,
        panic=panic,
        wake=current == 0 and target > 0,
    )


def _after(state: PolicyState, ctx: Context, d: Decision) -> PolicyState:
    if d.direction is Direction.HOLD:
        return state
    return replace(state, last_scale_at=ctx.now, last_direction=d.direction)


def hpa_desired(current: int, ratio: float, tolerance: float, metric_replicas: int) -> int:
    """The HPA's raw recommendation: ``current`` within ``1 ± tolerance``, else
    ``ceil(metric_replicas * ratio)`` (``metric_replicas``: the ready pods the metric came
    from)."""
    if math.isfinite(ratio) and abs(ratio - 1.0) <= tolerance:
        return current
    if math.isinf(ratio):
        return current + 1 if current > 0 else 1
    return _ceil(metric_replicas * ratio)


@dataclass(frozen=True)
class HpaBehavior:
    """The HPA's behavior after the raw recommendation (shared by :class:`Hpa` and
    :class:`Keda`): stabilization windows over ``PolicyState.history`` (``(t,
    recommendation)``), rate limits, bounds."""

    tolerance: float = 0.1
    up_stabilization_s: float = 0.0
    down_stabilization_s: float = 300.0
    up_percent: float = 100.0  # per period
    up_pods: int = 4  # per period
    period_s: float = 15.0

    def apply(
        self, ctx: Context, raw: int, head: str, interval_s: float, lowest: int | None = None
    ) -> tuple[Decision, PolicyState]:
        st, now, current = ctx.state, ctx.now, ctx.replicas.desired
        horizon = max(self.up_stabilization_s, self.down_stabilization_s, interval_s)
        # recordInitialRecommendation: the first evaluation of a new HPA (or of a restarted
        # controller) stores the current size as a recommendation, so it holds that size
        # for the scale-down window before scaling down
        seeded = st.history or ((now, current),)
        past = tuple((t, r) for t, r in seeded if now - horizon <= t <= now)
        history = (*past, (now, raw))
        base = replace(st, history=history)
        # stabilizeRecommendationWithBehaviors: the current recommendation and every stored
        # one strictly after the window's cutoff (rec.timestamp.After(cutoff))
        up_recs = [raw, *(r for t, r in past if t > now - self.up_stabilization_s)]
        down_recs = [raw, *(r for t, r in past if t > now - self.down_stabilization_s)]
        target = current
        if min(up_recs) > current:
            target = min(up_recs)
        elif max(down_recs) < current:
            target = max(down_recs)
        stabilizing = target == current and raw != current
        if target > current:
            limit = max(_ceil(current * (1 + self.up_percent / 100.0)), current + self.up_pods)
            target = min(target, limit)
        low = ctx.replicas.min if lowest is None else lowest
        target = max(low, min(ctx.replicas.max, target))
        if target > current:
            cause = Cause.WAKE if current == 0 else Cause.SCALE_UP
        elif target < current:
            cause = Cause.SCALE_TO_ZERO if target == 0 else Cause.SCALE_DOWN
        elif stabilizing and raw > current and current >= ctx.replicas.max:
            cause, head = Cause.BOUNDS, f"{head}; holding {current}: at max"
        elif stabilizing and raw < current and current <= low:
            cause, head = Cause.BOUNDS, f"{head}; holding {current}: at min"
        elif stabilizing:
            way = "up" if raw > current else "down"
            cause = Cause.STABILIZING
            head = f"{head}; holding {current}: needs {raw}, stabilizing ({way})"
        elif raw == current:
            cause = Cause.WITHIN_TOLERANCE
        else:
            cause = Cause.STEADY
        d = _decision(ctx, target, cause, head, raw)
        return d, _after(base, ctx, d)


def _due(state: PolicyState, now: float, interval_s: float) -> bool:
    return not state.history or now - state.history[-1][0] >= interval_s - 1e-9


def _hold(ctx: Context, cause: Cause, reason: str) -> tuple[Decision, PolicyState]:
    return _decision(ctx, ctx.replicas.desired, cause, reason, None), ctx.state


@dataclass(frozen=True)
class Hpa:
    """HPA on average batch-slot utilization (see the module docstring)."""

    target_utilization: float = 0.7
    slots_per_replica: int = 32
    sync_period_s: float = 15.0
    behavior: HpaBehavior = HpaBehavior()
    name: str = "hpa"

    def __call__(self, ctx: Context) -> tuple[Decision, PolicyState]:
        current = ctx.replicas.desired
        if not _due(ctx.state, ctx.now, self.sync_period_s):
            return _hold(ctx, Cause.STEADY, f"hpa: between syncs; holding {current}")
        why = _stale(ctx)
        if why or ctx.signals.in_flight is None:
            why = why or "in-flight requests missing from the metric source"
            return _hold(ctx, Cause.STALE, f"hpa: holding {current}: {why}")
        ready = ctx.counts.active
        in_flight = max(0.0, ctx.signals.in_flight)
        per_pod = self.slots_per_replica * self.target_utilization
        if ready <= 0:
            raw = _ceil(in_flight / per_pod) if in_flight > 0 else current
            util_text = "no ready pods"
        else:
            util = in_flight / (ready * self.slots_per_replica)
            ratio = util / self.target_utilization
            raw = hpa_desired(current, ratio, self.behavior.tolerance, ready)
            util_text = f"utilization {util * 100:.0f}% vs target {self.target_utilization:.0%}"
        head = f"hpa: {util_text} ({in_flight:g} in flight on {ready} ready)"
        return self.behavior.apply(ctx, raw, head, self.sync_period_s)


@dataclass(frozen=True)
class Keda:
    """KEDA queue-threshold ScaledObject (see the module docstring)."""

    threshold: float = 4.0  # waiting requests per replica
    polling_interval_s: float = 30.0
    cooldown_period_s: float = 300.0
    initial_cooldown_period_s: float = 0.0
    behavior: HpaBehavior = HpaBehavior()
    name: str = "keda"

    def __call__(self, ctx: Context) -> tuple[Decision, PolicyState]:
        current = ctx.replicas.desired
        if not _due(ctx.state, ctx.now, self.polling_interval_s):
            return _hold(ctx, Cause.STEADY, f"keda: between polls; holding {current}")
        why = _stale(ctx)
        queue = _queue(ctx.signals)
        if why or queue is None:
            why = why or "queueDepth missing from the metric source"
            return _hold(ctx, Cause.STALE, f"keda: holding {current}: {why}")
        active_trigger = queue > 0 or (ctx.signals.in_flight or 0.0) > 0
        st = ctx.state
        created = st.since if st.since is not None else ctx.now  # the first poll
        idle_since = (
            None if active_trigger else (st.idle_since if st.idle_since is not None else ctx.now)
        )
        ctx = replace(ctx, state=replace(st, idle_since=idle_since, since=created))
        ready = max(0, ctx.counts.active)
        if current == 0 and not active_trigger:
            return _hold(ctx, Cause.IDLE, "keda: at zero: trigger inactive")
        raw = _ceil(queue / self.threshold)  # AverageValue: ceil(metric / target)
        if ready > 0 and abs(queue / (self.threshold * ready) - 1.0) <= self.behavior.tolerance:
            raw = current
        if current == 0:
            raw = max(1, raw)
        head = f"keda: queue {queue:g} waiting vs threshold {self.threshold:g}/replica"
        # inactive since the first poll: never active (an activation resets idle_since)
        never = idle_since == created
        wait = self.initial_cooldown_period_s if never else self.cooldown_period_s
        if ctx.replicas.min == 0 and idle_since is not None and ctx.now - idle_since >= wait:
            # KEDA itself scales an inactive target to zero (the HPA it owns cannot), from
            # any size and outside the HPA's windows
            what = "initialCooldownPeriod" if never else "cooldownPeriod"
            head = f"{head}; trigger inactive for {ctx.now - idle_since:.0f} s ({what} {wait:g} s)"
            d = _decision(ctx, 0, Cause.SCALE_TO_ZERO, head, raw)
            history = (*ctx.state.history, (ctx.now, raw))
            return d, _after(replace(ctx.state, history=history), ctx, d)
        lowest = max(1, ctx.replicas.min)
        return self.behavior.apply(ctx, raw, head, self.polling_interval_s, lowest)


@dataclass(frozen=True)
class Kpa:
    """Knative Pod Autoscaler, concurrency mode (see the module docstring)."""

    target_concurrency: float = 32.0  # containerConcurrency target per pod
    target_utilization: float = 0.7
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0  # 200%
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    name: str = "kpa"

    def __call__(self, ctx: Context) -> tuple[Decision, PolicyState]:
        current, now, st = ctx.replicas.desired, ctx.now, ctx.state
        why = _stale(ctx)
        if why or ctx.signals.in_flight is None:
            why = why or "in-flight requests missing from the metric source"
            return _hold(ctx, Cause.STALE, f"kpa: holding {current}: {why}")
        sample = max(0, round(ctx.signals.in_flight))
        kept = tuple((t, c) for t, c in st.history if now - self.stable_window_s < t <= now)
        history = (*kept, (now, sample))
        ready = max(1, ctx.counts.active)
        desired_stable, desired_panic, stable, panic = kpa_desired(
            history,
            now,
            self.stable_window_s,
            self.panic_window_s,
            self.target_concurrency * self.target_utilization,
        )
        fired = desired_panic / ready >= self.panic_threshold
        panic_until = st.panic_until
        if fired:
            panic_until = now + self.stable_window_s
        elif panic_until is not None and now >= panic_until:
            panic_until = None
        panicking = panic_until is not None
        base = replace(st, history=history, panic_until=panic_until)
        if panicking:
            target = max(current, desired_panic)
            head = (
                f"kpa: panic: {panic:.1f} concurrent over {self.panic_window_s:g} s wants "
                f"{desired_panic} (>= {self.panic_threshold:g}x {ready} ready)"
            )
        else:
            target = desired_stable
            head = (
                f"kpa: {stable:.1f} concurrent over {self.stable_window_s:g} s, "
                f"{self.target_concurrency * self.target_utilization:g} per pod"
            )
        target = min(target, _ceil(ready * self.max_scale_up_rate))
        target = max(target, math.floor(ready / self.max_scale_down_rate))
        target = max(ctx.replicas.min, min(ctx.replicas.max, target))
        if target > current:
            cause = Cause.PANIC if panicking else Cause.SCALE_UP
        elif target < current:
            cause = Cause.SCALE_DOWN
        else:
            cause = Cause.PANIC if panicking else Cause.STEADY
            head = f"{head}; holding {current}"
        d = _decision(ctx, target, cause, head, desired_stable, panic=panicking)
        return d, _after(base, ctx, d)


def kpa_desired(
    history: tuple[tuple[float, int], ...],
    now: float,
    stable_window_s: float,
    panic_window_s: float,
    per_pod: float,
) -> tuple[int, int, float, float]:
    """(desired stable, desired panic, mean stable concurrency, mean panic concurrency) from
    ``(t, concurrency)`` samples; a window without samples uses the latest one."""

    def mean(window: float) -> float:
        vals = [c for t, c in history if now - window < t <= now]
        if not vals:
            vals = [history[-1][1]] if history else [0]
        return sum(vals) / len(vals)

    stable, panic = mean(stable_window_s), mean(panic_window_s)
    per = max(per_pod, 1e-9)
    return _ceil(stable / per), _ceil(panic / per), stable, panic


@dataclass(frozen=True)
class Scheduled:
    """A pool size per slot of the day (see the module docstring)."""

    sizes: tuple[int, ...]
    slot_s: float = 3600.0
    lead_s: float = 60.0
    name: str = "scheduled"

    def __post_init__(self) -> None:
        if not self.sizes or any(n < 0 for n in self.sizes):
            raise ValueError("sizes: one size >= 0 per slot, at least one")
        if not self.slot_s > 0 or self.lead_s < 0:
            raise ValueError("slot_s must be > 0 and lead_s >= 0")

    def size_at(self, t: float) -> int:
        return self.sizes[int(max(0.0, t) // self.slot_s) % len(self.sizes)]

    def __call__(self, ctx: Context) -> tuple[Decision, PolicyState]:
        now = ctx.now
        slot = int(max(0.0, now) // self.slot_s) % len(self.sizes)
        raw = max(self.size_at(now), self.size_at(now + self.lead_s))
        target = max(ctx.replicas.min, min(ctx.replicas.max, raw))
        current = ctx.replicas.desired
        cause = (
            Cause.SCALE_UP
            if target > current
            else Cause.SCALE_DOWN
            if target < current
            else Cause.STEADY
        )
        head = f"scheduled: slot {slot} wants {raw}"
        if target == current:
            head = f"{head}; holding {current}"
        d = _decision(ctx, target, cause, head, raw)
        return d, _after(ctx.state, ctx, d)


#: name -> the policy with its default parameters (frozen values, read-only mapping)
BASELINES: Mapping[str, Hpa | Keda | Kpa] = MappingProxyType(
    {"hpa": Hpa(), "keda": Keda(), "kpa": Kpa()}
)
