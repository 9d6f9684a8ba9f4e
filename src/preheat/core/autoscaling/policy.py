"""``decide(ctx) -> (Decision, PolicyState)``: the autoscaling policy, pure.

The pipeline, each step a small module of its own:

1. freshness: missing or stale signals hold the current size (never scale on silence);
2. :mod:`~.recommend`: per objective the replicas it needs (a latency objective's step
   bounded by ``PolicyTuning.max_latency_factor``), the max over objectives;
   :mod:`~.capacity`: the pods the arrival rate and request mix need to meet the TTFT
   objectives by the engine's costs, combined with every objective's feedback
   (:func:`~.capacity.combine`: the model is the floor; a backlog's latency, queue and
   in-flight count ask for no more than the pods already coming or the model; feedback
   corrects the model only after a whole window late, to twice the model at most, and
   only where the histogram shows the percentile over its target: a reading inside the
   bucket that holds the target holds the pool, docs/proposals/0017);
   :mod:`~.forecast` (``autoscaling.predictive``, off by default): the estimate also sizes
   for the arrival rate forecast ``horizon`` ahead, acting on ``trust`` of a predicted rise
   (never on a predicted fall: the observed rate and the objectives keep what they need),
   and with ``headroom`` at least the forecast over one minus that percentile of its own
   shortfall (:func:`~.forecast.shortfall`: how far the rate a horizon later ran above it),
   or with ``headroom_keeps`` that many pods kept but none started for it;
   :mod:`~.demand`: what the routers refused is demand too (the served load times
   ``A / (A - R)``);
3. :mod:`~.panic`: far past a latency target -> scale up now, never down for a while;
4. :mod:`~.stabilize`: per-direction windows over the recommendation history (the part
   before the first evaluation holds the current size: after a restart that lost the
   history, and on a new pool, whose starting size holds for one scale-down window); with
   ``autoscaling.predictive`` on and a season learned, the scale-down window holds no more
   than the pods for the forecast's peak over the window ahead (:func:`_window_ahead`,
   docs/proposals/0019);
5. warming credit: what the pool is already converging to (``replicas.desired``, pods
   warming or being promoted) covers a recommendation computed from the serving pods;
6. :mod:`~.limits`: cooldowns, max step, bounds; :mod:`~.zero`: scale-to-zero and wake;
7. :mod:`~.standby`: how many to promote, start, demote, remove; the reason text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from preheat.core.autoscaling import (
    capacity,
    demand,
    forecast,
    limits,
    panic,
    recommend,
    stabilize,
    standby,
    zero,
)
from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.forecast import Forecast, Outlook
from preheat.core.autoscaling.types import (
    Cause,
    Context,
    Decision,
    Demand,
    Direction,
    Mix,
    PolicyState,
    Signals,
    SignalValue,
)
from preheat.core.pool import Objective, Signal

__all__ = ["decide", "missing_signals"]

#: the percentile of the forecast's own shortfall that bounds the scale-down window: the
#: window holds no more than the forecast's peak over the window ahead, over this
#: percentile of how far the rate has run above the forecast (or the pool's headroom
#: percentile, if higher)
AHEAD_SHORTFALL = 0.9


def missing_signals(ctx: Context) -> str:
    """Why the signals cannot be used ("" when they can)."""
    s = ctx.signals
    age_limit = ctx.tuning.stale_after_s
    if s.observed_at is None:
        return f"no metrics yet{_err(s)}"
    age = ctx.now - s.observed_at
    if s.stale or age > age_limit:
        return f"no fresh metrics for {age:.0f} s (source stale{_err(s, ': ')})"
    for obj in ctx.autoscaling.objectives:
        sv = s.find(obj)
        name = recommend.describe(obj, None).split(" ")[0]
        if obj.signal.is_latency:
            name = f"{obj.signal.value} p{obj.percentile:g}"
        if sv is None or sv.observed_at is None:
            return f"{name} missing from the metric source"
        if sv.stale or ctx.now - sv.observed_at > age_limit:
            return f"no fresh {name} for {ctx.now - sv.observed_at:.0f} s (stale)"
    return ""


def _err(s: Signals, sep: str = ": ") -> str:
    return f"{sep}{s.error}" if s.error else ""


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def _head(view: recommend.ObjectiveView | None, window_s: float, tolerance: float) -> str:
    """What drove the recommendation, in an SRE's words."""
    if view is None:
        return f"no requests over {window_s:g} s"
    obj = view.objective
    seen = recommend.describe(obj, view.value)
    target = recommend.describe_target(obj)
    if view.within_tolerance:
        return f"within tolerance: {seen} vs {target} ±{_pct(tolerance)}"
    if view.ratio is None:
        return f"{seen} (target {target})"
    op = ">" if view.ratio > 1 else "<" if view.ratio < 1 else "="
    over = f" over {window_s:g} s" if obj.signal.is_latency else ""
    return f"{seen} {op} {target}{over}"


