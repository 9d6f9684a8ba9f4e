"""Priority lanes live: the arrivals of ``scripts/bench_lanes.py`` (interactive Mooncake
conversation requests at 0.5x of their capacity plus a flood of Azure conv long prompts at
1.0x of theirs) sent in real time over gRPC to a router (in process) with the traffic
classes ``interactive`` (priority 0) and ``batch`` (priority 2), in front of one sim worker
(the same H100 cost model, real time) scheduling FCFS, then by priority, beside the
simulator's figures for the same arrivals. Prompts go as token ids (a trace block's tokens
derive from its name, so shared prefixes share tokens). TTFT is measured at the client.

    .venv/bin/python scripts/bench_lanes_live.py --seconds 120
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_lanes as lanes

from preheat.core.percentiles import sample_quantile
from preheat.core.traffic.classes import Traffic, TrafficClass
from preheat.engine.sim import SimConfig, SimEngine
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery
from preheat.worker.server import WorkerConfig, WorkerServer

TRAFFIC = Traffic(
    classes=(
        TrafficClass(name="interactive", ttft_ms=600_000, priority=0, sheddable=False),
        TrafficClass(name="batch", ttft_ms=600_000, priority=2, sheddable=False),
    ),
    default_class="interactive",
)


def _tokens(job: lanes.Job, block: int) -> list[int]:
    out: list[int] = []
    for name in job.hashes:
        out.extend((name * 2654435761 + i * 40503) % 32000 for i in range(block))
    rest = job.input_tokens - len(out)
    out.extend((hash(job.rid) + i) % 32000 for i in range(rest))
    return out


async def _one(
    stub: inference_pb2_grpc.InferenceStub, job: lanes.Job, block: int, out: dict[str, float]
) -> None:
    req = pb.GenerateRequest(
        request_id=job.rid,
        prompt_token_ids=pb.TokenIds(ids=_tokens(job, block)),
        sampling=pb.SamplingParams(max_tokens=job.output_tokens, ignore_eos=True),
        slo_class="interactive" if job.priority == lanes.INTERACTIVE else "batch",
    )
    t0 = time.perf_counter()
    # wait_for_ready: a moment's reconnect on a loaded machine delays the call, not fails it
    call = stub.Generate(req, timeout=3600, wait_for_ready=True)
    async for chunk in call:  # to the end: the engine does all of the request's work
        if chunk.token_ids and job.rid not in out:
            out[job.rid] = (time.perf_counter() - t0) * 1000


async def live(jobs: list[lanes.Job], policy: str) -> dict[str, float]:
    cfg = SimConfig.from_options(
        {"load_s": 0.0, "warmup_s": 0.0, "scheduling_policy": policy, "max_waiting": 100_000}
    )
    worker = WorkerServer(SimEngine(cfg), WorkerConfig(worker_id="w-1", stop_grace_s=0.5))
    wports = await worker.start()
    await asyncio.wait_for(worker.wait_warm(), 30)
    router = RouterServer(
        StaticDiscovery([DiscoveredEndpoint(address=f"127.0.0.1:{wports.grpc}", id="w-1")]),
        RouterConfig(
            refresh_interval_s=0.5,
            traffic=TRAFFIC,
            queue_timeout_s=3600,
            first_token_timeout_s=0,  # a first token minutes late is the measure, not a fault
        ),
    )
    rports = await router.start()
    await router.wait_ready(1, timeout_s=10)
    out: dict[str, float] = {}
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{rports.grpc}",
            options=[("grpc.max_send_message_length", 64 << 20)],
        ) as ch:
            stub = inference_pb2_grpc.InferenceStub(ch)
            tasks = []
            start = time.perf_counter()
            for job in sorted(jobs, key=lambda j: j.arrival):
                delay = start + job.arrival - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(_one(stub, job, cfg.block_size, out)))
            done = await asyncio.gather(*tasks, return_exceptions=True)
            errors = [repr(e)[:160] for e in done if isinstance(e, BaseException)]
            print(
                f"{policy}: {len(out)} answered, {len(errors)} errors {errors[:3]}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await router.stop()
        await worker.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--load", type=float, default=1.5)
    p.add_argument("--interactive-load", type=float, default=0.5)
    p.add_argument("--interactive-ttft-ms", type=float, default=8000.0)
    p.add_argument("--capacity-sample", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    cfg = SimConfig()
    mix = lanes.arrivals(
        cfg,
        seconds=args.seconds,
        load=args.load,
        interactive_load=args.interactive_load,
        capacity_sample=args.capacity_sample,
        seed=args.seed,
    )
    jobs, rate_i, rate_b = mix.jobs, mix.rate_interactive, mix.rate_batch
    n_int = sum(1 for j in jobs if j.priority == lanes.INTERACTIVE)
    print(
        f"{len(jobs)} requests over {args.seconds:g} s: {n_int} interactive at {rate_i:.2f} "
        f"req/s, {len(jobs) - n_int} batch at {rate_b:.2f} req/s\n"
    )
    print(
        "| scheduling | where | interactive TTFT p50 | p99 | attainment "
        f"(<= {args.interactive_ttft_ms:g} ms) | batch TTFT p50 | p99 |"
    )
    print("|---|---|---|---|---|---|---|")
    for policy in ("fcfs", "priority"):
        simulated = {k: v[1] * 1000 for k, v in lanes.run(cfg, jobs, policy).items()}
        measured = asyncio.run(live(jobs, policy))
        for where, ttft in (("simulated", simulated), ("live", measured)):
            row = [policy, where]
            for prio in (lanes.INTERACTIVE, lanes.BATCH):
                xs = [ttft[j.rid] for j in jobs if j.priority == prio and j.rid in ttft]
                total = sum(1 for j in jobs if j.priority == prio)
                row += [
                    f"{sample_quantile(0.5, xs):,.0f} ms",
                    f"{sample_quantile(0.99, xs):,.0f} ms",
                ]
                if prio == lanes.INTERACTIVE:
                    ok = sum(1 for x in xs if x <= args.interactive_ttft_ms)
                    row.append(f"{100 * ok / total:.1f}% ({total - len(xs)} unanswered)")
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
