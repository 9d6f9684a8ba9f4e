"""Priority lanes in the sim engine: one simulated H100 replica (the sim engine's
calibrated vLLM 0.32 / Llama-3-8B cost model) under a mixed trace at a multiple of its
capacity, scheduled FCFS against vLLM's priority policy (``scheduling_policy="priority"``,
interactive priority 0, batch 2), side by side on the same arrivals.

Traffic: interactive chat from the Mooncake conversation trace (its prompts, outputs and
shared prefix blocks; prompts longer than the model's 32k window are left out) and a flood
of long prompts from the Azure LLM 2023 conv trace (rows of >= 2000 prompt tokens), each
re-timed (its own inter-arrival times, scaled) so that interactive requests are
``--interactive-load`` of the replica's capacity and the two together ``--load`` of it.
Capacity: each class's saturated throughput (requests/s when a sample of it is queued at
once); interactive at 0.5x of its capacity plus batch at 1.0x of its own is 1.5x.

    .venv/bin/python scripts/bench_lanes.py                      # a markdown table
    .venv/bin/python scripts/bench_lanes.py --load 1.5 --seconds 300
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass
from pathlib import Path

from preheat.core.percentiles import sample_quantile
from preheat.engine.base import EngineRequest, Sampling
from preheat.engine.sim import SimConfig
from preheat.engine.simcore import SimCore
from preheat.workload.traces import TraceRequest, load_trace

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
MOONCAKE = DATA / "mooncake_conversation_trace.jsonl"
AZURE = DATA / "azure_llm_2023_conv.csv"
INTERACTIVE, BATCH = 0, 2  # priorities (lower first)


@dataclass(frozen=True)
class Job:
    rid: str
    arrival: float
    priority: int
    input_tokens: int
    output_tokens: int
    hashes: tuple[int, ...]


def _hashes(t: TraceRequest, tag: str, block: int) -> tuple[int, ...]:
    """Names of the prompt's full ``block``-token blocks: a trace block's name for the
    blocks it covers (the Mooncake trace's shared prefixes are shared here too), else
    unique ones."""
    n = t.input_tokens // block
    per = max(1, t.block_tokens // block)
    out = []
    for k in range(n):
        j = k // per
        if j < len(t.prefix_block_ids):
            out.append(_name(1, t.prefix_block_ids[j], k % per))
        else:
            out.append(_name(2 + sum(map(ord, tag)), t.index, k))
    return tuple(out)


def _name(*parts: int) -> int:
    """A deterministic 64-bit block name (``hash`` of a str varies between processes)."""
    h = 1469598103934665603
    for part in parts:
        h = ((h ^ part) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _jobs(
    reqs: list[TraceRequest],
    rate: float,
    priority: int,
    tag: str,
    block: int,
    seconds: float,
    start: int = 0,
) -> list[Job]:
    """``reqs`` re-timed to ``rate`` requests/s (their own gaps, scaled), for ``seconds``."""
    span = reqs[-1].arrival_s - reqs[0].arrival_s
    scale = (len(reqs) / span) / rate if span > 0 else 1.0
    out = []
    for t in reqs:
        at = (t.arrival_s - reqs[0].arrival_s) * scale
        if at > seconds:
            break
        out.append(
            Job(
                f"{tag}-{t.index}",
                at,
                priority,
                t.input_tokens,
                t.output_tokens,
                _hashes(t, tag, block),
            )
        )
    return out


def run(cfg: SimConfig, jobs: list[Job], policy: str) -> dict[str, tuple[float, float]]:
    """request id -> (arrival, TTFT s) on one replica."""
    core = SimCore(
        SimConfig(**{**cfg.__dict__, "scheduling_policy": policy}).core_config(), cfg.cost
    )
    arrival = {j.rid: j.arrival for j in jobs}
    first: dict[str, float] = {}

    def take(em: object) -> None:
        for r in em.runs:  # type: ignore[attr-defined]
            if r.first_index == 0 and r.request_id not in first:
                first[r.request_id] = r.t_first

    for j in sorted(jobs, key=lambda j: j.arrival):
        req = EngineRequest(
            j.rid,
            (0,) * j.input_tokens,
            Sampling(max_tokens=j.output_tokens, ignore_eos=True),
            priority=j.priority,
        )
        take(core.add(req, j.arrival, j.hashes))
    while (t := core.next_event_time()) is not None:
        take(core.advance(t))
    return {rid: (arrival[rid], first[rid] - arrival[rid]) for rid in first}


def capacity(cfg: SimConfig, jobs: list[Job]) -> float:
    """Requests/s of ``jobs`` all queued at once (FCFS): the saturated throughput."""
    at_once = [Job(j.rid, 0.0, j.priority, j.input_tokens, j.output_tokens, j.hashes) for j in jobs]
    core = SimCore(cfg.core_config(), cfg.cost)
    end = 0.0
    for j in at_once:
        core.add(
            EngineRequest(
                j.rid, (0,) * j.input_tokens, Sampling(max_tokens=j.output_tokens, ignore_eos=True)
            ),
            0.0,
            j.hashes,
        )
    while (t := core.next_event_time()) is not None:
        em = core.advance(t)
        for f in em.finishes:
            end = max(end, f.time)
    return len(at_once) / end


@dataclass(frozen=True)
class Arrivals:
    """The mixed arrivals every lanes benchmark sends (this one, ``bench_lanes_live.py``,
    ``bench_lanes_up.py``): each class's saturated throughput on ``cfg`` and the jobs."""

    jobs: list[Job]
    cap_interactive: float
    cap_batch: float
    rate_interactive: float
    rate_batch: float


def arrivals(
    cfg: SimConfig,
    *,
    seconds: float,
    load: float,
    interactive_load: float,
    capacity_sample: int,
    seed: int,
) -> Arrivals:
    """Interactive Mooncake conversation requests at ``interactive_load`` x their capacity
    plus Azure conv prompts of >= 2,000 tokens at ``load - interactive_load`` x theirs, for
    ``seconds`` (capacities from ``capacity_sample`` requests of each, sampled with
    ``seed``)."""
    window = cfg.max_model_len
    chat = [r for r in load_trace(MOONCAKE) if r.input_tokens + r.output_tokens <= window]
    flood = [r for r in load_trace(AZURE) if r.input_tokens >= 2000]
    bs = cfg.block_size
    rng = random.Random(seed)
    n = capacity_sample
    cap_i = capacity(cfg, _jobs(rng.sample(chat, n), 1.0, INTERACTIVE, "ci", bs, math.inf))
    cap_b = capacity(cfg, _jobs(rng.sample(flood, n), 1.0, BATCH, "cb", bs, math.inf))
    rate_i = interactive_load * cap_i
    rate_b = (load - interactive_load) * cap_b
    jobs = _jobs(chat, rate_i, INTERACTIVE, "i", bs, seconds)
    jobs += _jobs(flood, rate_b, BATCH, "b", bs, seconds)
    return Arrivals(jobs, cap_i, cap_b, rate_i, rate_b)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", type=float, default=1.5, help="offered load / capacity")
    p.add_argument(
        "--interactive-load", type=float, default=0.5, help="of which interactive (the rest: batch)"
    )
    p.add_argument("--seconds", type=float, default=300.0, help="arrivals over this long")
    p.add_argument("--interactive-ttft-ms", type=float, default=2000.0)
    p.add_argument("--batch-ttft-ms", type=float, default=60_000.0)
    p.add_argument("--capacity-sample", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    cfg = SimConfig()
    mix = arrivals(
        cfg,
        seconds=args.seconds,
        load=args.load,
        interactive_load=args.interactive_load,
        capacity_sample=args.capacity_sample,
        seed=args.seed,
    )
    jobs, cap_i, cap_b = mix.jobs, mix.cap_interactive, mix.cap_batch
    rate_i, rate_b = mix.rate_interactive, mix.rate_batch
    n_int = sum(1 for j in jobs if j.priority == INTERACTIVE)
    print(
        f"SIMULATED, one replica (sim engine, H100 cost model). Capacity (saturated "
        f"throughput): interactive alone {cap_i:.2f} req/s, batch alone {cap_b:.2f} req/s. "
        f"Offered {args.load:g}x: interactive {rate_i:.2f} req/s ({args.interactive_load:g}x) "
        f"+ batch {rate_b:.2f} req/s ({args.load - args.interactive_load:g}x) for "
        f"{args.seconds:g} s = {n_int} interactive (Mooncake conv) and {len(jobs) - n_int} "
        "batch (Azure conv, >= 2000 prompt tokens) requests\n"
    )
    print(
        "| scheduling | interactive TTFT p50 | p99 | attainment "
        f"(<= {args.interactive_ttft_ms:g} ms) | batch TTFT p50 | p99 | attainment "
        f"(<= {args.batch_ttft_ms / 1000:g} s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for policy in ("fcfs", "priority"):
        out = run(cfg, jobs, policy)
        row = [policy]
        for prio, target in (
            (INTERACTIVE, args.interactive_ttft_ms),
            (BATCH, args.batch_ttft_ms),
        ):
            ttfts = [out[j.rid][1] * 1000 for j in jobs if j.priority == prio and j.rid in out]
            total = sum(1 for j in jobs if j.priority == prio)
            ok = sum(1 for t in ttfts if t <= target)
            row += [
                f"{sample_quantile(0.50, ttfts):,.0f} ms",
                f"{sample_quantile(0.99, ttfts):,.0f} ms",
                f"{100 * ok / total:.2f}%",
            ]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