def _hold(
    ctx: Context, cause: Cause, reason: str, state: PolicyState, rec: int | None = None
) -> tuple[Decision, PolicyState]:
    current = ctx.replicas.desired
    stand = standby.wanted(ctx.replicas, current)
    decision = Decision(
        active=current,
        standby=stand,
        previous=current,
        direction=Direction.HOLD,
        cause=cause,
        reason=reason,
        recommendation=rec,
        plan=standby.plan(ctx.counts, current, stand),
        signals=ctx.signals,
    )
    return decision, state


def decide(ctx: Context) -> tuple[Decision, PolicyState]:
    """One evaluation: the active and standby counts wanted now, why, and the next state.

    ``ctx`` is not changed; call again with the returned state on the next tick. The
    decision carries the arrival-rate forecast made at this evaluation (``forecast``; None
    when none was: no router figures, stale metrics), whether or not it acted.
    """
    cfg, current = ctx.autoscaling, ctx.replicas.desired
    if not cfg.objectives:
        return _hold(ctx, Cause.NO_OBJECTIVES, f"autoscaling off: {current} replicas", ctx.state)
    # 1. freshness: hold on silence, and silence is not idleness.
    why = missing_signals(ctx)
    if why:
        held = replace(ctx.state, idle_since=None)
        return _hold(ctx, Cause.STALE, f"holding {current}: {why}", held)
    predicted, forecast_state, outlook = _forecast(ctx)
    decision, state = _decide(ctx, predicted, forecast_state, outlook)
    return (decision if outlook is None else replace(decision, forecast=outlook)), state


