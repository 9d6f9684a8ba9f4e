"""Refused demand as demand, in the simulator: the autoscaling policy as it is against the
same policy blind to the routers' refusals (``Signals.demand`` removed: what it did before
issue 12 B), on the same pool and traffic, side by side in one run.

Traffic: distinct ~4k-token prompts (64 output tokens) at a constant rate, every request
with a TTFT deadline; the router rejects early what it predicts cannot meet it. Pool: 1-4
simulated H100s (1 at the start), TTFT p95 <= 2000 ms over 30 s; a new pod starts in 3 s
here (1 s each for image, load, warm-up) so that the run shows the policy, not the start-up.

    .venv/bin/python scripts/bench_refused_demand.py            # a markdown table
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from typing import Any

from preheat.core.autoscaling import Context, Decision, PolicyState, decide
from preheat.report.record import count_outcomes
from preheat.simulate import SimOptions, Startup, pool_config, simulate, spec_document
from preheat.workload.traces import TraceRequest

SPEC: dict[str, Any] = {
    "model": {"name": "m"},
    "engine": {"kind": "sim"},
    "replicas": {"min": 1, "max": 4},
    "autoscaling": {
        "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 2000}],
        "window": "30s",
    },
}


def blind(ctx: Context) -> tuple[Decision, PolicyState]:
    """The policy without the routers' demand figures (as before issue 12 B)."""
    return decide(replace(ctx, signals=replace(ctx.signals, demand=None)))


def steady(rate: float, seconds: float) -> list[TraceRequest]:
    blocks = 64
    return [
        TraceRequest(
            arrival_s=i / rate,
            input_tokens=64 * (blocks - 1) + 40,
            output_tokens=64,
            session_id=f"s{i}",
            prefix_block_ids=tuple(blocks * i + k for k in range(blocks)),
            block_tokens=64,
            index=i,
        )
        for i in range(int(rate * seconds))
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="10,20,40", help="requests/s, comma-separated")
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--deadline-ms", type=float, default=300.0)
    args = p.parse_args()
    pool = pool_config(spec_document("bench", SPEC))
    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0)
    print(
        "| rate req/s | policy | rejected | rejected after 60 s | pods (peak) | pods (median) "
        "| TTFT p95 of served ms | first scale-up |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for rate in (float(r) for r in args.rates.split(",")):
        trace = steady(rate, args.seconds)
        for name, policy in (("blind to refusals (before)", blind), ("refused = demand", decide)):
            opts = SimOptions(
                ttft_deadline_ms=args.deadline_ms,
                startup=fast,
                autoscale_interval_s=5.0,
                autoscale=policy,
            )
            run, _ = simulate(pool, trace, opts)
            n = len(run.requests)
            rejected = count_outcomes(run.requests)["rejected"]
            late = [r for r in run.requests if r.t_s >= 60.0]
            late_rej = count_outcomes(late)["rejected"]
            served = sorted(r.ttft_ms for r in run.requests if r.outcome == "ok")
            p95 = served[min(len(served) - 1, int(0.95 * len(served)))] if served else 0.0
            active = [s.active for s in run.replicas]
            ups = [e for e in run.events if e.kind == "scale_up"]
            first = f"{ups[0].t_s:.0f} s: {ups[0].reason}" if ups else "none"
            print(
                f"| {rate:g} | {name} | {rejected / n:.1%} | "
                f"{late_rej / max(1, len(late)):.1%} | {max(active)} | "
                f"{statistics.median(active):g} | {p95:.0f} | {first} |"
            )


if __name__ == "__main__":
    main()
