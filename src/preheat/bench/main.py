"""``preheat bench ...``: benchmarks, never tests. Each reports ratios measured side by side
in one run and can write its figures into docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from preheat.bench import (
    forecast_accuracy,
    router_bench,
    router_pools,
    router_tracing,
    sim,
    sim_bench,
    traces,
    vllm_serve,
)
from preheat.bench.demo import MAX_PROMPT_TOKENS
from preheat.bench.flagcheck import FlagCheck
from preheat.bench.workerproc import spawn_worker
from preheat.core.percentiles import sample_quantile
from preheat.engine.base import Engine, EngineRequest, Sampling
from preheat.load.stream import StreamRecord, stream_generate
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc
from preheat.report.markdown import write_section
from preheat.workload.prompts import words


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    w = sub.add_parser(
        "worker",
        help="the worker's added latency over the bare engine, and tokens/s",
        description="Runs the same requests against a bare in-process engine and against a "
        "`preheat worker` process around an identically configured engine (over gRPC on "
        "loopback), interleaved, and reports TTFT p50/p99 of each, the difference "
        "(the worker's added latency) and tokens/s.",
    )
    w.add_argument("--requests", type=int, default=100, help="requests per side and level")
    w.add_argument("--concurrency", default="1,16", help="comma-separated levels")
    w.add_argument("--prompt-tokens", type=int, default=512)
    w.add_argument("--max-tokens", type=int, default=32)
    w.add_argument("--rounds", type=int, default=2, help="interleaved rounds per side")
    w.add_argument(
        "--time-scales",
        default="1,0.01",
        help="sim engine speeds to run (1 = calibrated H100; 0.01 = 100x faster, so that "
        "tokens/s shows what the worker itself sustains)",
    )
    w.add_argument("--write", type=Path, default=None, help="update this benchmarks.md")
    w.add_argument(
        "--worker-arg", action="append", default=[], help="extra `preheat worker` argument"
    )
    r = sub.add_parser(
        "router",
        help="the router's added TTFT, proxy tokens/s, Pick decisions/s, routing policies",
        description=router_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    router_bench.add_arguments(r)
    router_pools.add_arguments(r)
    router_tracing.add_arguments(r)
    sim = sub.add_parser(
        "sim",
        help="simulated routing, autoscaling and geography against baselines (docs/benchmarks.md)",
        description=_SIM_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim_bench.add_arguments(sim)
    tr = sub.add_parser(
        "traces",
        help=(
            "write the autoscaling benchmark's traces (burst, diurnal, clustered) for "
            "simulate --compare"
        ),
        description=traces.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    traces.add_arguments(tr)
    fc = sub.add_parser(
        "forecast",
        help="the arrival-rate forecast's error on your rates: no season, daily, weekly",
        description=forecast_accuracy.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    forecast_accuracy.add_arguments(fc)
    vs = sub.add_parser(
        "vllm-serve",
        help="vLLM's serving benchmark client through the router: policies side by side",
        description=vllm_serve.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    vllm_serve.add_arguments(vs)


_SIM_DOC = (
    "Our routing and autoscaling policies against the usual baselines in the discrete-event "
    "simulator: --part routing (Mooncake trace, 16 and 64 GPUs, hit rate vs an oracle, TTFT, "
    "throughput at a TTFT objective), autoscaling (bursty Azure/ServeGen traffic: SLO "
    "attainment against GPU-hours, HPA/KEDA/KPA baselines), geography (three regions); see "
    "src/preheat/bench/sim_bench.py."
)


@dataclass
class SideResult:
    records: list[StreamRecord]
    wall_s: float

    def ttft_ms(self, q: float) -> float:
        return sample_quantile(q, [r.ttft_s * 1e3 for r in self.records if r.ok])

    def itl_ms(self, q: float) -> float:
        gaps = [g * 1e3 for r in self.records if r.ok for g in r.itl_s]
        return sample_quantile(q, gaps) if gaps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return sum(r.completion_tokens for r in self.records) / self.wall_s

    @property
    def failed(self) -> int:
        return sum(1 for r in self.records if not r.ok)


def _build_engine(worker_args: list[str]) -> Engine:
    """The same engine the worker builds from the same arguments."""
    from preheat.worker.engines import build_engine
    from preheat.worker.main import add_arguments as add_worker_arguments

    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    return build_engine(parser.parse_args(worker_args))


async def _bare_one(engine: Engine, rid: str, prompt: str, max_tokens: int) -> StreamRecord:
    rec = StreamRecord(request_id=rid, ok=False)
    start = time.monotonic()
    req = EngineRequest(rid, tuple(engine.tokenize(prompt)), Sampling(max_tokens=max_tokens))
    async for out in engine.generate(req):
        if out.token_ids:
            rec.tokens_arrived(start, time.monotonic(), len(out.token_ids))
        if out.finish_reason is not None:
            rec.ok = True
    rec.e2e_s = time.monotonic() - start
    return rec


async def _drive(
    one: Callable[[str, str], Awaitable[StreamRecord]], prompts: list[str], concurrency: int
) -> SideResult:
    queue = list(enumerate(prompts))
    queue.reverse()
    records: list[StreamRecord] = []

    async def lane() -> None:
        while queue:
            i, prompt = queue.pop()
            records.append(await one(f"r{i}", prompt))

    start = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for _ in range(concurrency):
            tg.create_task(lane())
    return SideResult(records, time.monotonic() - start)


def _merge(parts: list[SideResult]) -> SideResult:
    return SideResult([r for p in parts for r in p.records], sum(p.wall_s for p in parts))


async def _bench_scale(
    args: argparse.Namespace, worker_args: list[str], levels: list[int], rows: list[str]
) -> int:
    """Runs every concurrency level for one engine configuration; returns failures."""
    engine = _build_engine(worker_args)
    await engine.load()
    await engine.warm_up()
    failed = 0
    scale = worker_args[worker_args.index("--sim-time-scale") + 1]
    try:
        async with (
            spawn_worker(worker_args) as worker,
            grpc.aio.insecure_channel(worker.grpc_target) as channel,
        ):
            stub = pb_grpc.InferenceStub(channel)

            async def via_worker(rid: str, prompt: str) -> StreamRecord:
                sampling = pb.SamplingParams(max_tokens=args.max_tokens)
                req = pb.GenerateRequest(request_id=rid, prompt=prompt, sampling=sampling)
                return await stream_generate(stub, req)

            async def bare(rid: str, prompt: str) -> StreamRecord:
                return await _bare_one(engine, rid, prompt, args.max_tokens)

            for level in levels:
                per_round = max(1, args.requests // args.rounds)
                bare_parts: list[SideResult] = []
                worker_parts: list[SideResult] = []
                for rnd in range(args.rounds):
                    # distinct prompts per round and level: no prefix-cache hits on either side
                    seed0 = 1_000_000 * level + 10_000 * rnd
                    prompts = [words(args.prompt_tokens, seed0 + i) for i in range(per_round)]
                    bare_parts.append(await _drive(bare, prompts, level))
                    worker_parts.append(await _drive(via_worker, prompts, level))
                b, w = _merge(bare_parts), _merge(worker_parts)
                failed += b.failed + w.failed
                rows.append(
                    f"| {scale} | {level} | {len(w.records)} | {b.ttft_ms(0.5):.2f}"
                    f" | {w.ttft_ms(0.5):.2f} | **{w.ttft_ms(0.5) - b.ttft_ms(0.5):+.2f}**"
                    f" | {b.ttft_ms(0.99):.2f} | {w.ttft_ms(0.99):.2f}"
                    f" | **{w.ttft_ms(0.99) - b.ttft_ms(0.99):+.2f}**"
                    f" | {b.itl_ms(0.5):.2f} | {w.itl_ms(0.5):.2f} | {b.tokens_per_s:,.0f}"
                    f" | {w.tokens_per_s:,.0f} | {w.tokens_per_s / b.tokens_per_s:.2f} |"
                )
                print(rows[-1], flush=True)
    finally:
        await engine.shutdown()
    return failed


def worker_problems(args: argparse.Namespace) -> list[str]:
    """``preheat bench worker``'s flags out of range, at once (each ended in a traceback:
    ``--rounds 0`` divided by zero, ``--time-scales 0`` failed in the worker it started)."""
    c = FlagCheck()
    c.number("--requests", args.requests, 1)
    c.listed("--concurrency", args.concurrency, int, 1)
    c.number("--prompt-tokens", args.prompt_tokens, 1, high=MAX_PROMPT_TOKENS)
    c.number("--max-tokens", args.max_tokens, 1)
    c.number("--rounds", args.rounds, 1)
    c.listed("--time-scales", args.time_scales, float, 0, strict=True)
    return c.problems


async def _bench_worker(args: argparse.Namespace) -> int:
    bad = worker_problems(args)
    if bad:
        print(f"preheat bench worker: {'; '.join(bad)}", file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[str] = []
    failed = 0
    for scale in args.time_scales.split(","):
        worker_args = ["--engine", "sim", "--sim-load-s", "1", "--sim-warmup-s", "0.5"]
        worker_args += ["--sim-time-scale", scale, *args.worker_arg]
        failed += await _bench_scale(args, worker_args, levels, rows)
    cmd = (
        f"preheat bench worker --requests {args.requests} --concurrency {args.concurrency}"
        f" --prompt-tokens {args.prompt_tokens} --max-tokens {args.max_tokens}"
        f" --time-scales {args.time_scales}"
        + "".join(f" --worker-arg={a}" for a in args.worker_arg)
    )
    body = "\n".join(
        [
            "## Worker overhead over the bare engine",
            "",
            f"Command: `{cmd}` (`make bench`). Machine: {platform.machine()}, "
            f"Python {platform.python_version()}, measured {time.strftime('%Y-%m-%d')}.",
            "",
            "The same prompts go to a bare in-process sim engine and, over gRPC on loopback,",
            "to a `preheat worker` process around an identically configured sim engine,",
            f"interleaved in {args.rounds} rounds. TTFT is measured by the client; the sim",
            "engine's own prefill time is in both columns, so the difference is what the",
            "worker adds (gRPC, validation, lifecycle, metrics, the process hop). At time",
            "scale 1 the sim runs at calibrated H100 speed, so tokens/s is the simulated GPU's;",
            "at 0.01 the engine is 100x faster and tokens/s shows what the worker sustains",
            "(the client, the bare engine and the worker share this machine's 2 cores).",
            "",
            "| sim time scale | concurrency | requests | TTFT p50 bare ms"
            " | TTFT p50 worker ms | added p50 ms | TTFT p99 bare ms | TTFT p99 worker ms"
            " | added p99 ms | ITL p50 bare ms"
            " | ITL p50 worker ms | tokens/s bare | tokens/s worker | ratio |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Failed requests: {failed}.",
        ]
    )
    print()
    print(body)
    if args.write is not None:
        write_section(args.write, "worker", body)
        print(f"\nwrote {args.write}")
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    if args.bench == "worker":
        return asyncio.run(_bench_worker(args))
    if args.bench == "router":
        more = {"pools": router_pools.part_pools, "tracing": router_tracing.part_tracing}
        return asyncio.run(router_bench.run_router_bench(args, more))
    if args.bench == "sim":
        return sim.run(args)
    if args.bench == "vllm-serve":
        return vllm_serve.main(args)
    if args.bench == "traces":
        return traces.run(args)
    if args.bench == "forecast":
        return forecast_accuracy.run(args)
    raise SystemExit(f"unknown benchmark {args.bench!r}")