def _decide(
    ctx: Context, predicted: float | None, forecast_state: Forecast | None, outlook: Outlook | None
) -> tuple[Decision, PolicyState]:
    """:func:`decide` past its holds on no objectives and silence, with the forecast made."""
    cfg, reps, counts, st, now = ctx.autoscaling, ctx.replicas, ctx.counts, ctx.state, ctx.now
    current = reps.desired

    # 2. per-objective recommendation, max over objectives.
    serving = counts.active
    observed: list[tuple[Objective, SignalValue]] = []
    for obj in cfg.objectives:
        sv = ctx.signals.find(obj)
        assert sv is not None  # missing_signals checked
        observed.append((obj, sv))

    # 3. panic: from the worse of the window and the short window.
    fired = panic.triggered(cfg.panic, observed)
    if fired is not None:
        observed = [
            (o, replace(sv, value=panic.worst(sv)) if o.signal.is_latency else sv)
            for o, sv in observed
        ]
    factor = ctx.tuning.max_latency_factor
    views = [recommend.view(o, sv, serving, current, cfg.tolerance, factor) for o, sv in observed]
    fed_back, _ = recommend.combine(views)  # the feedback alone
    inputs = _estimate_inputs(ctx)  # what every capacity estimate below reads
    sized = _with_capacity(ctx, inputs, views, serving, predicted)
    views, model_note, late_since = sized.views, sized.note, sized.late_since
    estimated = sized.estimated  # the estimate sized the routers' arrivals, refused included
    if fired is not None and late_since is not None and now - late_since >= cfg.window_s:
        # late for a whole window with the pods the estimate says the rate needs: the
        # feedback's correction is bounded by the estimate (capacity.combine), and panic
        # would add only its hold on scale-down, for good where more pods do not bring the
        # percentile down (a target under what the prompts' own prefill takes)
        fired = None
        calm = "late for a window with the pods the rate needs: no panic"
        model_note = f"{model_note}; {calm}" if model_note else calm
    panic_until = panic.panic_until(st.panic_until, now, cfg.panic, fired is not None)
    panicking = panic_until is not None and (fired is not None or now < panic_until)
    if predicted is not None and outlook is not None:
        said = outlook.describe()
        model_note = f"{model_note}; {said}" if model_note else said
    raw, driver = recommend.combine(views)
    # 2b. refused demand: what the window's pods served understates it by A / (A - R).
    seen = ctx.signals.demand
    served_log = st.serving
    if seen is not None:
        horizon = max(cfg.window_s, seen.window_s)
        served_log = demand.record(st.serving, now, serving, horizon)
    served_by = demand.served_by(served_log, now, seen.window_s) if seen is not None else 0.0
    refused = demand.view(seen, served_by, current, reps.max, cfg.tolerance, sized=estimated)
    # the refusals drive when they ask for more than the feedback and no less than the
    # capacity estimate (which sizes the same demand from its rate)
    refusals_drive = (
        refused is not None
        and refused.replicas is not None
        and not refused.within_tolerance
        and (fed_back is None or refused.replicas > fed_back)
        and (raw is None or refused.replicas >= raw)
    )
    if refused is not None and refused.replicas is not None:
        raw = refused.replicas if raw is None else max(raw, refused.replicas)
    rec = raw if raw is not None else 0  # no traffic anywhere: nothing asks for replicas
    # 2c. a headroom that keeps: the pods the forecast over its shortfall needs, up to the
    # pods the pool has (a scale-down stops there; nothing starts for it)
    kept = _kept(ctx, inputs, outlook, predicted)
    if kept is not None and min(kept, current) > rec:
        rec = min(kept, current)
        said = f"headroom keeps at least {rec} of {current}"
        model_note = f"{model_note}; {said}" if model_note else said

    idle_from = zero.idle_since(st.idle_since, now, ctx.signals)
    lowest = zero.lower_bound(reps.min, idle_from, now, ctx.tuning.scale_to_zero_delay_s)
    history = stabilize.record(st.history, now, rec, stabilize.horizon(cfg))
    since = st.since if st.since is not None else now
    base = replace(
        st,
        history=history,
        panic_until=panic_until,
        idle_since=idle_from,
        since=since,
        serving=served_log,
        forecast=forecast_state,
        late_since=late_since,
        cold_start_s=_cold_start(ctx),
    )
    head = _head(driver, cfg.window_s, cfg.tolerance)
    if model_note:
        head = f"{head}; {model_note}"
    if fired is not None:
        fobj, fval = fired
        head = (
            f"panic: {recommend.describe(fobj, fval)} >= {cfg.panic.threshold:g}x "
            f"{recommend.describe_target(fobj)}"
        )
        if model_note:  # what the estimate said stays in the reason
            head = f"{head}; {model_note}"
    if refused is not None:
        said = demand.describe(refused)
        if refusals_drive:
            rest = f"; {head}" if driver is not None or fired is not None else ""
            head = f"{said}: needs {refused.replicas} to serve all of it{rest}"
        elif refused.within_tolerance:
            sizes = ": the capacity estimate counts it" if estimated else ""
            head = f"{head}; {said} (within tolerance ±{_pct(cfg.tolerance)}{sizes})"
        else:
            head = f"{head}; {said}"

    # 6a. at zero: wake on demand, else stay.
    if current == 0:
        if not zero.has_demand(ctx.signals):
            return _hold(ctx, Cause.IDLE, "at zero: no requests", base, rec)
        target = limits.bounded(max(rec, 1, reps.min), 1, reps.max)
        target = limits.step_limited(0, target, cfg)
        return _scale(ctx, base, target, Cause.WAKE, "requests arrived at zero; waking", rec)

    # 4. stabilization (panic: the latest recommendation, up only); the forecast bounds
    # what the scale-down window holds, read only where the window holds more than the
    # latest recommendation and does not scale up (the bound is never below ``rec``)
    held = stabilize.stabilized(history, now, current, cfg, since=since)
    bounds = rec < held <= current
    ahead = _window_ahead(ctx, inputs, forecast_state, outlook, rec) if bounds else None
    target = stabilize.ceiled(held, current, ahead.replicas if ahead is not None else None)
    if ahead is not None and target < held:
        head = f"{head}; {ahead.describe()}"
    if panicking:
        target = max(current, rec if fired is not None else target)
    target = limits.bounded(target, lowest, reps.max)

    if target > current:
        # 6b. cooldown (panic bypasses it), max step.
        wait = limits.cooldown_left(st, now, cfg, up=True)
        if wait > 0 and not panicking:
            msg = f"{head}; holding {current}: scale-up cooldown ({wait:.0f} s left)"
            return _hold(ctx, Cause.COOLDOWN, msg, base, rec)
        target = limits.step_limited(current, target, cfg)
        cause = Cause.PANIC if panicking else Cause.SCALE_UP
        return _scale(ctx, base, target, cause, head, rec)

    if target < current:
        if panicking:
            msg = f"{head}; holding {current}: panic mode (no scale-down until it ends)"
            return _hold(ctx, Cause.PANIC, msg, base, rec)
        wait = limits.cooldown_left(st, now, cfg, up=False)
        if wait > 0:
            msg = f"{head}; holding {current}: scale-down cooldown ({wait:.0f} s left)"
            return _hold(ctx, Cause.COOLDOWN, msg, base, rec)
        target = limits.step_limited(current, target, cfg)
        cause = Cause.SCALE_TO_ZERO if target == 0 else Cause.SCALE_DOWN
        if target == 0:
            idle_for = now - (idle_from if idle_from is not None else now)
            head = f"idle for {idle_for:.0f} s (no requests); scaling to zero"
        return _scale(ctx, base, target, cause, head, rec)

    # hold: say what kept it.
    # the window's unseen part alone kept it (what was seen would have scaled down)
    unseen_hold = stabilize.unseen(now, since, cfg) and (
        stabilize.down_recommendation(history, now, cfg) < current
    )
    cause, reason = _why_hold(ctx, rec, raw, driver, head, panicking, lowest, unseen_hold)
    return _hold(ctx, cause, reason, base, rec)


