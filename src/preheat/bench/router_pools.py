"""``preheat bench router --part pools``: what routing by ``model`` costs.

One router in front of several pools finds each request's pool by its ``model`` (the
router's ``preheat.router.pools``); this part measures whether that path costs more than
the single-pool one. One sim worker per pool (``--model mK``, so each pool's worker serves
its pool's model), and side by side, all up at once over the same workers:

- the single-pool form (a list of endpoints, ``--pool``/``--model``: how a router ran
  before it served several pools),
- the several-pool form (``pools:``) with each count of ``--pool-counts`` (default 1, 4, 16).

Two figures per router: the TTFT it adds over going direct to pool 0's worker at
concurrency 1 (gRPC Generate naming ``m0``; interleaved rounds whose order rotates, as the
``overhead`` part does), and closed-loop ``Router/Pick`` decisions per router CPU-second,
the requests naming every pool's model in turn (one endpoint per pool, so every router
decides among as many endpoints and only the lookup and the per-pool state differ).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from preheat.bench.router_bench import (
    SIM_FAST,
    TARGET_ADDED_P50_MS,
    PartResult,
    _closed_loop,
    _header,
    _q,
    _ttfts_ms,
    cpu_seconds,
)
from preheat.bench.workerproc import ServiceProcess, spawn_router, spawn_worker
from preheat.load.stream import StreamRecord, stream_generate
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc
from preheat.proto.preheat.v1 import router_pb2, router_pb2_grpc
from preheat.workload.prompts import words

DIRECT = "direct"
SINGLE = "single-pool file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("pools")
    g.add_argument(
        "--pool-counts",
        default="1,4,16",
        help="pools behind the router, comma-separated (each also beside the single-pool form)",
    )
    g.add_argument(
        "--pools-requests", type=int, default=200, help="requests per router at concurrency 1"
    )
    g.add_argument(
        "--pools-idle-s", type=float, default=3.0, help="seconds of no traffic to measure idle CPU"
    )


@dataclass
class Setup:
    """One router of the comparison."""

    label: str
    pools: int
    router: ServiceProcess | None = None
    records: list[StreamRecord] = field(default_factory=list)
    proxy_cpu_s: float = 0.0
    decisions: int = 0
    pick_cpu_s: float = 0.0
    pick_wall_s: float = 0.0
    pick_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    idle_cpu_share: float = 0.0  # router CPU-s per wall second with no request

    @property
    def per_core(self) -> float:
        return self.decisions / self.pick_cpu_s if self.pick_cpu_s > 0 else float("nan")

    @property
    def per_core_net(self) -> float:
        """Decisions per router CPU-s less what it spends idle (polling its pools' workers)."""
        busy = self.pick_cpu_s - self.idle_cpu_share * self.pick_wall_s
        return self.decisions / busy if busy > 0 else float("nan")


def model(k: int) -> str:
    return f"m{k}"


def discovery(workers: Sequence[ServiceProcess], pools: int, single: bool) -> object:
    """The static discovery file's content: the single-pool list, or ``pools`` pools."""
    rows = [
        {"address": w.grpc_target, "id": f"p{k}-w0", "metrics_url": f"{w.http_url}/metrics"}
        for k, w in enumerate(workers)
    ]
    if single:
        return rows[:1]
    return {
        "pools": [
            {"pool": f"p{k}", "model": model(k), "endpoints": [rows[k]]} for k in range(pools)
        ]
    }


def _gen(rid: str, prompt: str, max_tokens: int, name: str) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=rid,
        prompt=prompt,
        model=name,
        sampling=pb.SamplingParams(max_tokens=max_tokens),
    )


async def _wait_pools(router: ServiceProcess, pools: int, timeout_s: float = 60.0) -> None:
    """Until a Pick for every pool's model has succeeded."""
    deadline = time.monotonic() + timeout_s
    todo = set(range(pools))
    last = ""
    async with grpc.aio.insecure_channel(router.grpc_target) as ch:
        stub = router_pb2_grpc.RouterStub(ch)
        i = 0
        while todo and time.monotonic() < deadline:
            k = min(todo)
            i += 1
            req = _gen(f"ready-{i}", words(4, 990_000 + i), 1, model(k))
            try:
                await stub.Pick(router_pb2.PickRequest(request=req), timeout=2)
                todo.discard(k)
            except grpc.aio.AioRpcError as e:
                last = f"{e.code().name}: {e.details()}"
                await asyncio.sleep(0.1)
    if todo:
        tail = "\n".join(router.log[-20:])
        raise RuntimeError(
            f"router over {pools} pools: no Pick for {sorted(todo)[:4]} within {timeout_s} s "
            f"({last}):\n{tail}"
        )


