"""The least GPU-time any policy can spend on a trace under a pool's scaling rules.

A hindsight bound for the autoscaling comparison (docs/benchmarks.md, *Diurnal*): a policy
that knows, at every evaluation, exactly how many pods the rate of the next step needs
(``ceil(rate / per_pod)``), whose new pods are ready at once, and that still goes through
the pool's own stabilization windows, cooldowns and step limits, the same functions the
policy uses (``preheat.core.autoscaling.stabilize`` and ``limits``). No real policy spends
less: it also reads the rate late and waits for cold starts.

It says what a target is possible at all: on a day replayed 60 times faster, the
scale-down window (300 s) spans five hours of the day, and even this bound holds a peak's
pods long after it.

    python -m preheat.bench.hindsight_bound TRACE --pool POOL --per-pod 19.8 --fixed 16
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preheat.core.autoscaling import limits, stabilize
from preheat.core.autoscaling.types import PolicyState
from preheat.core.pool import AutoscalingConfig
from preheat.simulate.options import pool_config, read_pool
from preheat.workload.traces import load_trace

__all__ = ["Bound", "bound", "needs"]


@dataclass(frozen=True)
class Bound:
    """Pod-seconds: at the need of every step (no rules), and through the pool's rules."""

    ideal_pod_s: float
    ruled_pod_s: float
    seconds: float
    peak_need: int


def needs(arrivals_s: Sequence[float], per_pod: float, step_s: float) -> list[int]:
    """Pods each ``step_s`` of the arrivals needs at ``per_pod`` req/s (at least 1)."""
    if per_pod <= 0 or step_s <= 0:
        raise ValueError("per_pod and step_s must be > 0")
    if not arrivals_s:
        return []
    counts = [0] * (int(max(arrivals_s) // step_s) + 1)
    for t in arrivals_s:
        counts[int(t // step_s)] += 1
    return [max(1, math.ceil(round(c / step_s / per_pod, 9))) for c in counts]


def bound(need: Sequence[int], step_s: float, cfg: AutoscalingConfig, start: int) -> Bound:
    """Pod-seconds of a pool starting at ``start`` pods that is told each step's need at
    the step's start and moves towards it through ``cfg``'s stabilization windows,
    cooldowns and step limits (one evaluation per step)."""
    state = PolicyState()
    current, ruled = start, 0.0
    horizon = stabilize.horizon(cfg)
    for i, n in enumerate(need):
        now = i * step_s
        history = stabilize.record(state.history, now, n, horizon)
        target = stabilize.stabilized(history, now, current, cfg)
        scaled_at = state.last_scale_at
        if target != current and limits.cooldown_left(state, now, cfg, target > current) <= 0:
            current, scaled_at = limits.step_limited(current, target, cfg), now
        state = PolicyState(history=history, last_scale_at=scaled_at)
        ruled += current * step_s
    return Bound(
        ideal_pod_s=sum(need) * step_s,
        ruled_pod_s=ruled,
        seconds=len(need) * step_s,
        peak_need=max(need, default=0),
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m preheat.bench.hindsight_bound",
        description="The least GPU-hours a policy that knows each step's need spends on a "
        "trace through a pool's stabilization windows, cooldowns and step limits.",
    )
    ap.add_argument("trace", type=Path)
    ap.add_argument("--pool", type=Path, required=True, help="the pool file (its autoscaling)")
    ap.add_argument(
        "--per-pod", type=float, required=True, help="req/s one pod takes within the SLO"
    )
    ap.add_argument("--step-s", type=float, default=15.0, help="evaluation interval (s)")
    ap.add_argument("--start", type=int, default=0, help="pods at t=0 (0: the first need)")
    ap.add_argument("--fixed", type=int, default=0, help="a fixed pool's size to compare with")
    args = ap.parse_args(argv)
    cfg = pool_config(read_pool(args.pool))
    need = needs([r.arrival_s for r in load_trace(args.trace)], args.per_pod, args.step_s)
    if not need:
        ap.error(f"{args.trace}: no requests")
    b = bound(need, args.step_s, cfg.autoscaling, args.start or need[0])
    fixed = args.fixed * b.seconds
    print(
        f"{len(need)} steps of {args.step_s:g} s, peak need {b.peak_need} pods at "
        f"{args.per_pod:g} req/s each"
    )
    for label, pod_s in (("every step's need", b.ideal_pod_s), ("the pool's rules", b.ruled_pod_s)):
        ratio = f", {pod_s / fixed:.2f}x {args.fixed} fixed pods" if fixed else ""
        print(f"  {label}: {pod_s / 3600:.2f} GPU-h{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