def _forecast(ctx: Context) -> tuple[float | None, Forecast | None, Outlook | None]:
    """The arrival-rate forecast: (the rate to size for, None unless
    ``autoscaling.predictive`` is on; the forecast's next state; what it says now).

    It is kept whether or not it acts (its figures go to the decision and the metrics), so
    an SRE sees how far off it would have been before turning it on."""
    pred = ctx.autoscaling.predictive
    seen = ctx.signals.demand
    if seen is None:
        return None, ctx.state.forecast, None
    hw = ctx.tuning.smoothing(pred)
    horizon, basis = _horizon(ctx, seen)
    f = forecast.observe(ctx.state.forecast, ctx.now, seen.arrival_rate, hw)
    f, outlook = forecast.ahead(f, horizon, hw)
    outlook = replace(outlook, basis=basis, headroom=_headroom(ctx, f), keeps=_keeps(ctx))
    if not pred.enabled:
        return None, f, outlook
    now_rate = seen.arrival_rate
    rate = now_rate + pred.trust * max(0.0, outlook.rate - now_rate)
    room = outlook.with_headroom()
    if room is not None and not outlook.keeps:
        rate = max(rate, room)
    return rate, f, outlook


def _headroom(ctx: Context, f: Forecast) -> tuple[float, float] | None:
    """``autoscaling.predictive.headroom``'s percentile and the forecast's shortfall read
    there (None: no headroom set, or too few predictions checked yet)."""
    q = ctx.autoscaling.predictive.headroom
    s = forecast.shortfall(f, q / 100.0) if q > 0 else None
    return None if s is None else (q, s)


def _keeps(ctx: Context) -> bool:
    """Whether the headroom only keeps pods (``autoscaling.predictive.headroomMode: keep``)."""
    return ctx.autoscaling.predictive.headroom_keeps


