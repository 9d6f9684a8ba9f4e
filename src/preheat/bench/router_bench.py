"""``preheat bench router``: what the router costs and what its routing buys.

Seven parts, each rerunnable alone (``--part``) and each written to its own section of
docs/benchmarks.md:

``overhead``
    Added TTFT of the proxy over going direct: one fast sim worker, one router in front of
    it; the same number of equally long, distinct prompts go direct and via the router in
    interleaved rounds (the order alternates per round), at each concurrency level.
``throughput``
    Tokens/s the proxy path sustains, per router CPU-second (``/proc/<pid>/stat`` utime +
    stime of the router process), with and without token coalescing: many concurrent long
    streams from a fast sim worker through the router, closed loop.
``pick``
    Lookaside ``Router/Pick`` decisions per router CPU-second (closed loop over gRPC), and
    the pure :func:`preheat.core.routing.scheduler.schedule` in-process over 16/64 synthetic
    endpoints per policy, with the cost of the steps around it (tokenize, block hashes,
    prefix history), to show where the time goes.
``openai``
    The OpenAI passthrough path (``/v1/chat/completions`` through the router to a worker's
    own OpenAI API) beside the gRPC proxy path, on one fake vLLM worker
    (:mod:`preheat.bench.fakeopenai`: a sim worker whose Status names a fake OpenAI API
    that streams fixed tokens): added TTFT over going direct at concurrency 1, and tokens
    per router CPU-second for many concurrent long streams, each path with and without
    coalescing.
``policies``
    A time-compressed slice of the Mooncake conversation trace replayed open loop against
    K sim workers (calibrated H100 speed, a small KV cache) behind one router per policy;
    fresh workers and router per policy, so every policy starts cold.
``pools``
    One router in front of 1, 4 or 16 pools (routing by ``model``) beside the single-pool
    form: added TTFT at concurrency 1 and Pick decisions per router CPU-second
    (:mod:`preheat.bench.router_pools`).
``tracing``
    What OpenTelemetry tracing costs the proxy: added TTFT and router CPU per request with
    tracing off, 1% sampled and every request sampled (:mod:`preheat.bench.router_tracing`).

Everything runs on this machine: client, router and workers share its cores; the per-core
figures divide by the router's own CPU time, not by wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import grpc

from preheat.bench.flagcheck import FlagCheck
from preheat.bench.workerproc import (
    ServiceProcess,
    check_sim_workers,
    spawn_nullproxy,
    spawn_router,
    spawn_service,
    spawn_worker,
)
from preheat.core.blocks import MAX_GPU_BLOCKS
from preheat.core.errors import PreheatError
from preheat.core.percentiles import sample_quantile
from preheat.core.routing.scheduler import POLICIES
from preheat.engine.simtokenizer import SimTokenizer
from preheat.load.stream import StreamRecord, stream_generate
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc
from preheat.proto.preheat.v1 import router_pb2, router_pb2_grpc
from preheat.report.markdown import write_section
from preheat.router.app import RouterConfig
from preheat.router.embedded import EmbeddedRouter
from preheat.router.endpoints.discovery import DiscoveredEndpoint
from preheat.router.endpoints.static import StaticDiscovery
from preheat.router.frontend.grpc_service import MAX_PICK_BATCH
from preheat.wire.pickclient import PickFailed, PickStream
from preheat.workload.prompts import words
from preheat.workload.traces import TraceOptions, TraceRequest, load_trace, prompt_text

PARTS: tuple[str, ...] = (
    "overhead", "throughput", "pick", "policies", "openai", "pools", "tracing"
)  # fmt: skip
DEFAULT_POLICIES: tuple[str, ...] = (
    "preheat",
    "round-robin",
    "random",
    "least-request",
    "p2c",
    "chwbl",
    "prefix-only",
    "session-only",
)
REPO = Path(__file__).resolve().parents[3]
DEFAULT_TRACE = (REPO / ".." / "shared" / "data" / "mooncake_conversation_trace.jsonl").resolve()
SIM_FAST = ["--engine", "sim", "--sim-load-s", "0.1", "--sim-warmup-s", "0.1"]
PICK_STREAM = 0  # the "batch" of a PickLoad whose decisions go over one kept PickStream


def _pick_calls(text: str) -> list[int]:
    """``1,stream,16`` -> [1, PICK_STREAM, 16]; ValueError says what is wrong."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if item == "stream":
            out.append(PICK_STREAM)
        elif item.isdigit() and 1 <= int(item) <= MAX_PICK_BATCH:
            out.append(int(item))
        else:
            raise ValueError(f"{item!r} is not 'stream' or a batch size from 1 to {MAX_PICK_BATCH}")
    return out


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _pick_calls_arg(text: str) -> str:
    try:
        _pick_calls(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


# targets stated in the router issue
TARGET_ADDED_P50_MS = 1.0
TARGET_TOKENS_PER_CORE = 20_000.0
TARGET_PICKS_PER_CORE = 5_000.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--part",
        default=",".join(PARTS),
        help=f"comma-separated parts to run (default all: {','.join(PARTS)})",
    )
    parser.add_argument("--write", type=Path, default=None, help="update this benchmarks.md")
    parser.add_argument(
        "--router-arg", action="append", default=[], help="extra `preheat router` argument"
    )
    o = parser.add_argument_group("overhead")
    o.add_argument("--concurrency", default="1,32", help="comma-separated levels")
    o.add_argument("--requests", type=int, default=200, help="requests per side and level")
    o.add_argument("--rounds", type=int, default=4, help="interleaved rounds per level")
    o.add_argument(
        "--repeat",
        type=_at_least_one,
        default=1,
        help="fresh clusters to measure in turn; the tables pool their requests and the "
        "added p50 of each run is listed",
    )
    o.add_argument("--prompt-tokens", type=int, default=256)
    o.add_argument("--max-tokens", type=int, default=8)
    o.add_argument(
        "--overhead-time-scale",
        default="0.01",
        help="sim engine speed for overhead (0.01: 100x a calibrated H100, so the engine is "
        "not the bottleneck)",
    )
    t = parser.add_argument_group("throughput")
    t.add_argument(
        "--coalesce",
        default="1:0,8:5@router,8:40@router,8:5,8:40",
        help="coalescing settings to compare, TOKENS:MS[@worker|router] comma-separated "
        "(1 = off; @ = where tokens are merged, the router's --coalesce-at, default worker)",
    )
    t.add_argument("--streams", type=int, default=64, help="concurrent streams")
    t.add_argument("--stream-tokens", type=int, default=512, help="max_tokens per stream")
    t.add_argument("--throughput-s", type=float, default=6.0, help="seconds per setting")
    t.add_argument(
        "--throughput-time-scales",
        default="1,0.001",
        help="sim engine speeds (1: H100 pacing, one token per message; 0.001: as fast as "
        "the worker can go)",
    )
    a = parser.add_argument_group("openai")
    a.add_argument(
        "--openai-requests", type=int, default=400, help="requests per path at concurrency 1"
    )
    a.add_argument(
        "--openai-coalesce",
        default="1:0,8:40",
        help="coalescing settings, TOKENS:MS comma-separated, each run on both paths (the "
        "gRPC path merges at the worker, the passthrough at the router: its only place)",
    )
    a.add_argument(
        "--openai-token-interval-ms",
        type=float,
        default=5.0,
        help="the fake OpenAI API's time between tokens in the throughput rows (5: about "
        "the wall tokens/s of the sim at time scale 1 under 64 streams on a 2-core machine, "
        "where the sleeps overshoot)",
    )
    p = parser.add_argument_group("pick")
    p.add_argument("--pick-s", type=float, default=5.0, help="seconds of closed-loop Pick")
    p.add_argument("--pick-concurrency", type=int, default=16)
    p.add_argument("--pick-prompt-tokens", type=int, default=512)
    p.add_argument(
        "--pick-batch",
        default="1,stream,16",
        type=_pick_calls_arg,
        help="calls to measure, comma-separated: 1 = Router/Pick, N > 1 = Router/PickBatch "
        "of N, stream = Router/PickStream (one kept stream)",
    )
    p.add_argument(
        "--pick-input",
        default="text,ids",
        help="how prompts come, comma-separated: text (the router tokenizes) or ids (a "
        "gateway that tokenized sends prompt_token_ids)",
    )
    p.add_argument(
        "--endpoints", default="16,64", help="synthetic endpoint counts for in-process schedule"
    )
    p.add_argument(
        "--inprocess-s", type=float, default=0.3, help="CPU seconds per in-process measurement"
    )
    w = parser.add_argument_group("policies")
    w.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    w.add_argument("--workers", type=int, default=4, help="sim workers behind the router")
    w.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    w.add_argument("--trace-start-s", type=float, default=600.0, help="slice start (trace time)")
    w.add_argument("--trace-duration-s", type=float, default=210.0, help="slice length")
    w.add_argument("--rate-scale", type=float, default=6.0, help="replay this many times faster")
    w.add_argument(
        "--token-scale",
        type=float,
        default=0.25,
        help="prompt tokens per trace token (0.25: a 512-token hash block is 128 words)",
    )
    w.add_argument("--gpu-blocks", type=int, default=16000, help="KV blocks (16 tokens) per worker")
    w.add_argument(
        "--max-output-tokens", type=int, default=64, help="clip output lengths (CPU budget)"
    )
    w.add_argument("--max-input-tokens", type=int, default=32_000, help="clip prompt lengths")
    w.add_argument("--policy-time-scale", default="1", help="sim engine speed (1 = H100)")


