"""Overload and large-body benchmarks of the router (issue 12, items B and C).

``python -m preheat.bench.overload load``: one router over a small fixed pool of sim workers
on loopback. Capacity is measured first: the highest open-loop (Poisson) rate, in steps of
x1.5, whose admitted TTFT p99 stays within the target with no rejection, through a router
without admission. Then, at 1x, 2x and 5x that rate, requests with **no deadline** go to
two routers over the same workers, side by side: ``before`` (no default target and a bound
of the workers' ``max_num_seqs``: what b4fb4bc did) and ``after`` (the default TTFT target
and the adaptive bound). The sides alternate which runs first from one repeat to the next;
each run waits for every request to end, then ``--cooldown-s``. Per run: requests sent,
rejected %, TTFT p50/p99 of the admitted, the peak of requests outstanding at the client,
the median Retry-After of the rejected.

``python -m preheat.bench.overload bigbody``: a probe (a short completion over HTTP, one
at a time) measured alone, then while three clients each send maximal bodies back to back
(a prompt of ``--big-mb`` MB); probe p50/p99 and what the big bodies got back.
``--router-args`` picks the router's flags (e.g. ``--max-body-bytes``).

Both print a JSON summary (and ``load`` a markdown table of medians over the repeats).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import grpc

from preheat.bench.router_bench import cluster
from preheat.bench.workerproc import spawn_router
from preheat.core.percentiles import sample_quantile
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc


@dataclass
class RunResult:
    side: str
    multiple: float
    rate: float
    sent: int = 0
    ok: int = 0
    rejected: int = 0
    other_errors: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    retry_after_s: list[float] = field(default_factory=list)
    peak_outstanding: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        t = sorted(self.ttft_ms)
        return {
            "side": self.side,
            "multiple": self.multiple,
            "rate": round(self.rate, 2),
            "sent": self.sent,
            "rejected_pct": round(100.0 * self.rejected / max(1, self.sent), 1),
            "other_errors": self.other_errors,
            "ttft_p50_ms": round(percentile(t, 50), 1) if t else None,
            "ttft_p99_ms": round(percentile(t, 99), 1) if t else None,
            "peak_outstanding": self.peak_outstanding,
            "retry_after_median_s": (
                round(percentile(sorted(self.retry_after_s), 50), 2) if self.retry_after_s else None
            ),
            "errors": self.errors,
        }


def percentile(samples: Sequence[float], p: float) -> float:
    return sample_quantile(p / 100.0, samples)


def _words(n: int, salt: str) -> str:
    return " ".join(f"q{salt}x{i}" for i in range(n))


def run_request(
    side: str, rate: float, multiple: float, seed: int, i: int, prompt_tokens: int, max_tokens: int
) -> pb.GenerateRequest:
    """The ``i``-th request of one run. Every run's prompts are its own: a prompt an earlier
    run sent (the other side, a lower multiple, a sweep step) would hit the workers' prefix
    cache and make the run after it look faster than its load."""
    salt = f"{side}-{rate:g}-{multiple:g}-{seed}-{i}"
    return pb.GenerateRequest(
        request_id=salt,
        prompt=_words(prompt_tokens, salt),
        sampling=pb.SamplingParams(max_tokens=max_tokens),
    )


async def _one(
    stub: inference_pb2_grpc.InferenceStub,
    req: pb.GenerateRequest,
    res: RunResult,
    state: dict[str, int],
    timeout_s: float,
) -> None:
    t0 = time.perf_counter()
    state["out"] += 1
    res.peak_outstanding = max(res.peak_outstanding, state["out"])
    first: float | None = None
    try:
        async for chunk in stub.Generate(req, timeout=timeout_s):
            if first is None and (chunk.token_ids or chunk.text):
                first = time.perf_counter()
        res.ok += 1
        if first is not None:
            res.ttft_ms.append((first - t0) * 1e3)
    except grpc.aio.AioRpcError as e:
        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            res.rejected += 1
            md = dict(e.trailing_metadata() or ())
            with contextlib.suppress(KeyError, ValueError, TypeError):
                res.retry_after_s.append(float(md["retry-after-s"]))
        else:
            res.other_errors += 1
            res.errors[e.code().name] = res.errors.get(e.code().name, 0) + 1
    finally:
        state["out"] -= 1


async def open_loop(
    target: str,
    rate: float,
    duration_s: float,
    *,
    side: str,
    multiple: float,
    prompt_tokens: int,
    max_tokens: int,
    seed: int,
    timeout_s: float = 120.0,
) -> RunResult:
    """Poisson arrivals at ``rate`` for ``duration_s``; waits for every request to end."""
    res = RunResult(side, multiple, rate)
    rng = random.Random(seed)
    state = {"out": 0}
    tasks: list[asyncio.Task[None]] = []
    async with grpc.aio.insecure_channel(target) as ch:
        stub = inference_pb2_grpc.InferenceStub(ch)
        loop = asyncio.get_running_loop()
        start = loop.time()
        t = 0.0
        i = 0
        while True:
            t += rng.expovariate(rate)
            if t >= duration_s:
                break
            delay = start + t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            i += 1
            req = run_request(side, rate, multiple, seed, i, prompt_tokens, max_tokens)
            res.sent += 1
            tasks.append(asyncio.create_task(_one(stub, req, res, state, timeout_s)))
        await asyncio.gather(*tasks)
    return res


def _meets(res: RunResult, target_ms: float) -> bool:
    t = sorted(res.ttft_ms)
    return (
        bool(t) and res.rejected == 0 and res.other_errors == 0 and percentile(t, 99) <= target_ms
    )


async def run_load(args: argparse.Namespace) -> dict[str, object]:
    worker_args = [
        "--sim-time-scale",
        str(args.sim_time_scale),
        "--sim-load-s",
        "0",
        "--sim-warmup-s",
        "0",
    ]
    common = ["--coalesce-tokens", "8", "--coalesce-ms", "50", "--log-level", "WARNING"]
    before = [*common, "--default-ttft-target-ms", "0", "--first-token-timeout-s", "0"]
    after = [*common, "--default-ttft-target-ms", f"{args.target_ms:g}"]
    shape = {"prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens}
    out: dict[str, object] = {"args": vars(args)}
    async with cluster(worker_args, args.workers, before) as c:
        # the second router reads the same discovery file as the first
        disc = _discovery_arg(c.router.log, c)
        async with spawn_router(["--discovery", disc, *after]) as r_after:
            await asyncio.sleep(2.0)  # its first Status polls and scrapes
            capacity = args.capacity
            sweep: list[dict[str, object]] = []
            if capacity <= 0:
                rate = args.sweep_start
                while rate <= args.sweep_max:
                    res = await open_loop(
                        c.router.grpc_target,
                        rate,
                        args.sweep_s,
                        side="sweep",
                        multiple=0,
                        seed=1,
                        **shape,
                    )
                    sweep.append(res.summary())
                    print(json.dumps(res.summary()), file=sys.stderr, flush=True)
                    if not _meets(res, args.target_ms):
                        break
                    capacity = rate
                    rate *= 1.5
                    await asyncio.sleep(args.cooldown_s)
                if capacity <= 0:
                    raise SystemExit("capacity not found: lower --sweep-start")
            out["capacity_rps"] = round(capacity, 2)
            out["sweep"] = sweep
            rows: list[dict[str, object]] = []
            for rep in range(args.repeats):
                for m in args.multiples:
                    sides = [("before", c.router.grpc_target), ("after", r_after.grpc_target)]
                    if rep % 2:
                        sides.reverse()  # alternate which side runs first
                    for side, target in sides:
                        await asyncio.sleep(args.cooldown_s)
                        res = await open_loop(
                            target,
                            capacity * m,
                            args.duration_s,
                            side=side,
                            multiple=m,
                            seed=100 + rep,
                            **shape,
                        )
                        row = {**res.summary(), "repeat": rep}
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
            out["runs"] = rows
    return out


def _discovery_arg(log: Sequence[str], c: object) -> str:
    """The first router's ``--discovery`` argument (the cluster's endpoints file)."""
    from preheat.bench import router_bench

    rows = router_bench._endpoint_rows(c.workers)  # type: ignore[attr-defined]
    tmp = Path(tempfile.mkdtemp(prefix="preheat-overload-"))
    path = tmp / "endpoints.json"
    path.write_text(json.dumps(rows))
    return f"static:{path}"


def _median(xs: list[float]) -> float | None:
    return percentile(sorted(xs), 50) if xs else None


def load_table(out: dict[str, object]) -> str:
    runs = out["runs"]
    assert isinstance(runs, list)
    lines = [
        "| load | side | sent | rejected | TTFT p50 (admitted) | TTFT p99 (admitted) "
        "| peak outstanding | Retry-After median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted(
        {(r["multiple"], r["side"]) for r in runs}, key=lambda k: (k[0], k[1] != "before")
    )
    for m, side in keys:
        rs = [r for r in runs if r["multiple"] == m and r["side"] == side]

        def med(key: str, rs: list[dict[str, object]] = rs) -> str:
            v = _median([float(r[key]) for r in rs if r[key] is not None])  # type: ignore[arg-type]
            return "-" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:.1f}"

        lines.append(
            f"| {m:g}x | {side} | {med('sent')} | {med('rejected_pct')}% | {med('ttft_p50_ms')} ms "
            f"| {med('ttft_p99_ms')} ms | {med('peak_outstanding')} | "
            f"{med('retry_after_median_s')} s |"
        )
    return "\n".join(lines)


# --- big bodies --------------------------------------------------------------------------


async def _probe_loop(
    session: aiohttp.ClientSession, url: str, stop: asyncio.Event, lat: list[float]
) -> None:
    body = {"prompt": "a short probe", "max_tokens": 2}
    while not stop.is_set():
        t0 = time.perf_counter()
        async with session.post(url + "/v1/completions", json=body) as resp:
            await resp.read()
        lat.append((time.perf_counter() - t0) * 1e3)
        await asyncio.sleep(0.02)


async def _big_loop(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    stop: asyncio.Event,
    statuses: dict[int, int],
) -> None:
    while not stop.is_set():
        async with session.post(
            url + "/v1/completions", data=payload, headers={"Content-Type": "application/json"}
        ) as resp:
            await resp.read()
            statuses[resp.status] = statuses.get(resp.status, 0) + 1


def _big_payload(mb: float) -> bytes:
    """A completion body just under ``mb`` MB (a prompt of distinct words)."""
    limit = int(mb * 1e6)
    n_words = limit // 9
    payload = json.dumps({"prompt": _words(n_words, "0"), "max_tokens": 2}).encode()
    while len(payload) > limit:
        n_words = int(n_words * limit / len(payload)) - 1
        payload = json.dumps({"prompt": _words(n_words, "0"), "max_tokens": 2}).encode()
    return payload


async def run_bigsend(args: argparse.Namespace) -> dict[str, object]:
    """Three clients sending ``--big-mb`` bodies back to back for ``--duration-s`` (run as a
    process of its own, so the probe's client does not share a loop with them)."""
    payload = _big_payload(args.big_mb)
    statuses: dict[int, int] = {}
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks = [
            asyncio.create_task(_big_loop(session, args.url, payload, stop, statuses))
            for _ in range(3)
        ]
        await asyncio.sleep(args.duration_s)
        stop.set()
        await asyncio.gather(*tasks)
    return {"big_body_bytes": len(payload), "statuses": statuses}


async def run_bigbody(args: argparse.Namespace) -> dict[str, object]:
    worker_args = ["--sim-load-s", "0", "--sim-warmup-s", "0", "--sim-max-model-len", "32768"]
    router_args = ["--log-level", "WARNING", *args.router_args]
    out: dict[str, object] = {"args": vars(args), "big_body_bytes": len(_big_payload(args.big_mb))}
    async with cluster(worker_args, 1, router_args) as c:
        url = c.router.http_url
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for phase in ("alone", "with 3 big bodies"):
                lat: list[float] = []
                stop = asyncio.Event()
                sender = None
                if phase != "alone":
                    sender = await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        "preheat.bench.overload",
                        "bigsend",
                        url,
                        "--big-mb",
                        str(args.big_mb),
                        "--duration-s",
                        str(args.duration_s),
                        stdout=asyncio.subprocess.PIPE,
                    )
                    await asyncio.sleep(1.0)  # the senders are under way
                probe = asyncio.create_task(_probe_loop(session, url, stop, lat))
                await asyncio.sleep(args.duration_s - (1.0 if sender else 0.0))
                stop.set()
                await probe
                statuses: object = {}
                if sender is not None:
                    raw, _ = await sender.communicate()
                    statuses = json.loads(raw.decode().strip().splitlines()[-1])["statuses"]
                s = sorted(lat)
                out[phase] = {
                    "probes": len(s),
                    "p50_ms": round(percentile(s, 50), 1),
                    "p99_ms": round(percentile(s, 99), 1),
                    "max_ms": round(s[-1], 1),
                    "big_body_statuses": statuses,
                }
                print(json.dumps({phase: out[phase]}), file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m preheat.bench.overload", description=__doc__)
    sub = p.add_subparsers(dest="part", required=True)
    ld = sub.add_parser("load", help="1x/2x/5x of measured capacity, before vs after")
    ld.add_argument("--workers", type=int, default=2)
    ld.add_argument("--sim-time-scale", type=float, default=20.0)
    ld.add_argument("--prompt-tokens", type=int, default=256)
    ld.add_argument("--max-tokens", type=int, default=32)
    ld.add_argument("--target-ms", type=float, default=1000.0)
    ld.add_argument("--capacity", type=float, default=0.0, help="req/s; 0: measure it")
    ld.add_argument("--sweep-start", type=float, default=4.0)
    ld.add_argument("--sweep-max", type=float, default=400.0)
    ld.add_argument("--sweep-s", type=float, default=10.0)
    ld.add_argument("--duration-s", type=float, default=20.0)
    ld.add_argument("--cooldown-s", type=float, default=3.0)
    ld.add_argument("--repeats", type=int, default=1)
    ld.add_argument(
        "--multiples", type=lambda s: [float(x) for x in s.split(",")], default=[1, 2, 5]
    )
    ld.add_argument("--out", type=Path, default=None)
    bb = sub.add_parser("bigbody", help="probe latency with and without three maximal bodies")
    bb.add_argument("--big-mb", type=float, default=4.0)
    bb.add_argument("--duration-s", type=float, default=15.0)
    bb.add_argument("--router-args", nargs=argparse.REMAINDER, default=[])
    bb.add_argument("--out", type=Path, default=None)
    bs = sub.add_parser("bigsend", help="(internal) the big bodies' senders of bigbody")
    bs.add_argument("url")
    bs.add_argument("--big-mb", type=float, default=4.0)
    bs.add_argument("--duration-s", type=float, default=15.0)
    args = p.parse_args(argv)
    if args.part == "bigsend":
        print(json.dumps(asyncio.run(run_bigsend(args))))
        return 0
    if args.part == "load":
        out = asyncio.run(run_load(args))
        table = load_table(out)
    else:
        out = asyncio.run(run_bigbody(args))
        table = ""
    text = json.dumps(out, indent=1, default=str)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    if table:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