def _cold_start(ctx: Context) -> float | None:
    """The pool's measured cold start: its pods' now, else the last one measured (the pods
    that measured it may have left, and pods warm from the start measure none)."""
    now = ctx.counts.cold_start_s
    return now if now is not None else ctx.state.cold_start_s


def _horizon(ctx: Context, seen: Demand) -> tuple[float, str]:
    """How far ahead the forecast looks, and what set it when the pool's configuration
    did not ("": it did, or nothing was measured and the default holds).

    Measured (``autoscaling.predictive.horizon`` unset): the pods' cold start, plus the
    evaluation interval (the pods asked for now serve until those the next evaluation asks
    for arrive, a cold start after it) and half the demand window (the observed rate is
    the window's mean, so the forecast's level is about half a window old). Until
    2026-12-02 it was the cold start alone, which sized a climb for the rate half a window
    and an interval short of what came (docs/proposals/0018)."""
    pred = ctx.autoscaling.predictive
    cold = _cold_start(ctx)
    if not pred.horizon_measured or cold is None:
        return pred.horizon(cold), ""
    last = ctx.state.forecast
    # the time since the last evaluation stands for the time to the next one, up to a
    # window (after a restart or a gap in the metrics the last one says nothing of it)
    interval = max(0.0, ctx.now - last.t) if last is not None else 0.0
    interval = min(interval, seen.window_s)
    lag = seen.window_s / 2.0
    basis = f"the pods' cold start {round(cold, 1):g} s"
    if interval > 0:
        basis = f"{basis} + {round(interval, 1):g} s to the next evaluation"
    basis = f"{basis} + {round(lag, 1):g} s the window's lag"
    return cold + interval + lag, basis


@dataclass(frozen=True)
class _Ahead:
    """The most the scale-down window may hold: the pods for the forecast's peak over the
    window ahead."""

    replicas: int
    peak: float  # req/s: the forecast's highest over the window ahead
    within_s: float  # how far ahead it was read
    q: float  # the percentile of the forecast's shortfall read (0-1)
    shortfall: float  # the shortfall read there
    rate: float  # req/s: what was sized for (the peak over the shortfall, at least the rate)

    def describe(self) -> str:
        return (
            f"the forecast's peak over the next {round(self.within_s, 1):g} s "
            f"{self.peak:.1f} req/s, over its p{self.q * 100:g} shortfall "
            f"{self.shortfall * 100:.0f}%: {self.rate:.1f} req/s needs {self.replicas}, "
            "the scale-down window holds no more"
        )


def _window_ahead(
    ctx: Context, inputs: _Inputs | None, f: Forecast | None, outlook: Outlook | None, rec: int
) -> _Ahead | None:
    """With ``autoscaling.predictive`` on, the most the scale-down window may hold: the
    pods the capacity estimate sizes for the highest rate the forecast predicts over the
    window ahead (as long as the scale-down window, and at least the horizon), over the
    :data:`AHEAD_SHORTFALL` percentile of its own shortfall (or the pool's ``headroom``
    percentile, if higher), and no fewer than ``rec``.

    The window holds the highest recommendation of the last ``scaleDown.stabilization``
    seconds against demand that comes back before a new pod could serve it; the forecast,
    as far as its own record says it can be believed, says whether it comes back: a
    forecast that has often run short holds about what the window held. It is read in full
    (not ``trust`` of it): it limits what is held, and trusting it less would shed more.
    None (the window holds as it does without a forecast): predictive off, no season learned
    yet (a level and a trend know no more of the window ahead than the window behind does),
    too few of its predictions checked to read a shortfall, or no estimate (no cost model,
    request mix or arrival rate)."""
    pred = ctx.autoscaling.predictive
    if not pred.enabled or f is None or outlook is None:
        return None
    hw = ctx.tuning.smoothing(pred)
    if not forecast.seasonal(f, hw) or inputs is None:
        return None
    q = max(AHEAD_SHORTFALL, pred.headroom / 100.0)
    short = forecast.shortfall(f, q)
    if short is None:
        return None
    within = max(ctx.autoscaling.scale_down.stabilization_s, outlook.horizon_s)
    top = forecast.peak(f, within, hw)
    rate = max(inputs.seen.arrival_rate, top / (1.0 - short))
    model, _ = _ttft_model(ctx, inputs, rate)
    if model is None:
        return None
    return _Ahead(max(model, rec), top, within, q, short, rate)


