"""The degradation ladder at twice a pool's capacity, live on loopback: one router (in
process) in front of two pools of sim workers, ``big`` (its worker ``--big-slowdown`` times
slower than the cost model) and ``small`` (a worker at the cost model's speed). Requests of
class ``chat`` (TTFT target ``--target-ms``) for the big pool's model arrive (Poisson) at
``--load`` times the big pool's capacity, measured first as its saturated throughput (all
of a sample queued at once). Two runs on the same arrivals: the class without a ladder
(sheddable: refused early when the pool would miss), then with ``degrade: {fallbackPool:
small, maxTokens: --clamp}``. Per run: how many requests took each step (the router's
``preheat_router_degraded_total``), how many were refused, and the class's SLO attainment
(TTFT within the target, refused requests counted as misses).

    .venv/bin/python scripts/bench_degrade.py --seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.engine.sim import SimConfig, SimEngine
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint
from preheat.router.pools import LiteralPools, PoolSpec
from preheat.worker.server import WorkerConfig, WorkerServer

BIG, SMALL = "big-model", "small-model"
PROMPT_WORDS = 400
MAX_TOKENS = 128


@dataclass
class Tally:
    ttft_ms: list[float] = field(default_factory=list)
    sent: int = 0
    refused: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def worker(wid: str, model: str, slowdown: float) -> AsyncIterator[DiscoveredEndpoint]:
    opts = {"model": model, "load_s": 0.0, "warmup_s": 0.0, "time_scale": slowdown}
    opts["max_num_seqs"] = 16
    w = WorkerServer(
        SimEngine(SimConfig.from_options(opts)), WorkerConfig(worker_id=wid, stop_grace_s=0.5)
    )
    ports = await w.start()
    try:
        await asyncio.wait_for(w.wait_warm(), 30)
        yield DiscoveredEndpoint(address=f"127.0.0.1:{ports.grpc}", id=wid)
    finally:
        await w.stop()


async def _one(http: aiohttp.ClientSession, url: str, k: int, t: Tally) -> None:
    t.sent += 1
    body = {
        "model": BIG,
        "prompt": f"q{k} " + "word " * PROMPT_WORDS,
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    t0 = time.perf_counter()
    async with http.post(url, json=body, headers={"x-slo-class": "chat"}) as resp:
        if resp.status == 429:
            t.refused += 1
            await resp.read()
            return
        if resp.status != 200:
            t.failed += 1
            key = f"{resp.status} {(await resp.text())[:120]}"
            t.errors[key] = t.errors.get(key, 0) + 1
            return
        first = None
        async for line in resp.content:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter()
        if first is not None:
            t.ttft_ms.append((first - t0) * 1000)


async def capacity(url: str, n: int) -> float:
    """Requests/s the big pool completes with ``n`` queued at once."""
    t = Tally()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(_one(http, url, -k - 1, t) for k in range(n)))
        return n / (time.perf_counter() - t0)


async def run(args: argparse.Namespace, ladder: bool, rate: float | None) -> dict[str, Any]:
    klass: dict[str, Any] = {"name": "chat", "ttftMs": args.target_ms}
    if ladder:
        klass["degrade"] = {"fallbackPool": "small", "maxTokens": args.clamp}
    async with (
        worker("big-1", BIG, args.big_slowdown) as big_ep,
        worker("small-1", SMALL, 1.0) as small_ep,
    ):
        pools = [
            PoolSpec(
                name="big",
                model=BIG,
                routing={"traffic": {"classes": [klass]}},
                endpoints=(big_ep,),
            ),
            PoolSpec(name="small", model=SMALL, endpoints=(small_ep,)),
        ]
        router = RouterServer(
            None, RouterConfig(refresh_interval_s=0.2), pool_source=LiteralPools(pools)
        )
        ports = await router.start()
        base = f"http://127.0.0.1:{ports.http}"
        url = base + "/v1/completions"
        try:
            for _ in range(100):
                if all(p.store.snapshot() for p in router.pools.pools()):
                    break
                await asyncio.sleep(0.1)
            if rate is None:
                return {"capacity": await capacity(url, args.capacity_sample)}
            t = Tally()
            rng = random.Random(args.seed)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                tasks = []
                start = time.perf_counter()
                at = rng.expovariate(rate)
                k = 0
                while at < args.seconds:
                    delay = start + at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(_one(http, url, k, t)))
                    k += 1
                    at += rng.expovariate(rate)
                await asyncio.gather(*tasks)
                async with http.get(base + "/metrics") as resp:
                    text = await resp.text()
        finally:
            await router.stop()
    steps = {
        s.labels[mn.LABEL_STEP]: int(s.value)
        for s in parse_samples(text, only=(mn.ROUTER_DEGRADED + "_total",))
        if s.labels[mn.LABEL_POOL] == "big"
    }
    met = sum(1 for x in t.ttft_ms if x <= args.target_ms)
    return {
        "ladder": ladder,
        "sent": t.sent,
        "served": len(t.ttft_ms),
        "refused": t.refused,
        "failed": t.failed,
        "errors": t.errors,
        "steps": steps,
        "attainment": round(100 * met / t.sent, 2) if t.sent else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--load", type=float, default=2.0)
    p.add_argument("--target-ms", type=float, default=1500.0)
    p.add_argument("--clamp", type=int, default=32)
    p.add_argument("--big-slowdown", type=float, default=4.0)
    p.add_argument("--capacity-sample", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    cap = asyncio.run(run(args, False, None))["capacity"]
    rate = args.load * cap
    rows = [asyncio.run(run(args, ladder, rate)) for ladder in (False, True)]
    print(json.dumps({"capacity_rps": round(cap, 2), "rate_rps": round(rate, 2), "runs": rows}))
    print()
    print(
        f"big pool capacity {cap:.2f} req/s; offered {rate:.2f} req/s ({args.load:g}x) for "
        f"{args.seconds:g} s; class chat, TTFT target {args.target_ms:g} ms\n"
    )
    print("| ladder | sent | fallback-pool | clamp-output | rejected | served | attainment |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["steps"]
        print(
            f"| {'fallback small, clamp ' + str(args.clamp) if r['ladder'] else 'none'} "
            f"| {r['sent']} | {s.get('fallback-pool', 0)} | {s.get('clamp-output', 0)} "
            f"| {r['refused']} | {r['served']} | {r['attainment']}% |"
        )


if __name__ == "__main__":
    main()