async def _one_side(
    stub: pb_grpc.InferenceStub, prompts: Sequence[str], tag: str, max_tokens: int
) -> list[StreamRecord]:
    """Every prompt once, one at a time, for pool 0's model."""
    return [
        await stream_generate(stub, _gen(f"{tag}-{i}", p, max_tokens, model(0)), timeout_s=30)
        for i, p in enumerate(prompts)
    ]


async def _pick(
    setup: Setup, prompts: Sequence[str], args: argparse.Namespace, seconds: float, warm: bool
) -> None:
    """Closed-loop Pick against ``setup``'s router for ``seconds``, every pool in turn."""
    assert setup.router is not None
    pid = setup.router.proc.pid
    async with grpc.aio.insecure_channel(setup.router.grpc_target) as ch:
        stub = router_pb2_grpc.RouterStub(ch)
        lat: list[float] = []
        count = 0

        async def one(i: int) -> None:
            nonlocal count
            req = _gen(f"pick-{i}", prompts[i % len(prompts)], 16, model(i % setup.pools))
            t0 = time.monotonic()
            try:
                await stub.Pick(router_pb2.PickRequest(request=req), timeout=10)
            except grpc.aio.AioRpcError as e:
                setup.errors.append(f"{e.code().name}: {e.details()}")
                return
            lat.append((time.monotonic() - t0) * 1e3)
            count += 1

        if warm:
            await _closed_loop(one, 4, count=100, seconds=None)
            lat.clear()
            count = 0
        cpu0 = cpu_seconds(pid)
        wall = await _closed_loop(one, args.pick_concurrency, count=None, seconds=seconds)
        setup.pick_cpu_s += cpu_seconds(pid) - cpu0
        setup.pick_wall_s += wall
        setup.decisions += count
        setup.pick_ms += lat


def _row(s: Setup, direct: list[float]) -> str:
    r = _ttfts_ms(s.records)
    a50, a99 = _q(r, 0.5) - _q(direct, 0.5), _q(r, 0.99) - _q(direct, 0.99)
    n = max(len(s.records), 1)
    form = "list + `--pool`/`--model`" if s.label == SINGLE else "`pools:`"
    return (
        f"| {s.pools} | {form} | {len(s.records)} | {_q(r, 0.5):.2f} | **{a50:+.2f}**"
        f" | {a99:+.2f} | {1e3 * s.proxy_cpu_s / n:.2f} | {100 * s.idle_cpu_share:.1f}"
        f" | {s.decisions:,} | **{s.per_core:,.0f}** | {s.per_core_net:,.0f}"
        f" | {_q(s.pick_ms, 0.5):.2f} | {len(s.errors)} |"
    )