@dataclass(frozen=True)
class _Inputs:
    """What a capacity estimate reads: the cost model, the window's request mix and the
    routers' demand."""

    cost: ServiceCost
    mix: Mix
    seen: Demand

    @property
    def burst(self) -> float:
        """The arrivals' mean burst size over the demand window."""
        return capacity.burst_size(self.seen.arrival_dispersion, self.seen.window_s)


def _estimate_inputs(ctx: Context) -> _Inputs | None:
    """What a capacity estimate reads (None when one is missing or nothing arrived)."""
    cost, mix, seen = ctx.tuning.cost, ctx.signals.mix, ctx.signals.demand
    if cost is None or mix is None or seen is None or seen.arrival_rate <= 0:
        return None
    return _Inputs(cost, mix, seen)


@dataclass(frozen=True)
class _Sized:
    """What :func:`_with_capacity` made of the objectives' views."""

    views: list[recommend.ObjectiveView]  # each objective's replicas, the estimate combined in
    note: str  # what the estimate said ("": none made)
    late_since: float | None  # the next ``PolicyState.late_since``
    estimated: bool  # whether an estimate was made (it sized the routers' arrivals)


def _with_capacity(
    ctx: Context,
    inputs: _Inputs | None,
    views: list[recommend.ObjectiveView],
    serving: int,
    predicted: float | None = None,
) -> _Sized:
    """Every objective's replicas with the capacity estimate combined in
    (:func:`capacity.combine`), what the estimate said and the next
    ``PolicyState.late_since``; none is made without a cost model, an arrival rate, finished
    requests to read the mix from, or a TTFT objective. ``predicted``: the rate the
    forecast asks to size for (at least the observed one).

    The estimate is the pods the rate needs to meet the TTFT objectives (the largest over
    them); the queue, concurrency and other latency objectives are bounded by it the same
    way, since a backlog inflates them all alike."""
    if inputs is None:
        return _Sized(views, "", None, estimated=False)
    cost, mix, seen, burst = inputs.cost, inputs.mix, inputs.seen, inputs.burst
    rate = max(seen.arrival_rate, predicted or 0.0)
    desired, tol = ctx.replicas.desired, ctx.autoscaling.tolerance
    model, floors = _ttft_model(ctx, inputs, rate)
    if model is None:
        return _Sized(views, "", None, estimated=False)
    # each objective's model: the TTFT estimate, and for a concurrency objective the pods
    # that keep what a pod runs at this rate within its target (a target below that is
    # sized for, not read as lateness the estimate does not explain)
    models = [
        _objective_model(v.objective, model, rate, cost, mix, ctx.replicas.max, burst)
        for v in views
    ]
    late = [v.ratio is not None and v.ratio > 1.0 + tol for v in views]
    under = [v.ratio is not None and v.ratio <= 1.0 for v in views]
    coming = [desired > serving and desired >= m for m in models]
    # late although its model says the serving pods suffice (and none are coming)
    unexplained_at = [
        is_late and not c and m <= serving
        for is_late, c, m in zip(late, coming, models, strict=True)
    ]
    unexplained = any(unexplained_at)
    since = ctx.state.late_since if unexplained else None
    if unexplained and since is None:
        since = ctx.now
    # a latency percentile with enough observations beyond it is not one or two slow
    # requests: the estimate is corrected now, not a window later (a climb does not wait)
    sure = any(
        u and _tail_observed(ctx, v.objective) >= SURE_TAIL
        for v, u in zip(views, unexplained_at, strict=True)
    )
    # a window's wait corrects only lateness the histogram shows: a percentile read inside
    # the bucket that holds the target may lie under it wherever interpolation put it, and
    # that reading does not pass with time (a few long prompts' own prefill in every window)
    shown = any(
        u and _shown_late(ctx, v.objective) for v, u in zip(views, unexplained_at, strict=True)
    )
    waited = ctx.now - since >= ctx.autoscaling.window_s if since is not None else False
    persistent = since is not None and (sure or (shown and waited))
    out = [
        replace(
            v,
            replicas=capacity.combine(
                m,
                v.replicas,
                serving=serving,
                desired=desired,
                late=is_late,
                persistent=persistent,
                under=is_under,
            ),
        )
        for v, m, is_late, is_under in zip(views, models, late, under, strict=True)
    ]
    batches = capacity.bursts_said(seen.arrival_dispersion, seen.window_s)
    bursts = f" in {batches}" if batches else ""
    note = (
        f"capacity: {rate:.1f} req/s{bursts} of {mix.prompt_tokens:.0f} prompt "
        f"({mix.cached_tokens:.0f} cached) / {mix.output_tokens:.0f} output tokens "
        f"needs {model}"
    )
    for said in floors:
        note = f"{note} ({said})"
    for v, m in zip(views, models, strict=True):
        if m > model:
            runs = capacity.in_flight(cost, mix, rate, model, burst)
            note = (
                f"{note}; concurrency {v.objective.target:g}/replica is under the {runs:.0f} "
                f"a pod runs at this rate: needs {m}"
            )
    if unexplained and not persistent and waited:
        unexplained_objs = [v.objective for v, u in zip(views, unexplained_at, strict=True) if u]
        note = f"{note}; late with {serving} serving, more than the rate needs: " + _unshown(
            ctx, unexplained_objs
        )
    elif unexplained and not persistent:
        note = f"{note}; late with {serving} serving, more than the rate needs: waiting a window"
    elif since is not None and sure and not waited:
        note = f"{note}; late with {serving} serving over {SURE_TAIL:g}+ slow requests: corrected"
    return _Sized(out, note, since, estimated=True)


