"""A noisy tenant next to well-behaved ones, live on loopback through ``preheat up``: one
pool (one sim worker, the H100 cost model at real time) whose ``spec.traffic.tenants`` gives
every tenant the same quota (``--rate`` requests/s, burst ``--burst``); HTTP completions
streamed to the router ``preheat up`` started, with the ``x-tenant`` header. Three
well-behaved tenants send Poisson at ``--calm`` of their quota; beside them a fourth tenant
sends at a multiple of its quota, one of ``--arms`` per run: 0 (no fourth tenant: the
baseline), 1 (at its quota: the load a quota lets it add) and 10 (the noisy tenant: what its
excess costs the others beyond that), from its own process (so its client's work is not
done in the loop that times the well-behaved requests). ``--rounds`` rounds of every arm,
the order rotated each round, the same seeds in every run, on one ``preheat up`` (the
buckets refill between runs). Per run: the well-behaved tenants' TTFT p50/p95
(client-measured), the router's and the worker's CPU seconds, and for the fourth tenant its
requests sent, served, refused (429), whether what it was served stayed within its quota
(rate x seconds + burst) and whether each Retry-After was right: no request was served
before a 429's ``retry-after-ms`` had passed (too long), and the first request sent after
it was not refused (too short). Last, the router's CPU per request of a flood it refuses.

    .venv/bin/python scripts/bench_fairness.py --seconds 60 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from uprun import cpu_seconds, preheat_up

from preheat.core.percentiles import sample_quantile

CALM = ("alice", "bob", "carol")
MODEL = "m"


class Send(NamedTuple):
    """One request as its client saw it: times in seconds from the run's start."""

    sent: float
    answered: float  # the response's status and headers arrived
    status: int
    wait_ms: float  # retry-after-ms (0 unless refused)
    whole_s: float  # Retry-After (0 unless refused)


def pool_file(rate: float, burst: float) -> str:
    """One sim replica; every tenant (``*``) at ``rate`` requests/s with ``burst``."""
    return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: fair}}
spec:
  model: {{name: {MODEL}}}
  engine:
    kind: sim
    args: {{timeScale: 1, loadTime: 0s, warmupTime: 0s}}
  replicas: {{min: 1, max: 1, warmStandby: 0}}
  traffic:
    tenants:
      - {{name: "*", requestsPerSecond: {rate:g}, requestBurst: {burst:g}}}