# --- helpers -------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    rest = stat.rsplit(")", 1)[1].split()  # fields after the command name, from field 3
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _q(values: Sequence[float], q: float) -> float:
    return sample_quantile(q, list(values)) if values else float("nan")


def _ttfts_ms(records: Sequence[StreamRecord]) -> list[float]:
    return [r.ttft_s * 1e3 for r in records if r.ok]


@dataclass
class Cluster:
    workers: list[ServiceProcess]
    router: ServiceProcess

    @property
    def router_pid(self) -> int:
        return self.router.proc.pid


@contextlib.asynccontextmanager
async def cluster(
    worker_args: Sequence[str], k: int, router_args: Sequence[str]
) -> AsyncIterator[Cluster]:
    """``k`` sim workers (started in parallel) and one router over a static endpoints file;
    yields once a Pick through the router succeeds and every worker has had time to be seen."""
    too_many = check_sim_workers("the cluster's workers", k)
    if too_many is not None:
        raise ValueError(too_many)
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="preheat-bench-")))
        workers = list(
            await asyncio.gather(
                *(
                    stack.enter_async_context(
                        spawn_worker(
                            [*worker_args, "--worker-id", f"w{i}", "--log-level", "WARNING"]
                        )
                    )
                    for i in range(k)
                )
            )
        )
        endpoints = _endpoint_rows(workers)
        path = tmp / "endpoints.json"
        path.write_text(json.dumps(endpoints))
        router = await stack.enter_async_context(
            spawn_router(["--discovery", f"static:{path}", *router_args])
        )
        await _wait_routable(router, k)
        yield Cluster(workers, router)


def _endpoint_rows(workers: Sequence[ServiceProcess]) -> list[dict[str, str]]:
    """The workers as a static discovery file lists them."""
    return [
        {"address": w.grpc_target, "id": f"w{i}", "metrics_url": f"{w.http_url}/metrics"}
        for i, w in enumerate(workers)
    ]


def _discovered(c: Cluster) -> list[DiscoveredEndpoint]:
    """The cluster's workers as its router discovers them."""
    return [
        DiscoveredEndpoint(address=r["address"], id=r["id"], metrics_url=r["metrics_url"])
        for r in _endpoint_rows(c.workers)
    ]


async def _wait_routable(router: ServiceProcess, k: int, timeout_s: float = 30.0) -> None:
    """Until Pick has returned every one of the ``k`` endpoints' ids at least once, or (for
    policies that keep picking one) a Pick has succeeded and two more seconds passed."""
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    first_ok: float | None = None
    async with grpc.aio.insecure_channel(router.grpc_target) as ch:
        stub = router_pb2_grpc.RouterStub(ch)
        i = 0
        while time.monotonic() < deadline:
            i += 1
            req = pb.GenerateRequest(
                request_id=f"ready-{i}",
                prompt=words(4, 999_000 + i),
                sampling=pb.SamplingParams(max_tokens=1),
            )
            try:
                resp = await stub.Pick(router_pb2.PickRequest(request=req), timeout=2)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
                continue
            seen.add(resp.endpoint.worker_id)
            seen.update(a.worker_id for a in resp.alternates)
            first_ok = first_ok or time.monotonic()
            if len(seen) >= k or time.monotonic() - first_ok > 2.0:
                return
            await asyncio.sleep(0.05)
    tail = "\n".join(router.log[-20:])
    raise RuntimeError(f"router had no routable endpoint within {timeout_s} s:\n{tail}")


async def _scrape_prefix(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """(hits, queries) of a worker's ``vllm:prefix_cache_*`` counters, in tokens."""
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(url) as resp:
        text = await resp.text()
    got = {"vllm:prefix_cache_hits": 0.0, "vllm:prefix_cache_queries": 0.0}
    for fam in text_string_to_metric_families(text):
        if fam.name in got:
            got[fam.name] += sum(s.value for s in fam.samples if not s.name.endswith("_created"))
    return got["vllm:prefix_cache_hits"], got["vllm:prefix_cache_queries"]


async def _prefix_totals(workers: Sequence[ServiceProcess]) -> tuple[float, float]:
    async with aiohttp.ClientSession() as s:
        pairs = await asyncio.gather(*(_scrape_prefix(s, f"{w.http_url}/metrics") for w in workers))
    return sum(h for h, _ in pairs), sum(q for _, q in pairs)


async def _closed_loop(
    one: Callable[[int], Awaitable[None]], lanes: int, *, count: int | None, seconds: float | None
) -> float:
    """Runs ``one(i)`` on ``lanes`` concurrent lanes until ``count`` calls or ``seconds``
    passed; returns the wall time."""
    next_i = 0
    start = time.monotonic()
    stop_at = None if seconds is None else start + seconds

    async def lane() -> None:
        nonlocal next_i
        while (count is None or next_i < count) and (stop_at is None or time.monotonic() < stop_at):
            i = next_i
            next_i += 1
            await one(i)

    async with asyncio.TaskGroup() as tg:
        for _ in range(lanes):
            tg.create_task(lane())
    return time.monotonic() - start


async def _side(
    stub: pb_grpc.InferenceStub, prompts: Sequence[str], lanes: int, tag: str, max_tokens: int
) -> list[StreamRecord]:
    """Every prompt once, on ``lanes`` concurrent lanes (closed loop)."""
    out: list[StreamRecord] = []

    async def one(i: int) -> None:
        req = _gen(f"{tag}-{i}", prompts[i], max_tokens)
        out.append(await stream_generate(stub, req, timeout_s=30))

    await _closed_loop(one, lanes, count=len(prompts), seconds=None)
    return out


Picker = Callable[[router_pb2.PickRequest], Awaitable[router_pb2.PickResponse]]


async def _lookaside_side(
    pick: Picker,
    worker: Callable[[str], pb_grpc.InferenceStub],
    prompts: Sequence[str],
    lanes: int,
    tag: str,
    max_tokens: int,
) -> list[StreamRecord]:
    """Every prompt once the lookaside way: ``pick`` at the router (unary ``Pick`` or a
    kept ``PickStream``), then Generate straight to the endpoint it names
    (``worker(address)``, a kept channel). The TTFT counts from before the pick."""
    out: list[StreamRecord] = []

    async def one(i: int) -> None:
        req = _gen(f"{tag}-{i}", prompts[i], max_tokens)
        t0 = time.monotonic()
        try:
            picked = await pick(router_pb2.PickRequest(request=req))
        except grpc.aio.AioRpcError as e:
            out.append(StreamRecord(request_id=req.request_id, ok=False, error=e.code().name))
            return
        except PickFailed as e:
            out.append(StreamRecord(request_id=req.request_id, ok=False, error=e.code))
            return
        except PreheatError as e:
            out.append(StreamRecord(request_id=req.request_id, ok=False, error=e.code.name))
            return
        stub = worker(picked.endpoint.address)
        before_s = time.monotonic() - t0  # the Pick and finding the endpoint's stub
        rec = await stream_generate(stub, req, timeout_s=30)
        rec.ttft_s += before_s
        rec.e2e_s += before_s
        out.append(rec)

    await _closed_loop(one, lanes, count=len(prompts), seconds=None)
    return out


async def _streams(
    stub: pb_grpc.InferenceStub, lanes: int, seconds: float | None, count: int | None, tokens: int
) -> tuple[list[StreamRecord], float]:
    """Long streams of ``tokens`` on ``lanes`` lanes until ``seconds`` or ``count``."""
    out: list[StreamRecord] = []

    async def one(i: int) -> None:
        req = _gen(f"t{i}", words(16, 20_000 + i), tokens)
        out.append(await stream_generate(stub, req, timeout_s=120))

    wall = await _closed_loop(one, lanes, count=count, seconds=seconds)
    return out, wall


def _gen(rid: str, prompt: str, max_tokens: int, session: str = "") -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=rid,
        prompt=prompt,
        sampling=pb.SamplingParams(max_tokens=max_tokens),
        session_id=session,
    )


def _header(command: str, load_before: float) -> list[str]:
    return [
        f"Command: `{command}`. Machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, measured {time.strftime('%Y-%m-%d %H:%M')};",
        f"1-minute load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after "
        "(this benchmark's processes included; other work on the machine skews the figures).",
        "",
    ]


def _ms2(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f} ms"


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