def _ttft_model(ctx: Context, inputs: _Inputs, rate: float) -> tuple[int | None, list[str]]:
    """The pods ``rate`` needs to meet every TTFT objective (the largest; None without one),
    and for each target under what an idle pod does at this mix, a note that it was sized
    for what one does."""
    model: int | None = None
    floors: list[str] = []
    for obj in ctx.autoscaling.objectives:
        if obj.signal is not Signal.TTFT:
            continue
        goal = capacity.reachable_ms(
            inputs.cost, inputs.mix, obj.target, obj.percentile, ctx.autoscaling.tolerance
        )
        if goal > obj.target:
            floors.append(
                f"ttft p{obj.percentile:g} {obj.target:g} ms is under what an idle pod "
                f"does at this mix: sized for {goal:.0f} ms"
            )
        need = capacity.replicas_for(
            rate, inputs.cost, inputs.mix, goal, obj.percentile, ctx.replicas.max, inputs.burst
        )
        if need is not None:
            model = need if model is None else max(model, need)
    return model, floors


def _kept(
    ctx: Context, inputs: _Inputs | None, outlook: Outlook | None, predicted: float | None
) -> int | None:
    """With ``autoscaling.predictive.headroom`` keeping (``headroom_keeps``, predictive on and
    a shortfall read): the pods the forecast over its shortfall needs (the capacity
    estimate at that rate, at least ``predicted``); else None."""
    room = None if outlook is None else outlook.with_headroom()
    if not ctx.autoscaling.predictive.enabled or not _keeps(ctx) or room is None:
        return None
    if inputs is None:
        return None
    return _ttft_model(ctx, inputs, max(room, predicted or 0.0))[0]


#: Observations beyond a late latency percentile that make the reading sure, not noise (a
#: p99 over 200 requests is its 2 slowest; over 1,000, its 10 slowest).
SURE_TAIL = 10.0


def _shown_late(ctx: Context, obj: Objective) -> bool:
    """Whether a latency objective's reading lies in a bucket wholly over its target (the
    bucket's lower edge at or over it), so that the histogram shows the percentile late;
    True when the bucket is not known, and for other signals."""
    sv = ctx.signals.find(obj)
    return sv is None or sv.floor is None or sv.floor >= obj.target


