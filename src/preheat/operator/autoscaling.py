"""The operator as a driver of :func:`preheat.core.control.step`: one evaluation of a pool
(every ``interval_s``, from the ``autoscale`` daemon in :mod:`~preheat.operator.handlers`).

Observe (signals from ``AutoscalerOptions.source_for``, pods from kopf's index), step, act:
patch ``spec.replicas.desired`` when the target changes (the level-based reconcile does the
roles and the Deployment), then :func:`~preheat.operator.conditions.report`. State is in
memory; a ``kubectl scale`` (a desired we did not write) is where the policy goes on from.
What the scale-down window and the cooldowns need is also kept in the pool's
``status.policyHistory`` (:mod:`~preheat.operator.policy_history`) and read back at a pool's
first evaluation after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from preheat.api.pool import PoolSpecError, to_config
from preheat.autoscaler.describe import signals_seen
from preheat.autoscaler.source import MetricSource
from preheat.core.autoscaling import Cause, Decision
from preheat.core.autoscaling.memory import remember, restore
from preheat.core.control import ControlState, signal_query, step, tally
from preheat.core.pool import AutoscalingConfig
from preheat.operator import conditions, policy_history, tracing
from preheat.operator.kube import POOLS
from preheat.operator.metrics import AutoscalerMetrics
from preheat.operator.observe import observation, ready_targets
from preheat.operator.options import AutoscalerOptions, PoolTarget
from preheat.operator.reconciler import Reconciler
from preheat.process.tracing import Tracing

log = logging.getLogger(__name__)

PodsReader = Callable[[], Sequence[Mapping[str, Any]]]


@dataclass
class PoolLoop:
    """One pool's autoscaler state, in memory."""

    control: ControlState = field(default_factory=ControlState)
    source: MetricSource | None = None
    stale: bool = False
    written: tuple[str, int] | None = None  # our last write: (resourceVersion before, desired)
    restored: bool = False  # status.policyHistory was read (once, before the first step)
    remembered: dict[str, Any] | None = None  # the status.policyHistory we last wrote


#: a change of the wall clock against the policy's clock taken as a step of the wall clock
#: (an NTP correction), not as the jitter of reading two clocks one after the other
WALL_STEP_S = 1.0


@dataclass
class Autoscaler:
    options: AutoscalerOptions
    metrics: AutoscalerMetrics
    pools: dict[tuple[str, str], PoolLoop] = field(default_factory=dict)
    closing: bool = False  # the operator is stopping (its API client may be closed)
    tracing: Tracing | None = None  # operator.autoscale spans (--tracing)
    wall_offset: float | None = None  # this process's wall clock - policy clock (_wall)

    def _wall(self, now: float) -> float:
        """The wall clock at ``now`` (the policy's clock), from one offset kept for this
        process. The two clocks are read one after the other, so each reading of their
        difference is off by the gap between the reads (milliseconds on a busy machine): a
        fresh one at every evaluation moved every remembered time by that much (a status
        patch for nothing; the forecast's ``since`` 2 ms off after a restart, a CI failure).
        A wall-clock step past :data:`WALL_STEP_S` (NTP) is taken up."""
        measured = self.options.wall_clock() - now
        if self.wall_offset is None or abs(measured - self.wall_offset) > WALL_STEP_S:
            self.wall_offset = measured
        return now + self.wall_offset

    async def evaluate(
        self, reconciler: Reconciler, pool: Mapping[str, Any], pods: PodsReader, loop: PoolLoop
    ) -> Decision | None:
        """One evaluation of one pool; None when it has no objectives (or a bad spec)."""
        start_ns = tracing.started(self.tracing)
        meta = pool.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if meta.get("deletionTimestamp"):
            return None
        try:
            config = to_config(pool.get("spec") or {}, name=name, namespace=namespace)
        except PoolSpecError:
            return None  # the reconcile reports it (Degraded)
        if not config.autoscaling.objectives:
            if loop.source is not None:
                await loop.source.close()
            loop.source, loop.control, loop.stale = None, ControlState(), False
            loop.restored = False
            return None
        if loop.source is None:
            target = PoolTarget(namespace, name, lambda: ready_targets(pods()))
            loop.source = self.options.source_for(target)
        signals = await loop.source.read(signal_query(config.autoscaling))
        current = config.replicas.desired
        if loop.written is not None and str(meta.get("resourceVersion")) == loop.written[0]:
            current = loop.written[1]  # the body predates our own last write
        else:
            loop.written = None
        ours = loop.control.decided
        if ours is not None and current != ours:
            log.info("autoscaler_manual_scale pool=%s/%s desired=%d (ours was %d): honoured",
                     namespace, name, current, ours)  # fmt: skip
        now = self.options.clock()
        wall = self._wall(now)
        if not loop.restored:
            loop.restored = True
            self._restore(loop, pool, config.autoscaling, now, wall)
        obs = observation(config, pods(), now=now, desired=current, signals=signals)
        decision, _, loop.control = step(obs, loop.control, tuning=self.options.tuning)
        assert decision is not None
        active, stale = tally(obs.pods).active, decision.cause is Cause.STALE
        seen = signals_seen(config.autoscaling, decision.signals)
        self.metrics.observe(namespace, name, desired=decision.active, current=active,
                             cause=decision.cause.value, stale=stale, signals=seen,
                             forecast=decision.forecast)  # fmt: skip
        tracing.autoscaled(self.tracing, namespace, name, decision, current=current,
                           active=active, signals=seen, start_ns=start_ns)  # fmt: skip
        if decision.active != current:
            patch = {"spec": {"replicas": {"desired": decision.active}}}
            await reconciler.kube.patch(POOLS, namespace, name, patch)
            loop.written = (str(meta.get("resourceVersion")), decision.active)
        memory = remember(loop.control.policy, now, wall, config.autoscaling)
        kept = None if memory is None else policy_history.to_status(memory)
        extra = {policy_history.FIELD: kept} if kept is not None and kept != loop.remembered else {}
        await conditions.report(reconciler, pool, decision, config.autoscaling, current=current,
                                active=active, was_stale=loop.stale, extra=extra)  # fmt: skip
        if extra:
            loop.remembered = kept
        loop.stale = stale
        return decision

    def _restore(
        self,
        loop: PoolLoop,
        pool: Mapping[str, Any],
        config: AutoscalingConfig,
        now: float,
        wall: float,
    ) -> None:
        """A pool's first evaluation in this process: the policy goes on from the history
        its status kept (the scale-down window and cooldowns a restart would lose, and the
        arrival-rate forecast with its season). Without
        one, the pool holds its size for a window, a new pool as a restarted one (proposal
        0007)."""
        if loop.control.decided is not None:
            return
        memory = policy_history.from_status(pool.get("status"))
        if memory is None:
            return
        hw = self.options.tuning.holt_winters
        policy = restore(loop.control.policy, memory, now, wall, config, hw)
        if policy is loop.control.policy:  # nothing remembered is still in the windows
            return
        loop.control = replace(loop.control, policy=policy)
        meta = pool.get("metadata") or {}
        f = policy.forecast
        log.info("autoscaler_history_restored pool=%s/%s recommendations=%d since_s=%.0f "
                 "forecast_since_s=%s",
                 meta.get("namespace"), meta.get("name"), len(policy.history),
                 now - (policy.since if policy.since is not None else now),
                 "none" if f is None else f"{now - f.since:.0f}")  # fmt: skip


__all__ = ["Autoscaler", "PoolLoop"]