@dataclass
class PartResult:
    name: str
    body: str
    failed: int = 0
    notes: list[str] = field(default_factory=list)


# --- part 1: overhead --------------------------------------------------------------------


OVERHEAD_SIDES = ("direct", "null hop", "router", "lookaside", "lookaside stream", "embedded")
PICK_SIDES = ("lookaside", "lookaside stream", "embedded")

Samples = dict[int, dict[str, list[StreamRecord]]]  # level -> side -> records
CpuSeconds = dict[int, dict[str, float]]  # level -> side -> CPU-s of its hop process


async def _overhead_once(
    args: argparse.Namespace, levels: Sequence[int]
) -> tuple[Samples, CpuSeconds]:
    """One fresh cluster (a worker, the router, a null hop): every path at every level, in
    rounds whose order rotates."""
    worker_args = [*SIM_FAST, "--sim-time-scale", args.overhead_time_scale]
    router_args = ["--policy", "preheat", "--coalesce-tokens", "1", *args.router_arg]
    sides = OVERHEAD_SIDES
    samples: Samples = {}
    cpu_s: CpuSeconds = {}
    async with (
        cluster(worker_args, 1, router_args) as c,
        spawn_nullproxy(c.workers[0].grpc_target) as null,
        grpc.aio.insecure_channel(c.workers[0].grpc_target) as direct_ch,
        grpc.aio.insecure_channel(null.grpc_target) as null_ch,
        grpc.aio.insecure_channel(c.router.grpc_target) as router_ch,
        PickStream(router_ch) as pick_stream,
        EmbeddedRouter(StaticDiscovery(_discovered(c)), RouterConfig()) as embedded,
    ):
        await embedded.wait_ready(len(c.workers), timeout_s=30)
        channels = (direct_ch, null_ch, router_ch)
        stubs = {
            side: pb_grpc.InferenceStub(ch) for side, ch in zip(sides[:3], channels, strict=True)
        }
        router_stub = router_pb2_grpc.RouterStub(router_ch)
        pickers: dict[str, Picker] = {
            "lookaside": lambda req: router_stub.Pick(req, timeout=30),
            "lookaside stream": lambda req: pick_stream.pick(req, timeout_s=30),
            "embedded": lambda req: embedded.pick(req, timeout_s=30),
        }
        opened: list[grpc.aio.Channel] = []
        kept = {c.workers[0].grpc_target: stubs["direct"]}

        def worker(address: str) -> pb_grpc.InferenceStub:
            if address not in kept:
                opened.append(grpc.aio.insecure_channel(address))
                kept[address] = pb_grpc.InferenceStub(opened[-1])
            return kept[address]

        async def side_run(
            side: str, prompts: list[str], lanes: int, tag: str
        ) -> list[StreamRecord]:
            if side in pickers:
                return await _lookaside_side(
                    pickers[side], worker, prompts, lanes, tag, args.max_tokens
                )
            return await _side(stubs[side], prompts, lanes, tag, args.max_tokens)

        pids = {"null hop": null.proc.pid, "router": c.router_pid}
        # the embedded router decides in this process: no hop, and no router CPU to count
        pids |= {side: c.router_pid for side in pickers if side != "embedded"}
        # warm every path (connections, the router's endpoint state)
        for side in sides:
            warm = [words(16, 7_000 + i) for i in range(20)]
            await side_run(side, warm, 1, f"warm-{side}")
        for level in levels:
            per_round = max(1, args.requests // args.rounds)
            recs: dict[str, list[StreamRecord]] = {side: [] for side in sides}
            cpu = dict.fromkeys(pids, 0.0)
            for rnd in range(args.rounds):
                turn = rnd % len(sides)
                order = sides[turn:] + sides[:turn]  # rotate who goes first
                for k, side in enumerate(order):
                    # distinct prompts per side, round and level: no prefix-cache hits anywhere
                    seed0 = 10_000_000 * level + 100_000 * rnd + 20_000 * sides.index(side)
                    prompts = [words(args.prompt_tokens, seed0 + i) for i in range(per_round)]
                    pid = pids.get(side)
                    cpu0 = cpu_seconds(pid) if pid else 0.0
                    recs[side] += await side_run(side, prompts, level, f"{k}-{level}-{rnd}")
                    if pid:
                        cpu[side] += cpu_seconds(pid) - cpu0
            samples[level], cpu_s[level] = recs, cpu
        for ch in opened:
            await ch.close()
    return samples, cpu_s


def _added_p50(recs: dict[str, list[StreamRecord]], side: str) -> float:
    return _q(_ttfts_ms(recs[side]), 0.5) - _q(_ttfts_ms(recs["direct"]), 0.5)


async def part_overhead(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    levels = [int(c) for c in args.concurrency.split(",")]
    sides = OVERHEAD_SIDES
    rows: list[str] = []
    lookaside_rows: list[str] = []
    failed = 0
    added_p50_c1: float | None = None
    lookaside_p50_c1: dict[str, float] = {}
    recs_by_level: Samples = {level: {side: [] for side in sides} for level in levels}
    cpu_by_level: CpuSeconds = {level: {} for level in levels}  # paths with a hop process
    per_run: dict[str, list[float]] = {side: [] for side in sides[1:]}  # added p50 at the 1st level
    for _ in range(args.repeat):
        samples, cpu_s = await _overhead_once(args, levels)
        for level in levels:
            for side in sides:
                recs_by_level[level][side] += samples[level][side]
            for side, used in cpu_s[level].items():
                cpu_by_level[level][side] = cpu_by_level[level].get(side, 0.0) + used
        for side in per_run:
            per_run[side].append(_added_p50(samples[levels[0]], side))
        print("added p50 per run:", {k: [round(x, 2) for x in v] for k, v in per_run.items()})
    for level in levels:
        recs, cpu = recs_by_level[level], cpu_by_level[level]
        d, h, r = (_ttfts_ms(recs[side]) for side in sides[:3])
        failed += sum(1 for s in recs.values() for x in s if not x.ok)
        a50, a99 = _q(r, 0.5) - _q(d, 0.5), _q(r, 0.99) - _q(d, 0.99)
        if level == 1:
            added_p50_c1 = a50
        cells = [f"| {level} | {_q(d, 0.5):.2f} | {_q(d, 0.99):.2f}"]
        for side in PICK_SIDES:
            la = _ttfts_ms(recs[side])
            l50, l99 = _q(la, 0.5) - _q(d, 0.5), _q(la, 0.99) - _q(d, 0.99)
            if level == 1:
                lookaside_p50_c1[side] = l50
            per_pick = f"{1e3 * cpu[side] / max(len(recs[side]), 1):.2f}" if side in cpu else "-"
            cells.append(f"{_q(la, 0.5):.2f} | **{l50:+.2f}** | {l99:+.2f} | {per_pick}")
        lookaside_rows.append(" | ".join(cells) + " |")
        print(lookaside_rows[-1], flush=True)
        n = len(recs["router"])
        rows.append(
            f"| {level} | {n} | {_q(d, 0.5):.2f} | {_q(h, 0.5):.2f} | {_q(r, 0.5):.2f}"
            f" | {_q(h, 0.5) - _q(d, 0.5):+.2f} | **{a50:+.2f}**"
            f" | {_q(d, 0.99):.2f} | {_q(h, 0.99):.2f} | {_q(r, 0.99):.2f}"
            f" | {_q(h, 0.99) - _q(d, 0.99):+.2f} | **{a99:+.2f}**"
            f" | {1e3 * cpu['null hop'] / max(n, 1):.2f}"
            f" | {1e3 * cpu['router'] / max(n, 1):.2f} |"
        )
        print(rows[-1], flush=True)
    names = {
        "null hop": "null hop",
        "router": "proxy",
        **dict(zip(PICK_SIDES, ("Pick", "PickStream", "embedded"), strict=True)),
    }
    runs_line = "; ".join(
        f"{names[side]} {', '.join(f'{x:+.2f}' for x in xs)}" for side, xs in per_run.items()
    )
    cmd = (
        f"preheat bench router --part overhead --concurrency {args.concurrency}"
        f" --requests {args.requests} --rounds {args.rounds} --prompt-tokens {args.prompt_tokens}"
        f" --max-tokens {args.max_tokens} --overhead-time-scale {args.overhead_time_scale}"
        f" --repeat {args.repeat}"
    )
    met = added_p50_c1 is not None and added_p50_c1 < TARGET_ADDED_P50_MS
    stream_p50 = lookaside_p50_c1.get("lookaside stream")
    unary_p50 = lookaside_p50_c1.get("lookaside")
    stream_met = stream_p50 is not None and stream_p50 < TARGET_ADDED_P50_MS
    unary_met = unary_p50 is not None and unary_p50 < TARGET_ADDED_P50_MS
    embedded_p50 = lookaside_p50_c1.get("embedded")
    embedded_met = embedded_p50 is not None and embedded_p50 < TARGET_ADDED_P50_MS
    body = "\n".join(
        [
            "## Router: added TTFT over going direct (proxy and lookaside)",
            "",
            *_header(cmd, load0),
            f"One sim worker at time scale {args.overhead_time_scale} (the engine is "
            f"{1 / float(args.overhead_time_scale):.0f}x a calibrated H100, so it is not the",
            "bottleneck). In front of it: one `preheat router` (policy preheat, coalescing off) "
            "and, as the floor,",
            "a null hop (`preheat.bench.nullproxy`: a grpc.aio server that forwards Generate "
            "unchanged, nothing else).",
            f"Each level sends {args.requests} requests on each path ({args.prompt_tokens}-token "
            f"distinct prompts, {args.max_tokens} output tokens),",
            f"interleaved in {args.rounds} rounds whose order rotates, on each of {args.repeat} "
            "fresh cluster(s) in turn (the",
            "tables pool them). TTFT is measured by the client. Router minus null hop",
            "is what the router's own work adds (tokenizing and hashing the prompt, the "
            "endpoint snapshot,",
            "the decision, metrics and logs); null hop minus direct is the price of any grpc.aio "
            "hop in Python.",
            "CPU ms/request is the hop process's utime+stime over its requests, divided by them.",
            "",
            "Proxy: the client sends Generate to the router, which forwards it to the worker.",
            "",
            "| concurrency | requests/path | TTFT p50 direct ms | p50 null hop ms | p50 router ms"
            " | added p50 null hop ms | added p50 router ms | TTFT p99 direct ms | p99 null hop ms"
            " | p99 router ms | added p99 null hop ms | added p99 router ms"
            " | null hop CPU ms/request | router CPU ms/request |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "Lookaside: the client asks the router where to go, then sends Generate straight to "
            "the worker it",
            "names (a kept channel per worker); its TTFT counts from before the question. "
            "`Pick` is a unary call",
            "per request; `PickStream` is one stream the client keeps open and shares between "
            "its concurrent",
            "requests (`preheat.wire.pickclient.PickStream`); embedded is the router's view and "
            "scheduler in the client's",
            "own process (`preheat.router.embedded.EmbeddedRouter`, the router's defaults, the "
            "same static discovery),",
            "so the decision is a function call. Router CPU is per decision (none for "
            "embedded: it runs in the client).",
            "",
            "| concurrency | TTFT p50 direct ms | TTFT p99 direct ms | p50 Pick ms"
            " | added p50 Pick ms | added p99 Pick ms | router CPU ms/Pick | p50 PickStream ms"
            " | added p50 PickStream ms | added p99 PickStream ms | router CPU ms/PickStream"
            " | p50 embedded ms | added p50 embedded ms | added p99 embedded ms | router CPU |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *lookaside_rows,
            "",
            f"Target: under {TARGET_ADDED_P50_MS:g} ms added p50 TTFT at concurrency 1:"
            f" the embedded router adds {_ms2(embedded_p50)} ({_met(embedded_met)});"
            f" lookaside over a kept `PickStream` {_ms2(stream_p50)} ({_met(stream_met)});"
            f" lookaside with unary `Pick` {_ms2(unary_p50)} ({_met(unary_met)});"
            f" the proxy {_ms2(added_p50_c1)} ({_met(met)}). Failed requests: {failed}.",
            "",
            f"Added p50 at concurrency {levels[0]}, run by run: {runs_line}.",
        ]
    )
    return PartResult("router-overhead", body, failed)


# --- part 2: throughput ------------------------------------------------------------------


async def part_throughput(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    rows: list[str] = []
    failed = 0
    verdicts: list[str] = []
    for scale in args.throughput_time_scales.split(","):
        worker_args = [*SIM_FAST, "--sim-time-scale", scale]
        worker_args += ["--sim-max-num-seqs", str(max(256, args.streams))]
        best_coalesced = 0.0
        for setting in args.coalesce.split(","):
            spec, _, where = setting.partition("@")
            n_tok, _, ms = spec.partition(":")
            where = where or "worker"
            router_args = ["--policy", "round-robin", "--coalesce-tokens", n_tok]
            router_args += ["--coalesce-ms", ms or "5", "--coalesce-at", where, *args.router_arg]
            async with (
                cluster(worker_args, 1, router_args) as c,
                grpc.aio.insecure_channel(c.router.grpc_target) as ch,
            ):
                stub = pb_grpc.InferenceStub(ch)
                await _streams(stub, 8, None, 16, 32)  # warm
                r_cpu0, w_cpu0 = cpu_seconds(c.router_pid), cpu_seconds(c.workers[0].proc.pid)
                recs, wall = await _streams(
                    stub, args.streams, args.throughput_s, None, args.stream_tokens
                )
                r_cpu = cpu_seconds(c.router_pid) - r_cpu0
                w_cpu = cpu_seconds(c.workers[0].proc.pid) - w_cpu0
            tokens = sum(r.completion_tokens for r in recs)
            frames = sum(len(r.itl_s) + (1 if r.completion_tokens else 0) for r in recs)
            failed += sum(1 for r in recs if not r.ok)
            per_core = tokens / r_cpu if r_cpu > 0 else float("nan")
            if int(n_tok) > 1:
                best_coalesced = max(best_coalesced, per_core)
            label = "off" if int(n_tok) <= 1 else f"{n_tok} tokens / {ms} ms at the {where}"
            rows.append(
                f"| {scale} | {label} | {len(recs)} | {wall:.1f} | {tokens / wall:,.0f}"
                f" | {frames / wall:,.0f} | {tokens / max(frames, 1):.1f} | {r_cpu:.2f}"
                f" | {1e3 * r_cpu / max(frames, 1):.3f} | **{per_core:,.0f}** | {w_cpu:.2f} |"
            )
            print(rows[-1], flush=True)
        verdicts.append(
            f"time scale {scale}: {best_coalesced:,.0f} tokens per router CPU-s "
            f"{_met(best_coalesced >= TARGET_TOKENS_PER_CORE)}"
        )
    cmd = (
        f"preheat bench router --part throughput --coalesce {args.coalesce}"
        f" --streams {args.streams} --stream-tokens {args.stream_tokens}"
        f" --throughput-s {args.throughput_s:g}"
        f" --throughput-time-scales {args.throughput_time_scales}"
    )
    body = "\n".join(
        [
            "## Router: proxy tokens/s per core, with and without coalescing",
            "",
            *_header(cmd, load0),
            f"{args.streams} concurrent streams (closed loop, {args.stream_tokens} tokens "
            "each, 16-token prompts) from one sim",
            "worker through one `preheat router` (policy round-robin), per sim time scale and "
            "coalescing setting",
            "(a fresh worker and router for each row). Client, router and worker share the "
            "machine, so",
            "tokens/s (wall) is bounded by all three; tokens per router CPU-second (utime+stime "
            "of the router",
            "process) is what one router core sustains. At time scale 1 the sim decodes at "
            "H100 speed and",
            "the worker sends about one token per message (as vLLM streams); at 0.001 it runs "
            "far ahead of",
            "the gRPC path and packs many tokens into each message, so the router handles "
            "fewer, larger",
            "messages. Tokens per client frame with coalescing off = tokens per worker message.",
            "Coalescing *at the router* merges only what reaches it, one message per token; *at "
            "the worker*",
            "(the default, `--coalesce-at worker`) the router asks each worker in the request's "
            "`coalesce` field,",
            "so the worker -> router hop carries the merged messages too and the router reads "
            "fewer of them.",
            "",
            "| sim time scale | coalescing | streams done | wall s | tokens/s (wall)"
            " | client frames/s | tokens per frame | router CPU s | router CPU ms per frame"
            " | tokens per router CPU-s | worker CPU s |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Target: >= {TARGET_TOKENS_PER_CORE:,.0f} tokens/s per core with coalescing: "
            + "; ".join(verdicts)
            + f". Failed streams: {failed}.",
        ]
    )
    return PartResult("router-throughput", body, failed)


# --- part 3: pick ---------------------------------------------------------------------------


def _bench_inprocess(counts: Sequence[int], prompt_tokens: int, seconds: float) -> list[str]:
    """Rows: per endpoint count and policy, schedule() calls per CPU-second; plus the steps
    around it for one prompt."""
    from preheat.core.blocks import block_hashes
    from preheat.core.routing.baselines import SchedulerState
    from preheat.core.routing.config import SchedulerConfig
    from preheat.core.routing.history import PrefixHistory
    from preheat.core.routing.scheduler import schedule
    from preheat.core.routing.types import Endpoint, RequestInfo, RoutingContext
    from preheat.engine.costmodel import CostModel

    def per_cpu_s(fn: Callable[[int], object]) -> float:
        n, t0 = 0, time.process_time()
        while (elapsed := time.process_time() - t0) < seconds:
            for _ in range(50):
                fn(n)
                n += 1
        return n / elapsed

    rng = random.Random(1)
    tok = SimTokenizer()
    prompt = words(prompt_tokens, 4242)
    tokens = tok.encode(prompt)
    hashes = tuple(block_hashes(tokens, 16))
    cost = CostModel.default()
    rows: list[str] = []
    history = PrefixHistory()
    for e in range(64):
        history.record(f"w{e}", hashes[: rng.randint(0, len(hashes))], 0.0)
    steps = {
        f"tokenize {prompt_tokens} words (sim tokenizer)": lambda i: tok.encode(prompt),
        f"block hashes of {prompt_tokens} tokens": lambda i: block_hashes(tokens, 16),
        "prefix history match (64 endpoints)": lambda i: history.match(hashes, 1.0),
    }
    for name, fn in steps.items():
        rate = per_cpu_s(fn)
        rows.append(f"| {name} | - | - | {rate:,.0f} | {1e6 / rate:,.1f} |")
    for n in counts:
        eps = tuple(
            Endpoint(
                id=f"w{e}",
                address=f"10.0.0.{e}:50051",
                num_running=rng.randint(0, 64),
                num_waiting=rng.randint(0, 4),
                kv_cache_usage=rng.random(),
                metrics_at=0.5,
                cached_blocks=frozenset(hashes[: rng.randint(0, len(hashes))]),
                observed_ttft_ms=rng.uniform(20, 200),
            )
            for e in range(n)
        )
        matches = {ep.id: rng.randint(0, len(hashes)) for ep in eps[: n // 2]}
        for policy in POLICIES:
            config = SchedulerConfig(policy=policy)
            state = [SchedulerState()]

            def call(
                i: int,
                config: SchedulerConfig = config,
                eps: tuple[Endpoint, ...] = eps,
                matches: dict[str, int] = matches,
                state: list[SchedulerState] = state,
            ) -> object:
                req = RequestInfo(f"r{i}", prompt_tokens, hashes, session_id=f"s{i % 97}")
                ctx = RoutingContext(now=1.0, request=req, endpoints=eps, history_matches=matches)
                decision, state[0] = schedule(ctx, config, cost, state[0])
                return decision

            rate = per_cpu_s(call)
            rows.append(f"| schedule() | {n} | {policy} | {rate:,.0f} | {1e6 / rate:,.1f} |")
    return rows


@dataclass
class PickLoad:
    server: str
    batch: int
    input: str
    decisions: int
    wall_s: float
    cpu_s: float
    lat_ms: list[float]
    errors: list[str]

    @property
    def per_core(self) -> float:
        return self.decisions / self.cpu_s if self.cpu_s > 0 else float("nan")

    @property
    def call(self) -> str:
        if self.batch == PICK_STREAM:
            return "PickStream (one kept stream)"
        return "Pick" if self.batch == 1 else f"PickBatch of {self.batch}"

    def row(self) -> str:
        return (
            f"| {self.server} | {self.call}"
            f" | {self.input} | {self.decisions:,} | {self.wall_s:.1f}"
            f" | {self.decisions / self.wall_s:,.0f} | {self.cpu_s:.2f} | **{self.per_core:,.0f}**"
            f" | {_q(self.lat_ms, 0.5):.2f} | {_q(self.lat_ms, 0.99):.2f} | {len(self.errors)} |"
        )


async def _pick_load(
    server: str,
    target: str,
    pid: int,
    prompts: Sequence[str],
    args: argparse.Namespace,
    batch: int = 1,
    prompt_input: str = "text",
) -> PickLoad:
    """Closed-loop Pick (``batch`` 1), PickBatch, or PickStream (``batch`` PICK_STREAM: the
    callers share one kept stream) calls against ``target`` for ``--pick-s``; CPU of process
    ``pid``. Latency is per call (per decision on the stream)."""
    lat_ms: list[float] = []
    errors: list[str] = []
    decided = 0
    async with grpc.aio.insecure_channel(target) as ch, PickStream(ch) as stream:
        stub = router_pb2_grpc.RouterStub(ch)

        tokenizer = SimTokenizer()
        token_ids = [tokenizer.encode(p) for p in prompts] if prompt_input == "ids" else []

        def pick(i: int) -> router_pb2.PickRequest:
            req = _gen(f"p{i}", prompts[i % len(prompts)], 16, session=f"s{i % 97}")
            if token_ids:
                req.prompt_token_ids.ids.extend(token_ids[i % len(prompts)])
            return router_pb2.PickRequest(request=req)

        async def one(i: int) -> None:
            nonlocal decided
            t0 = time.monotonic()
            try:
                if batch == PICK_STREAM:
                    await stream.pick(pick(i), timeout_s=10)
                    decided += 1
                elif batch == 1:
                    await stub.Pick(pick(i), timeout=10)
                    decided += 1
                else:
                    items = [pick(i * batch + k) for k in range(batch)]
                    resp = await stub.PickBatch(
                        router_pb2.PickBatchRequest(picks=items), timeout=10
                    )
                    for r in resp.results:
                        if r.HasField("error"):
                            errors.append(f"{r.error.code}: {r.error.message}")
                        else:
                            decided += 1
            except grpc.aio.AioRpcError as e:
                errors.append(f"{e.code().name}: {e.details()}")
                return
            except PickFailed as e:
                errors.append(str(e))
                return
            lat_ms.append((time.monotonic() - t0) * 1e3)

        await _closed_loop(one, 4, count=200 // max(batch, 1) + 1, seconds=None)  # warm
        lat_ms.clear()
        decided = 0
        cpu0 = cpu_seconds(pid)
        wall = await _closed_loop(one, args.pick_concurrency, count=None, seconds=args.pick_s)
        cpu = cpu_seconds(pid) - cpu0
    return PickLoad(server, batch, prompt_input, decided, wall, cpu, lat_ms, errors)


async def part_pick(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    worker_args = [*SIM_FAST, "--sim-time-scale", "0.01"]
    router_args = ["--policy", "preheat", *args.router_arg]
    prompts = [words(args.pick_prompt_tokens, 30_000 + i) for i in range(64)]
    batches = _pick_calls(args.pick_batch)
    inputs = args.pick_input.split(",")
    loads: list[PickLoad] = []
    async with cluster(worker_args, args.workers, router_args) as c:
        async with spawn_nullproxy(c.workers[0].grpc_target) as null:
            for b in batches:
                loads.append(
                    await _pick_load(
                        "null hop (constant answer)",
                        null.grpc_target,
                        null.proc.pid,
                        prompts,
                        args,
                        b,
                    )
                )
        for b in batches:
            for how in inputs:
                loads.append(
                    await _pick_load(
                        "preheat router", c.router.grpc_target, c.router_pid, prompts, args, b, how
                    )
                )
    errors = [e for ld in loads for e in ld.errors]
    ours = [ld for ld in loads if ld.server == "preheat router"]
    per_core = max(ld.per_core for ld in ours)
    unary = max((ld.per_core for ld in ours if ld.batch == 1), default=float("nan"))
    counts = [int(x) for x in args.endpoints.split(",")]
    inproc = _bench_inprocess(counts, args.pick_prompt_tokens, args.inprocess_s)
    cmd = (
        f"preheat bench router --part pick --workers {args.workers} --pick-s {args.pick_s:g}"
        f" --pick-concurrency {args.pick_concurrency}"
        f" --pick-prompt-tokens {args.pick_prompt_tokens} --pick-batch {args.pick_batch}"
        f" --pick-input {args.pick_input}"
        f" --endpoints {args.endpoints}"
    )
    met = per_core >= TARGET_PICKS_PER_CORE
    body = "\n".join(
        [
            "## Router: Pick decisions per core",
            "",
            *_header(cmd, load0),
            f"Closed loop over gRPC: {args.pick_concurrency} concurrent callers of "
            f"`Router/Pick` ({args.pick_prompt_tokens}-token prompts, 97 sessions) against",
            f"one `preheat router` (policy preheat) over {args.workers} idle sim workers "
            "for "
            f"{args.pick_s:g} s; per core = decisions per router CPU-second.",
            "",
            "The null hop (`preheat.bench.nullproxy`) answers every Pick with a constant "
            "without reading it: the",
            "grpc.aio floor for a unary call in Python on this machine. `PickBatch` carries "
            "several requests in",
            "one call (each decided exactly as `Pick` would, in order): a gateway that batches "
            "pays the RPC once. `PickStream`: the callers share one stream the client keeps "
            "open, one message",
            "each way per decision (`preheat.wire.pickclient.PickStream`).",
            "",
            "Prompts come as text (the router tokenizes them) or as `prompt_token_ids` (a "
            "gateway that",
            "tokenized once sends the ids; the router still hashes the blocks and decides).",
            "",
            "| server | call | prompt | decisions | wall s | decisions/s (wall) | server CPU s "
            "| decisions per server CPU-s | call p50 ms | call p99 ms | errors |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *(ld.row() for ld in loads),
            "",
            f"Target: >= {TARGET_PICKS_PER_CORE:,.0f} decisions/s per core: {_met(met)} "
            f"({per_core:,.0f} best; unary Pick {unary:,.0f}).",
            "",
            "Where the time goes, in process (one core, `time.process_time`): the pure "
            "`schedule()` per policy",
            "over synthetic endpoints (random load, cached blocks and history matches), and "
            "the steps the",
            f"router runs around it for one {args.pick_prompt_tokens}-token prompt.",
            "",
            "| step | endpoints | policy | calls per CPU-s | µs per call |",
            "|---|---:|---|---:|---:|",
            *inproc,
        ]
    )
    if errors:
        body += f"\n\nFirst Pick error: `{errors[0]}`."
    return PartResult("router-pick", body, len(errors))


# --- part 4: policies ----------------------------------------------------------------------


@dataclass
class PolicyRun:
    policy: str
    records: list[StreamRecord]
    wall_s: float
    worker_hits: float
    worker_queries: float
    router_cpu_s: float


async def _replay(
    stub: pb_grpc.InferenceStub,
    reqs: Sequence[TraceRequest],
    prompts: Sequence[str],
    max_out: int,
) -> tuple[list[StreamRecord], float]:
    """Sends every request at its arrival time (open loop); returns records and wall time."""
    records: list[StreamRecord] = []
    start = time.monotonic()

    async def one(r: TraceRequest, prompt: str) -> None:
        delay = start + r.arrival_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        req = _gen(f"m{r.index}", prompt, min(r.output_tokens, max_out), r.session_id)
        records.append(await stream_generate(stub, req, timeout_s=300))

    async with asyncio.TaskGroup() as tg:
        for r, p in zip(reqs, prompts, strict=True):
            tg.create_task(one(r, p))
    return records, time.monotonic() - start


async def part_policies(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    opts = TraceOptions(
        start_s=args.trace_start_s,
        duration_s=args.trace_duration_s,
        rate_scale=args.rate_scale,
        sessions="root",
        max_input_tokens=args.max_input_tokens,
        token_scale=args.token_scale,
    )
    reqs = load_trace(args.trace, opts)
    prompts = [prompt_text(r) for r in reqs]
    policies = [p for p in args.policies.split(",") if p]
    worker_args = [
        "--engine", "sim", "--sim-load-s", "0.1", "--sim-warmup-s", "0.1",
        "--sim-time-scale", args.policy_time_scale,
        "--sim-num-gpu-blocks", str(args.gpu_blocks),
    ]  # fmt: skip
    runs: list[PolicyRun] = []
    for policy in policies:
        router_args = ["--policy", policy, "--coalesce-tokens", "8", "--coalesce-ms", "5"]
        async with (
            cluster(worker_args, args.workers, [*router_args, *args.router_arg]) as c,
            grpc.aio.insecure_channel(c.router.grpc_target) as ch,
        ):
            h0, q0 = await _prefix_totals(c.workers)
            cpu0 = cpu_seconds(c.router_pid)
            records, wall = await _replay(
                pb_grpc.InferenceStub(ch), reqs, prompts, args.max_output_tokens
            )
            cpu = cpu_seconds(c.router_pid) - cpu0
            h1, q1 = await _prefix_totals(c.workers)
        run = PolicyRun(policy, records, wall, h1 - h0, q1 - q0, cpu)
        runs.append(run)
        print(_policy_row(run), flush=True)
    n_sessions = len({r.session_id for r in reqs})
    n_in = sum(r.input_tokens for r in reqs)
    bound = _shared_cache_bound(reqs)
    span = reqs[-1].arrival_s if reqs else 0.0
    cmd = (
        f"preheat bench router --part policies --policies {args.policies}"
        f" --workers {args.workers} --trace-start-s {args.trace_start_s:g}"
        f" --trace-duration-s {args.trace_duration_s:g} --rate-scale {args.rate_scale:g}"
        f" --gpu-blocks {args.gpu_blocks} --max-output-tokens {args.max_output_tokens}"
        f" --max-input-tokens {args.max_input_tokens} --token-scale {args.token_scale:g}"
        f" --policy-time-scale {args.policy_time_scale}"
    )
    by = {r.policy: r for r in runs}
    verdict = ""
    if "preheat" in by:
        ours = _q(_ttfts_ms(by["preheat"].records), 0.95)
        behind = [
            p for p, r in by.items() if p != "preheat" and _q(_ttfts_ms(r.records), 0.95) <= ours
        ]
        verdict = f"Target: preheat ahead of every baseline on TTFT p95: {_met(not behind)}" + (
            f" (not ahead of: {', '.join(behind)})." if behind else "."
        )
    failed = sum(1 for r in runs for x in r.records if not x.ok)
    body = "\n".join(
        [
            "## Router: routing policies on a shared-prefix session workload",
            "",
            *_header(cmd, load0),
            f"Trace: `{args.trace.name}`, the slice "
            f"[{args.trace_start_s:g} s, {args.trace_start_s + args.trace_duration_s:g} s) "
            f"of trace time replayed {args.rate_scale:g}x faster, open loop:",
            f"{len(reqs)} requests over {span:.1f} s ({len(reqs) / max(span, 1e-9):.1f} req/s), "
            f"{n_in / max(len(reqs), 1):,.0f} prompt tokens on average, {n_sessions} sessions;",
            f"one cache shared by all workers and never evicting would hit {bound:.1%} of "
            "the prompt tokens.",
            "",
            "- Sessions: the Mooncake trace has none, so a request's session is its "
            "conversation root: the first",
            "  hash id after the prefix every request shares (here every request starts with "
            "block 0, a shared",
            "  system prompt, so the very first id would put the whole trace in one session).",
            f"- Prompts: each 512-token hash block becomes {reqs[0].block_tokens if reqs else 0}"
            f" fixed words (token scale {args.token_scale:g};",
            "  one word = one sim token; the last block is partial and scaled in proportion), "
            "so equal hash ids",
            "  are equal text and the workers' 16-token prefix cache sees the trace's sharing; "
            f"clipped to {args.max_input_tokens:,}",
            f"  tokens. Outputs clipped to {args.max_output_tokens} tokens (the token stream "
            "of all requests shares",
            "  2 cores with router, workers and client).",
            f"- Workers: {args.workers} sim workers at time scale {args.policy_time_scale} "
            f"(calibrated H100, Llama-3-8B) with {args.gpu_blocks:,}",
            f"  KV blocks of 16 tokens ({args.gpu_blocks * 16:,} tokens) each; fresh workers "
            "and a fresh router per",
            "  policy, so every policy starts cold. Router coalescing 8 tokens / 5 ms.",
            "- Hit rate (client) = sum of usage.cached_tokens / sum of prompt tokens; hit rate "
            "(workers) = delta of",
            "  vllm:prefix_cache_hits / vllm:prefix_cache_queries summed over the workers "
            "(a preempted request is",
            "  queried again).",
            "",
            "| policy | requests | failed | hit rate (client) | hit rate (workers) | TTFT p50 ms"
            " | TTFT p95 ms | TTFT p99 ms | e2e p50 ms | router CPU s | wall s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *(_policy_row(r) for r in runs),
            "",
            verdict,
        ]
    )
    return PartResult("router-policies", body, failed)


def _shared_cache_bound(reqs: Sequence[TraceRequest]) -> float:
    """Prompt-token hit rate of one infinite prefix cache shared by every worker (blocks in
    trace order; a partial last block never hits, the last token is always computed)."""
    seen: set[tuple[int, ...]] = set()
    hit = total = 0
    for r in reqs:
        ids = r.prefix_block_ids
        k = 0
        while k < len(ids) and ids[: k + 1] in seen:
            k += 1
        full = r.input_tokens // r.block_tokens
        hit += min(k, full) * r.block_tokens if k else 0
        total += r.input_tokens
        seen.update(ids[: i + 1] for i in range(len(ids)))
    return hit / total if total else 0.0


def _policy_row(r: PolicyRun) -> str:
    ok = [x for x in r.records if x.ok]
    prompt = sum(x.prompt_tokens for x in ok)
    cached = sum(x.cached_tokens for x in ok)
    t = _ttfts_ms(r.records)
    e2e = [x.e2e_s * 1e3 for x in ok]
    whr = r.worker_hits / r.worker_queries if r.worker_queries else float("nan")
    return (
        f"| {r.policy} | {len(r.records)} | {len(r.records) - len(ok)}"
        f" | {cached / max(prompt, 1):.1%} | {whr:.1%} | {_q(t, 0.5):,.0f}"
        f" | **{_q(t, 0.95):,.0f}** | {_q(t, 0.99):,.0f} | {_q(e2e, 0.5):,.0f}"
        f" | {r.router_cpu_s:.1f} | {r.wall_s:.1f} |"
    )


# --- part 5: the OpenAI passthrough path --------------------------------------------------

OPENAI_SIDES = ("grpc direct", "grpc router", "openai direct", "openai router")
FAKE_MODEL = "fake-model"  # preheat.bench.fakeopenai.MODEL (not imported: aiohttp app)


@dataclass
class OpenAICluster:
    fake: ServiceProcess  # the sim worker's gRPC/HTTP ports
    openai_url: str  # the fake OpenAI API, direct
    router: ServiceProcess

    @property
    def router_pid(self) -> int:
        return self.router.proc.pid


@contextlib.asynccontextmanager
async def openai_cluster(
    fake_args: Sequence[str], router_args: Sequence[str]
) -> AsyncIterator[OpenAICluster]:
    """One fake vLLM worker (:mod:`preheat.bench.fakeopenai`) and a router over it; yields
    once a chat request through the router came back from the fake API."""
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="preheat-bench-")))
        fake = await stack.enter_async_context(
            spawn_service(
                "fakeopenai",
                [*fake_args],
                module="preheat.bench.fakeopenai",
                ready_event="fakeopenai_ready",
            )
        )
        ready = next(json.loads(x) for x in fake.log if "fakeopenai_ready" in x)
        openai_url = f"http://127.0.0.1:{int(ready['openai_port'])}"
        path = tmp / "endpoints.json"
        path.write_text(json.dumps(_endpoint_rows([fake])))
        router = await stack.enter_async_context(
            spawn_router(["--discovery", f"static:{path}", *router_args])
        )
        await _wait_routable(router, 1)
        await _wait_passthrough(router)
        yield OpenAICluster(fake, openai_url, router)


async def _wait_passthrough(router: ServiceProcess, timeout_s: float = 30.0) -> None:
    """Until a chat request through the router is answered by the fake OpenAI API (the
    router has read the worker's ``openai_port``), not by the gRPC path."""
    deadline = time.monotonic() + timeout_s
    body = _chat_body("ready", 1, stream=False)
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, ValueError):
                async with http.post(f"{router.http_url}/v1/chat/completions", json=body) as r:
                    if r.status == 200 and str((await r.json()).get("id", "")).startswith(
                        "chatcmpl-fake"
                    ):
                        return
            await asyncio.sleep(0.1)
    tail = "\n".join(router.log[-20:])
    raise RuntimeError(f"the router did not pass OpenAI requests through in {timeout_s} s:\n{tail}")


def _chat_body(prompt: str, max_tokens: int, *, stream: bool = True) -> dict[str, object]:
    body: dict[str, object] = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


_TOKEN = b'" tok"'  # what each of the fake API's token events carries once
_FINISHED = b'"finish_reason":"length"'


async def stream_chat(
    http: aiohttp.ClientSession, base: str, rid: str, prompt: str, max_tokens: int
) -> StreamRecord:
    """One streamed chat completion; TTFT at the first token event. Counts the fake API's
    token events in the raw bytes (no JSON parsing: the client's CPU is shared)."""
    rec = StreamRecord(request_id=rid, ok=False)
    start = time.monotonic()
    finished = done = False
    tail = b""
    try:
        async with http.post(
            f"{base}/v1/chat/completions", json=_chat_body(prompt, max_tokens)
        ) as resp:
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                rec.status_code = str(resp.status)
                return rec
            async for data in resp.content.iter_any():
                seen = tail + data
                n = seen.count(_TOKEN) - tail.count(_TOKEN)
                if n:
                    rec.tokens_arrived(start, time.monotonic(), n)
                finished = finished or _FINISHED in seen
                done = done or b"data: [DONE]" in seen
                if b'{"error"' in seen:
                    rec.error = seen.decode(errors="replace")[-300:]
                tail = seen[-64:]
        rec.e2e_s = time.monotonic() - start
        rec.ok = finished and done and not rec.error
        if not rec.ok and not rec.error:
            rec.error = "stream ended without a finish reason and [DONE]"
    except aiohttp.ClientError as e:
        rec.e2e_s = time.monotonic() - start
        rec.error = f"{type(e).__name__}: {e}"
    return rec


async def _openai_side(
    http: aiohttp.ClientSession,
    base: str,
    prompts: Sequence[str],
    lanes: int,
    tag: str,
    max_tokens: int,
) -> list[StreamRecord]:
    out: list[StreamRecord] = []

    async def one(i: int) -> None:
        out.append(await stream_chat(http, base, f"{tag}-{i}", prompts[i], max_tokens))

    await _closed_loop(one, lanes, count=len(prompts), seconds=None)
    return out


async def _openai_latency(
    args: argparse.Namespace,
) -> tuple[dict[str, list[StreamRecord]], dict[str, float]]:
    """Every path at concurrency 1 on one fresh cluster, in rounds whose order rotates;
    the router's CPU seconds per path."""
    fake_args = ["--sim-time-scale", args.overhead_time_scale]
    router_args = ["--policy", "preheat", "--coalesce-tokens", "1", *args.router_arg]
    sides = OPENAI_SIDES
    recs: dict[str, list[StreamRecord]] = {side: [] for side in sides}
    cpu = dict.fromkeys(sides, 0.0)
    async with (
        openai_cluster(fake_args, router_args) as c,
        grpc.aio.insecure_channel(c.fake.grpc_target) as direct_ch,
        grpc.aio.insecure_channel(c.router.grpc_target) as router_ch,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        stubs = {
            "grpc direct": pb_grpc.InferenceStub(direct_ch),
            "grpc router": pb_grpc.InferenceStub(router_ch),
        }
        bases = {"openai direct": c.openai_url, "openai router": c.router.http_url}

        async def run(side: str, prompts: list[str], tag: str) -> list[StreamRecord]:
            if side in stubs:
                return await _side(stubs[side], prompts, 1, tag, args.max_tokens)
            return await _openai_side(http, bases[side], prompts, 1, tag, args.max_tokens)

        for side in sides:  # warm every path (connections, the router's endpoint state)
            await run(side, [words(16, 7_000 + i) for i in range(20)], f"warm-{side}")
        per_round = max(1, args.openai_requests // args.rounds)
        for rnd in range(args.rounds):
            turn = rnd % len(sides)
            for k, side in enumerate(sides[turn:] + sides[:turn]):
                seed0 = 50_000_000 + 100_000 * rnd + 20_000 * sides.index(side)
                prompts = [words(args.prompt_tokens, seed0 + i) for i in range(per_round)]
                cpu0 = cpu_seconds(c.router_pid) if "router" in side else 0.0
                recs[side] += await run(side, prompts, f"{k}-{rnd}")
                if "router" in side:
                    cpu[side] += cpu_seconds(c.router_pid) - cpu0
    return recs, cpu


@dataclass
class _ThroughputRow:
    path: str
    coalescing: str
    streams: int
    wall_s: float
    tokens: int
    router_cpu_s: float
    failed: int

    @property
    def per_core(self) -> float:
        return self.tokens / self.router_cpu_s if self.router_cpu_s > 0 else float("nan")


async def _openai_throughput(args: argparse.Namespace, path: str, setting: str) -> _ThroughputRow:
    """Closed-loop long streams through the router on one path, on a fresh cluster."""
    n_tok, _, ms = setting.partition(":")
    where = "worker" if path == "grpc" else "router"
    router_args = ["--policy", "round-robin", "--coalesce-tokens", n_tok]
    router_args += ["--coalesce-ms", ms or "5", "--coalesce-at", where]
    # a closed loop of long streams is not overload: no adaptive bound (it would answer 429
    # while TTFT grows with the streams), only the worker's max_num_seqs
    router_args += ["--default-ttft-target-ms", "0", *args.router_arg]
    fake_args = [
        "--sim-time-scale",
        "1",
        "--token-interval-ms",
        f"{args.openai_token_interval_ms:g}",
    ]
    async with (
        openai_cluster(fake_args, router_args) as c,
        grpc.aio.insecure_channel(c.router.grpc_target) as ch,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        stub = pb_grpc.InferenceStub(ch)

        async def streams(
            lanes: int, seconds: float | None, count: int | None, tokens: int
        ) -> tuple[list[StreamRecord], float]:
            if path == "grpc":
                return await _streams(stub, lanes, seconds, count, tokens)
            out: list[StreamRecord] = []

            async def one(i: int) -> None:
                prompt = words(16, 30_000 + i)
                out.append(await stream_chat(http, c.router.http_url, f"t{i}", prompt, tokens))

            return out, await _closed_loop(one, lanes, count=count, seconds=seconds)

        await streams(8, None, 16, 32)  # warm
        cpu0 = cpu_seconds(c.router_pid)
        recs, wall = await streams(args.streams, args.throughput_s, None, args.stream_tokens)
        cpu = cpu_seconds(c.router_pid) - cpu0
    label = "off" if int(n_tok) <= 1 else f"{n_tok} tokens / {ms} ms at the {where}"
    return _ThroughputRow(
        path=path,
        coalescing=label,
        streams=len(recs),
        wall_s=wall,
        tokens=sum(r.completion_tokens for r in recs),
        router_cpu_s=cpu,
        failed=sum(1 for r in recs if not r.ok),
    )


async def part_openai(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    recs, cpu = await _openai_latency(args)
    failed = sum(1 for rs in recs.values() for r in rs if not r.ok)
    added: dict[str, float] = {}
    lat_rows: list[str] = []
    for path in ("grpc", "openai"):
        d = _ttfts_ms(recs[f"{path} direct"])
        r = _ttfts_ms(recs[f"{path} router"])
        n = len(recs[f"{path} router"])
        added[path] = _q(r, 0.5) - _q(d, 0.5)
        lat_rows.append(
            f"| {'gRPC proxy' if path == 'grpc' else 'OpenAI passthrough'} | {n}"
            f" | {_q(d, 0.5):.2f} | {_q(r, 0.5):.2f} | **{added[path]:+.2f}**"
            f" | {_q(d, 0.99):.2f} | {_q(r, 0.99):.2f} | {_q(r, 0.99) - _q(d, 0.99):+.2f}"
            f" | {1e3 * cpu[f'{path} router'] / max(n, 1):.2f} |"
        )
        print(lat_rows[-1], flush=True)
    tp_rows: list[str] = []
    best: dict[str, float] = {}
    for setting in args.openai_coalesce.split(","):
        for path in ("grpc", "openai"):
            row = await _openai_throughput(args, path, setting)
            failed += row.failed
            best[path] = max(best.get(path, 0.0), row.per_core)
            tp_rows.append(
                f"| {'gRPC proxy' if path == 'grpc' else 'OpenAI passthrough'}"
                f" | {row.coalescing} | {row.streams} | {row.wall_s:.1f}"
                f" | {row.tokens / row.wall_s:,.0f} | {row.router_cpu_s:.2f}"
                f" | **{row.per_core:,.0f}** | {row.failed} |"
            )
            print(tp_rows[-1], flush=True)
    cmd = (
        f"preheat bench router --part openai --openai-requests {args.openai_requests}"
        f" --rounds {args.rounds} --prompt-tokens {args.prompt_tokens}"
        f" --max-tokens {args.max_tokens} --overhead-time-scale {args.overhead_time_scale}"
        f" --openai-coalesce {args.openai_coalesce} --streams {args.streams}"
        f" --stream-tokens {args.stream_tokens} --throughput-s {args.throughput_s:g}"
        f" --openai-token-interval-ms {args.openai_token_interval_ms:g}"
    )
    body = "\n".join(
        [
            "## Router: the OpenAI passthrough path beside the gRPC path",
            "",
            *_header(cmd, load0),
            "One fake vLLM worker (`preheat.bench.fakeopenai`): a sim worker for gRPC "
            "Generate and Status, whose",
            "Status names a fake OpenAI API in the same process (`openai_port`), as a vLLM "
            "worker's names vLLM's own",
            "API; the fake streams fixed tokens, one SSE event each, as vLLM does. One "
            "`preheat router` in front",
            "(`/v1/chat/completions` is passed through to the fake API; gRPC Generate is "
            "proxied to the sim).",
            "The router's work on the passthrough: read the body's routing fields, render "
            "the chat (no template",
            "here: the sim tokenizer's flattening) and tokenize it, hash blocks, decide, "
            "forward the body and relay",
            "the events (finding event ends, the first token and the usage); on the gRPC "
            "path: tokenize, hash,",
            "decide, forward, relay messages.",
            "",
            f"Added TTFT at concurrency 1: {args.openai_requests} requests per path "
            f"({args.prompt_tokens}-token distinct prompts, {args.max_tokens} output tokens),",
            f"direct and through the router, interleaved in {args.rounds} rounds whose order "
            "rotates; the sim at time scale",
            f"{args.overhead_time_scale}. The client is aiohttp for OpenAI (TTFT at the first "
            "token event) and grpc.aio for",
            "gRPC (first token message); router CPU ms/request is the router process's "
            "utime+stime over its requests.",
            "",
            "| path | requests | TTFT p50 direct ms | p50 router ms | added p50 ms"
            " | TTFT p99 direct ms | p99 router ms | added p99 ms | router CPU ms/request |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *lat_rows,
            "",
            f"Tokens per router CPU-second: {args.streams} concurrent streams (closed loop, "
            f"{args.stream_tokens} tokens each, 16-token",
            "prompts) through the router for "
            f"{args.throughput_s:g} s, a fresh cluster per row. The gRPC rows stream from the "
            "sim at time scale 1",
            "(H100 pacing, one token per message, as the *proxy tokens/s per core* section's); "
            "the OpenAI rows from",
            f"the fake API at one token per {args.openai_token_interval_ms:g} ms per stream. "
            "gRPC coalescing merges at the worker",
            "(the router asks it in the request); the passthrough can merge only at the router "
            "(events after the first",
            "go out in one write of up to N events or M ms). The router runs with "
            "`--default-ttft-target-ms 0` here:",
            "the adaptive bound on requests in flight would refuse part of a closed loop of "
            "long streams with 429",
            "as their TTFT grows; only the worker's `max_num_seqs` bounds them.",
            "",
            "| path | coalescing | streams done | wall s | tokens/s (wall) | router CPU s"
            " | tokens per router CPU-s | failed |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
            *tp_rows,
            "",
            f"Added p50 TTFT at concurrency 1: OpenAI passthrough {_ms2(added['openai'])}, "
            f"gRPC proxy {_ms2(added['grpc'])}. Best tokens per router CPU-s: OpenAI "
            f"passthrough {best.get('openai', float('nan')):,.0f}, gRPC proxy "
            f"{best.get('grpc', float('nan')):,.0f}. Failed requests: {failed}.",
        ]
    )
    return PartResult("router-openai", body, failed)


# --- entry -----------------------------------------------------------------------------------


Part = Callable[[argparse.Namespace], Awaitable[PartResult]]
_PARTS: dict[str, Part] = {
    "overhead": part_overhead,
    "throughput": part_throughput,
    "pick": part_pick,
    "policies": part_policies,
    "openai": part_openai,
}


def problems(args: argparse.Namespace) -> list[str]:
    """The common flags out of range, at once, before any part starts a process (``--rounds
    0`` divided by zero after a cluster had started; ``--workers 100000`` started that many
    worker processes at once)."""
    c = FlagCheck()
    c.listed("--concurrency", args.concurrency, int, 1)
    c.number("--requests", args.requests, 1)
    c.number("--rounds", args.rounds, 1)
    c.number("--prompt-tokens", args.prompt_tokens, 1)
    c.number("--max-tokens", args.max_tokens, 1)
    c.listed("--overhead-time-scale", args.overhead_time_scale, float, 0, strict=True)
    c.number("--streams", args.streams, 1)
    c.number("--stream-tokens", args.stream_tokens, 1)
    c.number("--throughput-s", args.throughput_s, 0, strict=True)
    c.number("--pick-s", args.pick_s, 0, strict=True)
    c.number("--pick-concurrency", args.pick_concurrency, 1)
    c.number("--pick-prompt-tokens", args.pick_prompt_tokens, 1)
    c.names("--policies", args.policies, POLICIES)
    workers = check_sim_workers("--workers", args.workers)
    if workers is not None:
        c.problems.append(workers)
    c.number("--trace-start-s", args.trace_start_s, 0)
    c.number("--trace-duration-s", args.trace_duration_s, 0, strict=True)
    c.number("--rate-scale", args.rate_scale, 0, strict=True)
    c.number("--gpu-blocks", args.gpu_blocks, 1, high=MAX_GPU_BLOCKS)
    c.number("--max-input-tokens", args.max_input_tokens, 1)
    c.listed("--policy-time-scale", args.policy_time_scale, float, 0, strict=True)
    return c.problems


async def run_router_bench(args: argparse.Namespace, more: Mapping[str, Part] | None = None) -> int:
    """The parts ``--part`` names; ``more``: parts built on this module's helpers
    (``pools``: :mod:`preheat.bench.router_pools`, which imports this one)."""
    known = {**_PARTS, **(more or {})}
    parts = [p for p in args.part.split(",") if p]
    unknown = [p for p in parts if p not in known]
    if unknown:
        raise SystemExit(f"unknown --part {','.join(unknown)}; choose from {','.join(PARTS)}")
    bad = problems(args)
    if bad:
        print(f"preheat bench router: {'; '.join(bad)}", file=sys.stderr)
        return 2
    failed = 0
    for name in parts:
        print(f"\n== router bench: {name}", flush=True)
        t0 = time.monotonic()
        result = await known[name](args)
        print(f"\n{result.body}\n\n({name} took {time.monotonic() - t0:.0f} s)", flush=True)
        failed += result.failed
        if args.write is not None:
            write_section(args.write, result.name, result.body)
            print(f"wrote {args.write}", flush=True)
    return 1 if failed else 0