def _unshown(ctx: Context, objectives: list[Objective]) -> str:
    """Why a late reading a window old did not correct the estimate: each of
    ``objectives`` (those late beyond what the estimate explains) read inside the bucket
    that holds its target, with that bucket."""
    said: list[str] = []
    for obj in objectives:
        sv = ctx.signals.find(obj)
        if _shown_late(ctx, obj) or sv is None or sv.floor is None or sv.value is None:
            continue
        if sv.value <= obj.target:
            continue
        said.append(
            f"{recommend.describe(obj, sv.value)} was read in the bucket over "
            f"{sv.floor:g} ms that holds {obj.target:g} ms"
        )
    shown = "; ".join(said) if said else "the histogram does not show it"
    return f"{shown}: not shown late, sized by the estimate"


def _tail_observed(ctx: Context, obj: Objective) -> float:
    """How many of the window's observations lie beyond a latency objective's percentile
    (0 for other signals)."""
    if not obj.signal.is_latency:
        return 0.0
    sv = ctx.signals.find(obj)
    return 0.0 if sv is None else sv.samples * (1.0 - obj.percentile / 100.0)


def _objective_model(
    obj: Objective,
    model: int,
    rate: float,
    cost: ServiceCost,
    mix: Mix,
    highest: int,
    burst: float = 1.0,
) -> int:
    """The capacity estimate for one objective: the TTFT estimate, or for a concurrency
    objective the pods (no fewer) each running at most its target at ``rate``."""
    if obj.signal is not Signal.CONCURRENCY:
        return model
    need = capacity.replicas_for_concurrency(rate, cost, mix, obj.target, model, highest, burst)
    return model if need is None else need


def _why_hold(
    ctx: Context,
    rec: int,
    raw: int | None,
    driver: recommend.ObjectiveView | None,
    head: str,
    panicking: bool,
    lowest: int,
    unseen_hold: bool,
) -> tuple[Cause, str]:
    current, serving = ctx.replicas.desired, ctx.counts.active
    if rec > current and current >= ctx.replicas.max:
        return Cause.BOUNDS, f"{head}; holding {current}: at max"
    if rec < current and current <= lowest:
        return Cause.BOUNDS, f"{head}; holding {current}: at min"
    if panicking and rec < current:
        return Cause.PANIC, f"{head}; holding {current}: panic mode (no scale-down until it ends)"
    if rec > current:
        return Cause.STABILIZING, f"{head}; holding {current}: needs {rec}, stabilizing (up)"
    if rec < current and unseen_hold:
        window = ctx.autoscaling.scale_down.stabilization_s
        return Cause.STABILIZING, (
            f"{head}; holding {current}: needs {rec}, stabilizing (down; the {window:g} s "
            "window began at start-up)"
        )
    if rec < current:
        return Cause.STABILIZING, f"{head}; holding {current}: needs {rec}, stabilizing (down)"
    if driver is not None and driver.within_tolerance:
        return Cause.WITHIN_TOLERANCE, head
    if serving < current and raw is not None and raw > serving:
        coming = current - serving
        return Cause.WARMING, (
            f"{head}; needs {rec}, {current} on the way ({serving} serving, "
            f"{coming} warming or promoting): holding {current}"
        )
    return Cause.STEADY, f"{head}; holding {current}"


def _scale(
    ctx: Context, base: PolicyState, target: int, cause: Cause, head: str, rec: int
) -> tuple[Decision, PolicyState]:
    current = ctx.replicas.desired
    if target == current:
        return _hold(ctx, Cause.BOUNDS, f"{head}; holding {current}", base, rec)
    stand = standby.wanted(ctx.replicas, target)
    p = standby.plan(ctx.counts, target, stand)
    delta = target - current
    direction = Direction.UP if delta > 0 else Direction.DOWN
    credit = ""
    if delta > 0 and ctx.counts.active < current:
        credit = f" ({current - ctx.counts.active} warming counted)"
    reason = f"{head}; {standby.describe(delta, p)}{credit}"
    decision = Decision(
        active=target,
        standby=stand,
        previous=current,
        direction=direction,
        cause=cause,
        reason=reason,
        recommendation=rec,
        plan=p,
        signals=ctx.signals,
        panic=cause is Cause.PANIC,
        wake=cause is Cause.WAKE,
    )
    state = replace(base, last_scale_at=ctx.now, last_direction=direction)
    return decision, state
