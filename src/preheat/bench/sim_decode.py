"""``preheat bench sim --part decode``: the ``decode-interference`` scorer in the simulator.

The Mooncake conversation trace (long prompts, prefix reuse) on 16 GPUs and the Azure conv
trace (short prompts, no prefix information) on 4 GPUs, each at a moderate and a high load,
with the ``preheat`` policy at several weights of the ``decode-interference`` scorer (0 =
the policy before it existed) beside round-robin and least-request: TTFT, TPOT (time per
output token after the first, per request) and end-to-end latency. The default weight is
the largest of the weights tried that costs no more than 2% of TTFT p95 (against weight 0)
in every one of the four settings.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

from preheat.bench import sim_bench as sb
from preheat.core.percentiles import sample_quantile
from preheat.core.routing.config import DEFAULT_SCORERS, SchedulerConfig
from preheat.simulate.options import SimOptions
from preheat.simulate.world import simulate
from preheat.workload.traces import TraceOptions, TraceRequest, load_trace

SCORER = "decode-interference"
WEIGHTS: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1, 0.2)
BASELINES: tuple[str, ...] = ("round-robin", "least-request")
#: (trace, GPUs, requests, rate scales): the rate scale multiplies the trace's own rate
SETTINGS: tuple[tuple[str, int, int, tuple[float, ...]], ...] = (
    (sb.MOONCAKE, 16, 3000, (6.4, 9.6)),
    (sb.AZURE, 4, 4000, (6.0, 12.0)),
)
TTFT_P95_BUDGET = 0.02


def default_weight() -> float:
    return dict(DEFAULT_SCORERS).get(SCORER, 0.0)


def config_for(weight: float) -> SchedulerConfig:
    others = tuple((n, w) for n, w in DEFAULT_SCORERS if n != SCORER)
    return SchedulerConfig(scorers=(*others, (SCORER, weight)))


@dataclass(frozen=True)
class Row:
    name: str
    hit: float
    ttft: tuple[float, float, float]
    tpot: tuple[float, float]
    e2e: tuple[float, float]
    ok: int
    requests: int


def _q(xs: Sequence[float], q: float) -> float:
    return sample_quantile(q, xs) if xs else float("nan")


def _row(name: str, trace: Sequence[TraceRequest], gpus: int, routing: SchedulerConfig) -> Row:
    opts = SimOptions(
        routing=routing,
        engine_options=sb._engine_options(),
        seed=1,
        record_itl=False,
        default_ttft_target_ms=sb.PLACEMENT_ONLY,
    )
    run, _ = simulate(sb._pool(gpus), trace, opts)
    ok = [r for r in run.requests if r.outcome == "ok"]
    ttft = [r.ttft_ms for r in ok]
    e2e = [r.e2e_ms for r in ok]
    tpot = [(r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    prompt = sum(r.prompt_tokens for r in ok)
    hit = sum(r.cached_tokens for r in ok) / prompt if prompt else 0.0
    return Row(
        name,
        hit,
        (_q(ttft, 0.5), _q(ttft, 0.95), _q(ttft, 0.99)),
        (_q(tpot, 0.5), _q(tpot, 0.95)),
        (_q(e2e, 0.5), _q(e2e, 0.95)),
        len(ok),
        len(run.requests),
    )


def _trace(args: argparse.Namespace, name: str, n: int) -> list[TraceRequest]:
    if name == sb.MOONCAKE:
        opts = TraceOptions(sessions="root", max_input_tokens=30_000, max_requests=n)
    else:
        opts = TraceOptions(max_requests=n)
    return load_trace(args.data / name, opts)


def decode_part(args: argparse.Namespace) -> str:
    chosen = default_weight()
    t0 = time.perf_counter()
    lines = [
        "## Simulated routing: decode interference (Mooncake and Azure conv traces)",
        "",
        f"Command: `{sb._command(args, 'decode')}`. Simulated, "
        "virtual time, deterministic: calibrated H100 sim engines, routers refreshing the "
        "engines' gauges every second, fixed pools. `preheat, weight W`: the default "
        f"`preheat` policy with the `{SCORER}` scorer at weight W (0: as before the scorer "
        f"existed; **{chosen:g} is the default**). TPOT: per request, (e2e - TTFT) / (output "
        "tokens - 1); the percentiles are over requests. Mooncake: the first requests of "
        "`mooncake_conversation_trace.jsonl`, prompts clipped to 30,000 tokens, sessions from "
        "the conversation root; Azure: `azure_llm_2023_conv.csv` (no prefix information: no "
        "cache hits). Arrivals compressed by the rate scale.",
        "",
    ]
    verdicts: list[str] = []
    budget_ok: dict[float, bool] = dict.fromkeys(WEIGHTS, True)
    for name, gpus, n, scales in SETTINGS:
        base = _trace(args, name, args.decode_requests or n)
        rate = len(base) / max(1e-9, base[-1].arrival_s - base[0].arrival_s)
        for scale in scales:
            trace = sb._rescale(base, scale)
            print(f"decode: {name} x{scale:g} on {gpus} GPUs", flush=True)
            rows = [_row(f"preheat, weight {w:g}", trace, gpus, config_for(w)) for w in WEIGHTS]
            rows += [_row(p, trace, gpus, SchedulerConfig(policy=p)) for p in BASELINES]
            lines += [
                f"### {name.split('_')[0].capitalize()}, {len(trace):,} requests at "
                f"{rate * scale:.1f} req/s (rate scale {scale:g}), {gpus} GPUs",
                "",
                "| policy | hit rate | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | TPOT p50 ms "
                "| TPOT p95 ms | e2e p50 ms | e2e p95 ms | ok |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in rows:
                label = f"**{r.name}**" if r.name == f"preheat, weight {chosen:g}" else r.name
                lines.append(
                    f"| {label} | {100 * r.hit:.1f}% | {r.ttft[0]:,.0f} | {r.ttft[1]:,.0f} "
                    f"| {r.ttft[2]:,.0f} "
                    f"| {r.tpot[0]:.1f} | {r.tpot[1]:.1f} | {r.e2e[0]:,.0f} | {r.e2e[1]:,.0f} "
                    f"| {r.ok} / {r.requests} |"
                )
            lines.append("")
            zero = rows[0]
            for w, r in zip(WEIGHTS, rows, strict=False):
                budget_ok[w] &= r.ttft[1] <= zero.ttft[1] * (1 + TTFT_P95_BUDGET)
            ours = rows[WEIGHTS.index(chosen)] if chosen in WEIGHTS else None
            if ours is not None:
                base_rows = rows[len(WEIGHTS) :]
                ttft_ok = all(
                    ours.ttft[0] < b.ttft[0] and ours.ttft[1] < b.ttft[1] for b in base_rows
                )
                tail_ok = all(
                    ours.tpot[1] <= b.tpot[1] and ours.e2e[1] <= b.e2e[1] for b in base_rows
                )
                verdicts.append(
                    f"- {name.split('_')[0].capitalize()} x{scale:g}: preheat's TTFT p50 and "
                    f"p95 ahead of {' and '.join(BASELINES)}: "
                    f"{'**met**' if ttft_ok else '**missed**'}; its TPOT p95 and e2e p95 no "
                    f"worse: {'**met**' if tail_ok else '**missed**'}."
                )
    within = [w for w in WEIGHTS if budget_ok[w]]
    lines += [
        "Ordering with the default weight (targets of issue 12, G; strict: a tie is a miss):",
        "",
        *verdicts,
        "",
        "Reading the tables: on Mooncake the cache matters and `preheat` is far ahead of "
        "both baselines on every figure; the new term moves its TPOT and e2e tails by the "
        "placements where the cache win was smaller than the neighbours' cost. The Azure "
        "conv trace carries no prefix information, so there is no cache to win and every "
        "policy is a load balancer: `preheat` and round-robin stay within a few percent of "
        "each other there (round-robin spreads prefills evenly, which is what the TPOT tail "
        "of short prompts needs), and least-request, which reads the engines' gauges as of "
        "the last refresh, herds. Larger weights buy TPOT p50 and e2e p50 with TTFT p95 and "
        "p99: the neighbours' cost of a long prompt is large on a busy GPU, so some long "
        "prompts wait behind a queue elsewhere instead.",
        "",
        f"Weights whose TTFT p95 stays within {100 * TTFT_P95_BUDGET:.0f}% of weight 0's in "
        f"all four settings: {', '.join(f'{w:g}' for w in within)}; the default is the "
        f"largest of them ({max(within):g})"
        + (" and is the configured one." if max(within) == chosen else f", configured {chosen:g}.")
        + f" Simulated in {time.perf_counter() - t0:.0f} s.",
    ]
    return "\n".join(lines)