async def part_pools(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    counts = [int(c) for c in args.pool_counts.split(",") if c]
    if not counts or min(counts) < 1:
        raise SystemExit(
            f"--pool-counts: positive counts, comma-separated (got {args.pool_counts})"
        )
    n = max(counts)
    setups = [Setup(SINGLE, 1)] + [Setup(f"{c} pools", c) for c in counts]
    worker_args = [
        *SIM_FAST,
        "--sim-time-scale",
        args.overhead_time_scale,
        "--log-level",
        "WARNING",
    ]
    router_args = ["--policy", "preheat", "--coalesce-tokens", "1", *args.router_arg]
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="preheat-pools-")))
        workers = list(
            await asyncio.gather(
                *(
                    stack.enter_async_context(
                        spawn_worker([*worker_args, "--model", model(k), "--worker-id", f"p{k}-w0"])
                    )
                    for k in range(n)
                )
            )
        )
        for i, s in enumerate(setups):
            path = tmp / f"endpoints-{i}.json"
            path.write_text(json.dumps(discovery(workers, s.pools, s.label == SINGLE)))
            named = ["--pool", "p0", "--model", model(0)] if s.label == SINGLE else []
            s.router = await stack.enter_async_context(
                spawn_router(["--discovery", f"static:{path}", *named, *router_args])
            )
        for s in setups:
            assert s.router is not None
            await _wait_pools(s.router, s.pools)
        channels = [grpc.aio.insecure_channel(workers[0].grpc_target)]
        channels += [grpc.aio.insecure_channel(s.router.grpc_target) for s in setups if s.router]
        for ch in channels:
            stack.push_async_callback(ch.close)
        stubs = [pb_grpc.InferenceStub(ch) for ch in channels]
        sides: list[Setup | None] = [None, *setups]  # None: direct
        direct: list[StreamRecord] = []
        for j, stub in enumerate(stubs):  # warm every path
            await _one_side(stub, [words(16, 7_000 + i) for i in range(20)], f"warm{j}", 4)
        # what each router spends with no request (polling its pools' workers), all at once
        pids = [s.router.proc.pid for s in setups if s.router is not None]
        idle0, t0 = [cpu_seconds(p) for p in pids], time.monotonic()
        await asyncio.sleep(args.pools_idle_s)
        wall = time.monotonic() - t0
        for s, pid, c0 in zip(setups, pids, idle0, strict=True):
            s.idle_cpu_share = (cpu_seconds(pid) - c0) / wall
        per_round = max(1, args.pools_requests // args.rounds)
        for rnd in range(args.rounds):
            turn = rnd % len(sides)
            for j in list(range(turn, len(sides))) + list(range(turn)):
                seed0 = 100_000 * rnd + 20_000 * j  # distinct prompts: no prefix-cache hits
                prompts = [words(args.prompt_tokens, seed0 + i) for i in range(per_round)]
                side = sides[j]
                pid = side.router.proc.pid if side is not None and side.router else 0
                cpu0 = cpu_seconds(pid) if pid else 0.0
                recs = await _one_side(stubs[j], prompts, f"r{rnd}-{j}", args.max_tokens)
                if side is None:
                    direct += recs
                else:
                    side.records += recs
                    side.proxy_cpu_s += cpu_seconds(pid) - cpu0
        pick_prompts = [words(args.pick_prompt_tokens, 30_000 + i) for i in range(64)]
        for rnd in range(args.rounds):  # the Pick loads in rounds too, the order rotating
            turn = rnd % len(setups)
            for s in setups[turn:] + setups[:turn]:
                await _pick(s, pick_prompts, args, args.pick_s / args.rounds, warm=rnd == 0)
    d = _ttfts_ms(direct)
    failed = sum(1 for s in setups for r in s.records if not r.ok) + sum(
        1 for r in direct if not r.ok
    )
    errors = [e for s in setups for e in s.errors]
    base, most = setups[0], setups[-1]

    def added(s: Setup) -> float:
        return _q(_ttfts_ms(s.records), 0.5) - _q(d, 0.5)

    cmd = (
        f"preheat bench router --part pools --pool-counts {args.pool_counts}"
        f" --pools-requests {args.pools_requests} --rounds {args.rounds}"
        f" --prompt-tokens {args.prompt_tokens} --max-tokens {args.max_tokens}"
        f" --pick-s {args.pick_s:g} --pick-concurrency {args.pick_concurrency}"
        f" --pick-prompt-tokens {args.pick_prompt_tokens}"
    )
    ratio = most.per_core / base.per_core if base.per_core > 0 else float("nan")
    net = most.per_core_net / base.per_core_net if base.per_core_net > 0 else float("nan")
    body = "\n".join(
        [
            "## Router: one pool or many (routing by model)",
            "",
            *_header(cmd, load0),
            f"One sim worker per pool (time scale {args.overhead_time_scale}: the engine is not "
            "the bottleneck), each serving its pool's model; one",
            "`preheat router` (policy preheat, coalescing off) per row, all up at once over the "
            "same workers. The first row",
            "is the single-pool form of the static discovery file (a list of endpoints, "
            "`--pool p0 --model m0`); the others",
            "the several-pool form (`pools:`) with that many pools of one worker each.",
            "",
            f"Added TTFT: {args.pools_requests} gRPC Generate requests per router naming pool "
            f"0's model ({args.prompt_tokens}-token distinct prompts, {args.max_tokens} output",
            f"tokens) at concurrency 1, against the same requests sent straight to pool 0's "
            f"worker (TTFT p50 direct {_q(d, 0.5):.2f} ms),",
            f"interleaved in {args.rounds} rounds whose order rotates. Decisions: "
            f"{args.pick_concurrency} concurrent callers of `Router/Pick` for "
            f"{args.pick_s:g} s per router (in the same rounds),",
            f"{args.pick_prompt_tokens}-token prompts naming every pool's model in turn; per "
            "router CPU-second (its utime+stime). Idle CPU: each",
            f"router's CPU over {args.pools_idle_s:g} s with no request, all at once (what "
            "watching its pools' workers costs); net",
            "decisions: per router CPU-second less that idle share over the Pick load's wall time.",
            "",
            "| pools | discovery file | requests | TTFT p50 router ms | added p50 ms | added p99 ms"
            " | router CPU ms/request | idle router CPU % | Pick decisions"
            " | decisions per router CPU-s | net of idle | Pick p50 ms | Pick errors |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *(_row(s, d) for s in setups),
            "",
            f"{most.pools} pools against the single-pool file: added p50 at concurrency 1 "
            f"{added(most):+.2f} ms against {added(base):+.2f} ms (target for either: under "
            f"{TARGET_ADDED_P50_MS:g} ms), {most.per_core:,.0f} decisions per router CPU-s "
            f"against {base.per_core:,.0f} ({ratio:.0%}; net of idle {net:.0%}). "
            f"Failed requests: {failed}.",
        ]
    )
    if errors:
        body += f"\n\nFirst Pick error: `{errors[0]}`."
    return PartResult("router-pools", body, failed + len(errors))


__all__ = ["add_arguments", "discovery", "part_pools"]
