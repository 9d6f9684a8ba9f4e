"""A noisy tenant next to well-behaved ones, live on loopback: one router (in process) in
front of one sim worker (the H100 cost model at real time), HTTP completions streamed
with the ``x-tenant`` header. Every tenant has the same quota (``--rate`` requests/s,
burst ``--burst``); three well-behaved tenants send at ``--calm`` of their quota (Poisson),
a noisy one at ``--noisy`` times it. Two runs, the same seeds: without the noisy tenant,
then with it. Per run: the well-behaved tenants' TTFT p50/p95 (client-measured), and the
noisy tenant's requests sent, served, refused (429) and whether what it was served stayed
within its quota (rate x seconds + burst); the median Retry-After it got.

    .venv/bin/python scripts/bench_fairness.py --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp

from preheat.core.percentiles import sample_quantile
from preheat.core.traffic.classes import TenantQuota, Traffic
from preheat.engine.sim import SimConfig, SimEngine
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery
from preheat.worker.server import WorkerConfig, WorkerServer

CALM = ("alice", "bob", "carol")


@dataclass
class Tally:
    ttft_ms: list[float] = field(default_factory=list)
    sent: int = 0
    ok: int = 0
    limited: int = 0
    other: int = 0
    retry_after: list[float] = field(default_factory=list)


async def _one(http: aiohttp.ClientSession, url: str, tenant: str, k: int, t: Tally) -> None:
    t.sent += 1
    body = {"prompt": f"{tenant} question {k} " + "word " * 200, "max_tokens": 48, "stream": True}
    t0 = time.perf_counter()
    async with http.post(url, json=body, headers={"x-tenant": tenant}) as resp:
        if resp.status == 429:
            t.limited += 1
            t.retry_after.append(float(resp.headers.get("retry-after-ms", "0")) / 1000)
            await resp.read()
            return
        if resp.status != 200:
            t.other += 1
            await resp.read()
            return
        first = None
        async for line in resp.content:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter()
        t.ok += 1
        if first is not None:
            t.ttft_ms.append((first - t0) * 1000)


async def _tenant(
    http: aiohttp.ClientSession,
    url: str,
    tenant: str,
    rate: float,
    seconds: float,
    seed: int,
    t: Tally,
) -> None:
    rng = random.Random(seed)
    tasks = []
    at = rng.expovariate(rate)
    start = time.perf_counter()
    k = 0
    while at < seconds:
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(http, url, tenant, k, t)))
        k += 1
        at += rng.expovariate(rate)
    await asyncio.gather(*tasks)


async def run(args: argparse.Namespace, noisy: bool) -> dict[str, object]:
    engine = SimEngine(SimConfig.from_options({"model": "m", "load_s": 0.0, "warmup_s": 0.0}))
    worker = WorkerServer(engine, WorkerConfig(worker_id="w-1", stop_grace_s=0.5))
    wports = await worker.start()
    await asyncio.wait_for(worker.wait_warm(), 30)
    quota = TenantQuota(name="*", requests_per_s=args.rate, request_burst=args.burst)
    router = RouterServer(
        StaticDiscovery([DiscoveredEndpoint(address=f"127.0.0.1:{wports.grpc}", id="w-1")]),
        RouterConfig(
            model="m",
            refresh_interval_s=0.2,
            traffic=Traffic(tenants=(quota,)),
            tenant_header="x-tenant",
        ),
    )
    rports = await router.start()
    await router.wait_ready(1, timeout_s=10)
    url = f"http://127.0.0.1:{rports.http}/v1/completions"
    tallies = {name: Tally() for name in (*CALM, "noisy")}
    try:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as http:
            jobs = [
                _tenant(http, url, name, args.calm * args.rate, args.seconds, i, tallies[name])
                for i, name in enumerate(CALM)
            ]
            if noisy:
                jobs.append(
                    _tenant(
                        http,
                        url,
                        "noisy",
                        args.noisy * args.rate,
                        args.seconds,
                        99,
                        tallies["noisy"],
                    )
                )
            await asyncio.gather(*jobs)
    finally:
        await router.stop()
        await worker.stop()
    calm_ttft = [x for name in CALM for x in tallies[name].ttft_ms]
    calm_limited = sum(tallies[name].limited for name in CALM)
    n = tallies["noisy"]
    return {
        "noisy": noisy,
        "calm_ttft_p50_ms": round(sample_quantile(0.5, calm_ttft), 1),
        "calm_ttft_p95_ms": round(sample_quantile(0.95, calm_ttft), 1),
        "calm_sent": sum(tallies[name].sent for name in CALM),
        "calm_429": calm_limited,
        "noisy_sent": n.sent,
        "noisy_ok": n.ok,
        "noisy_429": n.limited,
        "noisy_allowed": args.rate * args.seconds + args.burst,
        "noisy_retry_after_p50_s": round(sample_quantile(0.5, n.retry_after), 3)
        if n.retry_after
        else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=2.0, help="every tenant's requests/s quota")
    p.add_argument("--burst", type=float, default=4.0)
    p.add_argument("--calm", type=float, default=0.5, help="well-behaved rate / quota")
    p.add_argument("--noisy", type=float, default=10.0, help="noisy rate / quota")
    args = p.parse_args()
    rows = [asyncio.run(run(args, noisy)) for noisy in (False, True)]
    print(json.dumps(rows, indent=1))
    print()
    print(
        "| run | well-behaved TTFT p50 | p95 | their 429s | noisy sent | served | 429 "
        "| allowed (rate x s + burst) | Retry-After p50 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        run_name = "with" if r["noisy"] else "without"
        print(
            f"| {run_name} the noisy tenant | {r['calm_ttft_p50_ms']} ms "
            f"| {r['calm_ttft_p95_ms']} ms | {r['calm_429']} of {r['calm_sent']} "
            f"| {r['noisy_sent']} | {r['noisy_ok']} | {r['noisy_429']} "
            f"| {r['noisy_allowed']:g} | {r['noisy_retry_after_p50_s']} s |"
        )


if __name__ == "__main__":
    main()
