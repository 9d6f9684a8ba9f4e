"""The response cache in the simulator: a trace in which a share of the requests repeat an
earlier deterministic request (same prompt, same parameters) within the cache's TTL, on
one sim-engine replica, with the router's cache on and off.

Requests are the Azure LLM 2023 conv trace's (prompt and output lengths, arrival times);
``--repeat`` of them (chosen at random, seeded) are made repeats of a request drawn from the
previous ``--window-s`` seconds. With the cache, a repeat whose original has finished and
is younger than ``--ttl-s`` is a hit: answered by the router (TTFT = the router's lookup,
``--hit-ms``), never sent to the engine; everything else (misses, repeats of a request still
running, or an expired one) is served by the engine. GPU-seconds: the time the replica had
any request to work on.

    .venv/bin/python scripts/bench_response_cache.py            # a markdown table
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

from preheat.core.percentiles import sample_quantile
from preheat.engine.base import EngineRequest, Sampling
from preheat.engine.sim import SimConfig
from preheat.engine.simcore import Emissions, SimCore
from preheat.workload.traces import TraceOptions, load_trace

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
AZURE = DATA / "azure_llm_2023_conv.csv"


@dataclass(frozen=True)
class Req:
    rid: str
    arrival: float
    input_tokens: int
    output_tokens: int
    prompt_id: int  # requests with one prompt_id are the same deterministic request


def _hashes(r: Req, block: int) -> tuple[int, ...]:
    """One prompt id, one block chain: a repeat the cache misses still hits the KV cache."""
    return tuple(
        (r.prompt_id * 1_000_003 + k) & 0xFFFFFFFFFFFF for k in range(r.input_tokens // block)
    )


def _engine_request(r: Req) -> EngineRequest:
    return EngineRequest(
        r.rid, (0,) * r.input_tokens, Sampling(max_tokens=r.output_tokens, ignore_eos=True)
    )


def run(
    reqs: list[Req], cache: bool, ttl_s: float, hit_ms: float
) -> tuple[dict[str, float], set[str], float]:
    """TTFT (s) by request id, the ids answered from the cache, and the busy GPU-seconds."""
    cfg = SimConfig()
    core = SimCore(cfg.core_config(), cfg.cost)
    ttft: dict[str, float] = {}
    hits: set[str] = set()
    stored: dict[int, float] = {}  # prompt id -> when its answer was stored
    arrival = {r.rid: r.arrival for r in reqs}
    prompt_of = {r.rid: r.prompt_id for r in reqs}
    busy = 0.0
    clock = 0.0

    def take(em: Emissions) -> None:
        for run_ in em.runs:
            if run_.first_index == 0 and run_.request_id not in ttft:
                ttft[run_.request_id] = run_.t_first - arrival[run_.request_id]
        for f in em.finishes:
            stored[prompt_of[f.request_id]] = f.time

    def advance_to(t: float) -> None:
        nonlocal busy, clock
        while (nxt := core.next_event_time()) is not None and nxt <= t:
            if core.has_work():
                busy += nxt - clock
            clock = nxt
            take(core.advance(nxt))
        if core.has_work():
            busy += t - clock
        clock = max(clock, t)

    for r in sorted(reqs, key=lambda r: r.arrival):
        advance_to(r.arrival)
        at = stored.get(r.prompt_id)
        if cache and at is not None and r.arrival - at < ttl_s:
            ttft[r.rid] = hit_ms / 1000.0
            hits.add(r.rid)
            continue
        take(core.add(_engine_request(r), r.arrival, _hashes(r, cfg.block_size)))
    while (nxt := core.next_event_time()) is not None:
        if core.has_work():
            busy += nxt - clock
        clock = nxt
        take(core.advance(nxt))
    return ttft, hits, busy


def saturated_seconds(reqs: list[Req]) -> float:
    """Seconds one replica takes for ``reqs`` all queued at once, in arrival order."""
    cfg = SimConfig()
    core = SimCore(cfg.core_config(), cfg.cost)
    for r in sorted(reqs, key=lambda r: r.arrival):
        core.add(_engine_request(r), 0.0, _hashes(r, cfg.block_size))
    end = 0.0
    while (nxt := core.next_event_time()) is not None:
        for f in core.advance(nxt).finishes:
            end = max(end, f.time)
    return end


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--repeat", type=float, default=0.30, help="share of repeated requests")
    p.add_argument("--window-s", type=float, default=30.0)
    p.add_argument("--ttl-s", type=float, default=60.0)
    p.add_argument("--hit-ms", type=float, default=1.0, help="TTFT of a hit (router lookup)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    trace = load_trace(AZURE, TraceOptions(duration_s=args.seconds))
    reqs: list[Req] = []
    for i, t in enumerate(trace):
        earlier = [r for r in reqs if t.arrival_s - r.arrival <= args.window_s]
        if earlier and rng.random() < args.repeat:
            src = rng.choice(earlier)
            reqs.append(
                Req(f"r{i}", t.arrival_s, src.input_tokens, src.output_tokens, src.prompt_id)
            )
        else:
            reqs.append(Req(f"r{i}", t.arrival_s, t.input_tokens, t.output_tokens, i))
    n_rep = sum(1 for i, r in enumerate(reqs) if r.prompt_id != i)
    print(
        "SIMULATED, one replica (sim engine, H100 cost model): the Azure LLM 2023 conv trace, "
        f"first {args.seconds:g} s ({len(reqs)} requests, {len(reqs) / args.seconds:.2f} "
        f"req/s); {n_rep} ({100 * n_rep / len(reqs):.1f}%) repeat a request of the previous "
        f"{args.window_s:g} s; cache TTL {args.ttl_s:g} s, a hit answered in {args.hit_ms:g} ms"
        "\n"
    )
    print(
        "| cache | hit rate | TTFT p50 hits | TTFT p50 misses | TTFT p50 all | p99 all "
        "| GPU-seconds busy | GPU-seconds of work (saturated) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    base = 0.0
    for cache in (False, True):
        ttft, hits, busy = run(reqs, cache, args.ttl_s, args.hit_ms)
        work = saturated_seconds([r for r in reqs if r.rid not in hits])
        ms = {k: v * 1000 for k, v in ttft.items()}
        hit_t = [ms[k] for k in hits]
        miss_t = [v for k, v in ms.items() if k not in hits]
        every = list(ms.values())
        if not cache:
            base = work
        saved = f" (-{base - work:,.1f} s, -{100 * (base - work) / base:.1f}%)" if cache else ""
        hit_p50 = f"{sample_quantile(0.5, hit_t):,.1f} ms" if hit_t else "-"
        print(
            f"| {'on' if cache else 'off'} | {100 * len(hits) / len(reqs):.1f}% | {hit_p50} "
            f"| {sample_quantile(0.5, miss_t):,.1f} ms | {sample_quantile(0.5, every):,.1f} ms "
            f"| {sample_quantile(0.99, every):,.1f} ms | {busy:,.1f} | {work:,.1f}{saved} |"
        )


if __name__ == "__main__":
    main()
