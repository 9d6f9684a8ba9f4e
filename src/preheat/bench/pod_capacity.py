"""What one simulated pod serves: the highest Poisson arrival rate whose TTFT percentile
meets a target, measured on the sim engine itself (``SimCore``, the cost model the
simulator runs), for a trace's request sizes.

The autoscaler's capacity estimate (``preheat.core.autoscaling.capacity.pod_rate``) is a
formula on the mean request; this is the measurement it is held against
(``tests/bench/test_pod_capacity.py``; docs/proposals/0014).

The trace's requests are replayed in their own order (so a conversation's turns keep
their prefix-cache hits) with Poisson arrivals at the rate under test, on one pod with the
simulator's default engine shape; the first ``warmup_s`` seconds are not measured.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from preheat.core.autoscaling.capacity import pod_rate
from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.types import Mix
from preheat.engine.base import EngineRequest, Sampling
from preheat.engine.costmodel import CostModel
from preheat.engine.sim import SimConfig
from preheat.engine.simcore import Finish, SimCore, TokenRun
from preheat.simulate.prompts import BlockNamer
from preheat.workload.traces import TraceOptions, TraceRequest, load_trace

__all__ = ["PodRun", "main", "run_pod", "saturating_rate"]


@dataclass(frozen=True)
class PodRun:
    """One run of a pod at ``rate`` req/s: the TTFT percentile (ms) of the measured
    requests (inf: some never got a first token in the run) and the mean request the
    autoscaler would observe (prompt, cached and output tokens)."""

    rate: float
    ttft_ms: float
    requests: int
    prompt_tokens: float
    cached_tokens: float
    output_tokens: float


def run_pod(
    trace: Sequence[TraceRequest],
    rate: float,
    *,
    seconds: float = 120.0,
    warmup_s: float = 20.0,
    percentile: float = 99.0,
    seed: int = 0,
    cost: CostModel | None = None,
    pods: int = 1,
    burst: float = 1.0,
) -> PodRun:
    """Replay ``trace``'s requests (from the first, wrapping around) at ``rate`` req/s per
    pod, Poisson, for ``seconds`` on ``pods`` simulated pods; TTFT percentile of those
    arriving after ``warmup_s``. With several pods each request goes to the pod with the
    fewest waiting requests, then the fewest running (a stand-in for the router's least
    predicted TTFT). ``burst`` > 1: the requests arrive in batches at one instant, batches
    Poisson at ``rate / burst``, their sizes geometric with mean ``burst`` (the capacity
    estimate's model of over-dispersed arrivals, ``capacity.sojourn_ms``)."""
    if rate <= 0 or seconds <= warmup_s or not trace or pods < 1 or burst < 1:
        raise ValueError(
            "rate > 0, seconds > warmup_s, pods >= 1, burst >= 1 and a non-empty trace are needed"
        )
    sim = SimConfig()
    cores = [SimCore(sim.core_config(), cost or CostModel.default()) for _ in range(pods)]
    namer = BlockNamer(sim.block_size)
    rng = random.Random(seed)
    arrivals: dict[str, float] = {}
    firsts: dict[str, float] = {}
    measured: list[str] = []
    sizes: dict[str, tuple[int, int]] = {}
    cached: dict[str, int] = {}
    t, i, left = 0.0, 0, 0
    while True:
        if left <= 0:  # the next batch: its time and size (geometric, mean ``burst``)
            t += rng.expovariate(rate * pods / burst)
            left = 1
            while rng.random() > 1.0 / burst:
                left += 1
        left -= 1
        if t >= seconds:
            break
        req = trace[i % len(trace)]
        rid = f"r{i}"
        i += 1
        if pods > 1:
            for c in cores:
                out = c.advance(t)
                _note(out.runs, out.finishes, firsts, cached)
        core = min(cores, key=lambda c: (c.num_waiting, c.num_running))
        out = core.add(
            EngineRequest(
                rid,
                (0,) * req.input_tokens,
                Sampling(max_tokens=req.output_tokens, ignore_eos=True),
            ),
            t,
            namer.names(replace(req, index=i)),
        )
        _note(out.runs, out.finishes, firsts, cached)
        arrivals[rid] = t
        sizes[rid] = (req.input_tokens, req.output_tokens)
        if t >= warmup_s:
            measured.append(rid)
    # let the measured requests get their first token (bounded: a saturated pod never does)
    horizon = seconds + 60.0
    for core in cores:
        out = core.advance(horizon)
        _note(out.runs, out.finishes, firsts, cached)
    ttfts = sorted(
        (firsts[r] - arrivals[r]) * 1000.0 if r in firsts else math.inf for r in measured
    )
    if not ttfts:
        raise ValueError(f"no request arrived after warmup_s at {rate} req/s")
    k = min(len(ttfts) - 1, max(0, math.ceil(percentile / 100.0 * len(ttfts)) - 1))
    done = [r for r in measured if r in cached]
    n = max(1, len(done))
    return PodRun(
        rate=rate,
        ttft_ms=ttfts[k],
        requests=len(measured),
        prompt_tokens=sum(sizes[r][0] for r in done) / n,
        cached_tokens=sum(cached[r] for r in done) / n,
        output_tokens=sum(sizes[r][1] for r in done) / n,
    )


def _note(
    runs: Sequence[TokenRun],
    finishes: Sequence[Finish],
    firsts: dict[str, float],
    cached: dict[str, int],
) -> None:
    for run in runs:
        if run.first_index == 0:
            firsts.setdefault(run.request_id, run.t_first)
    for fin in finishes:
        cached[fin.request_id] = fin.usage.cached_tokens


def saturating_rate(
    trace: Sequence[TraceRequest],
    target_ms: float,
    *,
    percentile: float = 99.0,
    seconds: float = 120.0,
    seed: int = 0,
    lo: float = 0.5,
    hi: float = 200.0,
    rel: float = 0.02,
    pods: int = 1,
    burst: float = 1.0,
) -> tuple[float, PodRun]:
    """The highest rate (within ``rel``) at which one pod's TTFT percentile is within
    ``target_ms``, by bisection on :func:`run_pod` (same seed: the same arrivals, scaled),
    and the run at that rate."""
    best = run_pod(
        trace, lo, seconds=seconds, percentile=percentile, seed=seed, pods=pods, burst=burst
    )
    if best.ttft_ms > target_ms:
        return 0.0, best
    while hi / lo > 1.0 + rel:
        mid = math.sqrt(lo * hi)
        got = run_pod(
            trace, mid, seconds=seconds, percentile=percentile, seed=seed, pods=pods, burst=burst
        )
        if got.ttft_ms <= target_ms:
            lo, best = mid, got
        else:
            hi = mid
    return lo, best


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m preheat.bench.pod_capacity TRACE --target-ms 300 [500 ...]``: the
    simulated pod's rate at each target beside the autoscaler's estimate for the mix."""
    ap = argparse.ArgumentParser(prog="python -m preheat.bench.pod_capacity")
    ap.add_argument("trace", help="a trace file (any format load_trace reads)")
    ap.add_argument("--target-ms", type=float, nargs="+", default=[300.0, 500.0])
    ap.add_argument("--percentile", type=float, default=99.0)
    ap.add_argument("--seconds", type=float, default=300.0, help="replay length per run")
    ap.add_argument("--max-input-tokens", type=int, default=30_000)
    ap.add_argument("--hi", type=float, default=64.0, help="highest rate tried (req/s)")
    ap.add_argument(
        "--pods", type=int, default=1, help="pods sharing the arrivals (rates are per pod)"
    )
    ap.add_argument(
        "--burst",
        type=float,
        default=1.0,
        help="mean size of the batches requests arrive in at one instant (1: Poisson)",
    )
    args = ap.parse_args(argv)
    trace = load_trace(args.trace, TraceOptions(max_input_tokens=args.max_input_tokens))
    for target in args.target_ms:
        rate, run = saturating_rate(
            trace,
            target,
            percentile=args.percentile,
            seconds=args.seconds,
            lo=min(0.1, args.hi / 4),
            hi=args.hi,
            pods=args.pods,
            burst=args.burst,
        )
        mix = Mix(run.requests, run.prompt_tokens, run.cached_tokens, run.output_tokens)
        est = pod_rate(
            ServiceCost(), mix, target, args.percentile, pods=args.pods, burst=args.burst
        )
        ratio = f"{est / rate:.2f}" if rate > 0 else "-"
        print(
            f"p{args.percentile:g} <= {target:g} ms, {args.pods} pod(s): simulated "
            f"{rate:.3f} req/s per pod, "
            f"estimate {est:.3f} (x{ratio}); mean prompt {run.prompt_tokens:.0f}, cached "
            f"{run.cached_tokens:.0f}, output {run.output_tokens:.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