"""


@dataclass
class Tally:
    ttft_ms: list[float] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)


async def _one(
    http: aiohttp.ClientSession, url: str, tenant: str, k: int, t0: float, t: Tally
) -> None:
    body = {"model": MODEL, "prompt": f"{tenant} question {k} " + "word " * 200,
            "max_tokens": 48, "stream": True}  # fmt: skip
    sent = time.perf_counter()
    async with http.post(url, json=body, headers={"x-tenant": tenant}) as resp:
        answered = time.perf_counter() - t0
        if resp.status != 200:
            await resp.read()
            ms = float(resp.headers.get("retry-after-ms", "0"))
            header = float(resp.headers.get("retry-after", "0"))
            t.sends.append(Send(sent - t0, answered, resp.status, ms, header))
            return
        first = None
        async for line in resp.content:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter()
        t.sends.append(Send(sent - t0, answered, 200, 0.0, 0.0))
        if first is not None:
            t.ttft_ms.append((first - sent) * 1000)


async def _tenant(
    http: aiohttp.ClientSession,
    url: str,
    tenant: str,
    rate: float,
    seconds: float,
    seed: int,
    start: float,
    t: Tally,
) -> None:
    rng = random.Random(seed)
    tasks = []
    at = rng.expovariate(rate)
    k = 0
    while at < seconds:
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(http, url, tenant, k, start, t)))
        k += 1
        at += rng.expovariate(rate)
    await asyncio.gather(*tasks)


async def _send(
    url: str, tenants: list[tuple[str, float, int]], seconds: float, start_unix: float
) -> dict[str, Tally]:
    tallies = {name: Tally() for name, _, _ in tenants}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.sleep(max(0.0, start_unix - time.time()))
        start = time.perf_counter()
        await asyncio.gather(
            *(
                _tenant(http, url, name, rate, seconds, seed, start, tallies[name])
                for name, rate, seed in tenants
            )
        )
    return tallies


def retry_after_errors(sends: list[Send]) -> dict[str, int]:
    """How the 429s' Retry-After held, from one tenant's sends. The router charged each
    request at some moment between its ``sent`` and ``answered``, so a 429 says its next
    token is there at a moment between ``sent + wait`` and ``answered + wait``; only what
    is certain counts: ``too_long``: 429s after which a request charged certainly later
    (sent after the 429 was answered) was served certainly before its wait had passed
    (answered before ``sent + wait``); ``too_short``: 429s whose first request sent
    certainly after the wait had passed (``answered + wait``) was refused although no
    other request could have taken that token (none served whose charge may fall between);
    ``header``: Retry-After not the whole seconds of retry-after-ms rounded up (at least
    1)."""
    sends = sorted(sends)
    served = [x for x in sends if x.status == 200]
    too_long = too_short = header = 0
    for r in sends:
        if r.status != 429:
            continue
        wait = r.wait_ms / 1000
        if r.whole_s != max(1, math.ceil(r.wait_ms / 1000)):
            header += 1
        if any(r.answered < x.sent and x.answered < r.sent + wait for x in served):
            too_long += 1
        ready = r.answered + wait
        b = next((x for x in sends if x.sent >= ready), None)
        if b is None or b.status != 429:
            continue
        if not any(x.answered >= r.sent + wait and x.sent <= b.answered for x in served):
            too_short += 1
    return {"too_long": too_long, "too_short": too_short, "header": header}


def noisy_client(args: argparse.Namespace) -> None:
    """The noisy tenant alone (``--noisy-client URL``): its sends as JSON on stdout."""
    rate = args.noisy * args.rate
    tallies = asyncio.run(
        _send(args.noisy_client, [("noisy", rate, 99)], args.seconds, args.start_unix)
    )
    print(json.dumps(tallies["noisy"].sends))


def one_run(
    args: argparse.Namespace, url: str, pids: dict[str, int], times: float
) -> dict[str, object]:
    """One run with the fourth tenant at ``times`` its quota (0: absent)."""
    noisy = times > 0
    start_unix = time.time() + 2.0  # both clients' start, after the noisy one's imports
    child = None
    if noisy:
        child = subprocess.Popen(
            [sys.executable, __file__, "--noisy-client", url, "--start-unix", repr(start_unix),
             "--seconds", repr(args.seconds), "--rate", repr(args.rate),
             "--noisy", repr(times)],
            stdout=subprocess.PIPE,
        )  # fmt: skip
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    calm = [(name, args.calm * args.rate, i) for i, name in enumerate(CALM)]
    tallies = asyncio.run(_send(url, calm, args.seconds, start_unix))
    sends: list[Send] = []
    if child is not None:
        out, _ = child.communicate(timeout=args.seconds + 120)
        sends = [Send(*s) for s in json.loads(out)]
    cpu = {k: round(cpu_seconds(p) - cpu0[k], 2) for k, p in pids.items()}
    calm_ttft = [x for name in CALM for x in tallies[name].ttft_ms]
    row: dict[str, object] = {
        "times": times,
        "calm_ttft_p50_ms": round(sample_quantile(0.5, calm_ttft), 1),
        "calm_ttft_p95_ms": round(sample_quantile(0.95, calm_ttft), 1),
        "calm_sent": sum(len(tallies[n].sends) for n in CALM),
        "calm_429": sum(1 for n in CALM for s in tallies[n].sends if s.status == 429),
        "cpu_s": cpu,
    }
    if noisy:
        waits = [x.wait_ms / 1000 for x in sends if x.status == 429]
        row.update(
            noisy_sent=len(sends),
            noisy_ok=sum(1 for s in sends if s.status == 200),
            noisy_429=len(waits),
            noisy_other=sum(1 for s in sends if s.status not in (200, 429)),
            noisy_allowed=args.rate * args.seconds + args.burst,
            noisy_retry_after_p50_s=round(sample_quantile(0.5, waits), 3) if waits else None,
            retry_after_errors=retry_after_errors(sends),
            sends=[list(x) for x in sends],
        )
    return row


async def _refusals(url: str, n: int, concurrency: int) -> int:
    """``n`` requests from one tenant as fast as ``concurrency`` allows: the refused ones."""
    body = {"model": MODEL, "prompt": "flood " + "word " * 200, "max_tokens": 48, "stream": True}
    refused = 0

    async def worker(http: aiohttp.ClientSession, count: int) -> None:
        nonlocal refused
        for _ in range(count):
            async with http.post(url, json=body, headers={"x-tenant": "flood"}) as resp:
                await resp.read()
                refused += resp.status == 429

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http, n // concurrency) for _ in range(concurrency)))
    return refused


def rejection_cost(url: str, router_pid: int, n: int) -> tuple[float, int]:
    """The router's CPU milliseconds per request of a flood it refuses (every request
    past the flood tenant's burst is a 429), nothing else running: (ms, refused)."""
    cpu0 = cpu_seconds(router_pid)
    refused = asyncio.run(_refusals(url, n, 4))
    return 1000 * (cpu_seconds(router_pid) - cpu0) / n, refused


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rounds", type=int, default=3, help="rounds of every arm, rotated")
    p.add_argument(
        "--arms", default="0,1,10", help="the fourth tenant's rate / quota per run (0: absent)"
    )
    p.add_argument("--rate", type=float, default=2.0, help="every tenant's requests/s quota")
    p.add_argument("--burst", type=float, default=4.0)
    p.add_argument("--calm", type=float, default=0.5, help="well-behaved rate / quota")
    p.add_argument("--noisy", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--keep", type=Path, help="keep the pool file, run folder and log here")
    p.add_argument(
        "--flood", type=int, default=2000, help="requests of the refusal-cost flood (0: none)"
    )
    p.add_argument("--noisy-client", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--start-unix", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.noisy_client:
        noisy_client(args)
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fair-up-") as tmp:
        folder = args.keep if args.keep is not None else Path(tmp)
        with preheat_up(pool_file(args.rate, args.burst), folder, "fair") as state:
            url = f"{state['router']['http']}/v1/completions"
            worker = next(iter(state["workers"].values()))["pid"]
            pids = {"router": int(state["router"]["pid"]), "worker": int(worker)}
            arms = [float(x) for x in args.arms.split(",")]
            order = [
                arms[(i + k) % len(arms)] for k in range(args.rounds) for i in range(len(arms))
            ]
            for k, times in enumerate(order):
                row = one_run(args, url, pids, times)
                if args.keep is not None:  # every send of the run's fourth tenant, to audit
                    sends = row.pop("sends", [])
                    (folder / f"sends-{k + 1}.json").write_text(json.dumps(sends))
                row.pop("sends", None)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
                time.sleep(3.0)  # every bucket full again
            if args.flood:
                ms, refused = rejection_cost(url, pids["router"], args.flood)
                print(
                    f"refusal cost: {args.flood} requests back to back from one tenant "
                    f"({refused} refused): router CPU {ms:.2f} ms per request"
                )
    report(rows, args)


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        "| run | fourth tenant | well-behaved TTFT p50 | p95 | their 429s | router CPU s "
        f"| its sent | served | 429 | allowed ({args.rate:g}/s x {args.seconds:g} s + "
        f"{args.burst:g}) | Retry-After p50 | Retry-After wrong (long/short/header) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        cells = [
            str(i + 1), f"{r['times']:g}x its quota" if r["times"] else "none",
            f"{r['calm_ttft_p50_ms']} ms", f"{r['calm_ttft_p95_ms']} ms",
            f"{r['calm_429']} of {r['calm_sent']}", f"{r['cpu_s']['router']:g}",
        ]  # fmt: skip
        if r["times"]:
            e = r["retry_after_errors"]
            cells += [str(r["noisy_sent"]), str(r["noisy_ok"]), str(r["noisy_429"]),
                      f"{r['noisy_allowed']:g}", f"{r['noisy_retry_after_p50_s']} s",
                      f"{e['too_long']}/{e['too_short']}/{e['header']}"]  # fmt: skip
        else:
            cells += [""] * 6
        print("| " + " | ".join(cells) + " |")
    print()
    arms = sorted({float(r["times"]) for r in rows})
    base = [r for r in rows if r["times"] == arms[0]]
    for key in ("calm_ttft_p50_ms", "calm_ttft_p95_ms"):
        xs = [float(r[key]) for r in base]
        mb = median(xs)
        print(
            f"{key}: arm {arms[0]:g}: median {mb:.1f} (runs {min(xs):.1f} to {max(xs):.1f}, "
            f"spread {100 * (max(xs) - min(xs)) / mb:.1f}% of the median)"
        )
        for arm in arms[1:]:
            ys = [float(r[key]) for r in rows if r["times"] == arm]
            print(
                f"  arm {arm:g}: median {median(ys):.1f} (runs {min(ys):.1f} to {max(ys):.1f}): "
                f"{100 * (median(ys) / mb - 1):+.1f}% against arm {arms[0]:g}"
            )
    cpu = {arm: median(r["cpu_s"]["router"] for r in rows if r["times"] == arm) for arm in arms}
    sent = {arm: median(r.get("noisy_sent", 0) for r in rows if r["times"] == arm) for arm in arms}
    print(
        "router CPU s per run, median: " + ", ".join(f"arm {a:g}: {c:.2f}" for a, c in cpu.items())
    )
    if len(arms) >= 3:
        lo, hi = arms[1], arms[-1]
        extra = sent[hi] - sent[lo]
        if extra > 0:
            print(
                f"router CPU per request past the quota (arm {hi:g} less arm {lo:g}): "
                f"{1000 * (cpu[hi] - cpu[lo]) / extra:.2f} ms ({extra:g} more requests)"
            )


if __name__ == "__main__":
    main()
