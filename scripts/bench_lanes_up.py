"""Priority lanes through ``preheat up``: the arrivals of ``scripts/bench_lanes.py``
(interactive Mooncake conversation requests at 0.5x of their capacity plus a flood of Azure
conv long prompts at 1.0x of theirs: 1.5x of one replica) sent in real time over gRPC to the
router that ``preheat up`` starts on a pool file with two traffic classes, ``interactive``
and ``batch``, in front of the pool's one sim worker (the H100 cost model, real time). A
pool that declares classes runs its sim workers with vLLM's priority scheduling policy
(core/manifests.worker_args), so the two runs differ only in the classes' priorities:

- ``lanes``: interactive priority 0, batch priority 2;
- ``fcfs``: both priority 0: the same priority policy with every request equal, which serves
  them in arrival order (vLLM's priority queue orders by (priority, arrival)).

Each run is a fresh ``preheat up`` (its own run folder), stopped with SIGINT when every
answer is in. TTFT is measured at the client (first token chunk). Beside each, the
simulator's figures for the same arrivals (``bench_lanes.run``: the sim engine, no router),
with the same priorities, and the plain FCFS policy for reference.

The classes' ``ttftMs`` in the pool file are 10 minutes, not the 8 s the table judges by:
the router acts on a class's target (it holds, degrades or refuses a request predicted past
it), and at 10 minutes nothing is refused or clamped. Requests past the router's adaptive
in-flight bound take their class's ladder step ``queue`` (both classes are non-sheddable):
they go on to wait in the engine's queue, ordered there by priority. The router's own wait
queue holds requests only while no endpoint is routable, so the live lanes are the engine's
priority policy behind the router, and the simulated side (the engine alone) models them.

    .venv/bin/python scripts/bench_lanes_up.py --seconds 90
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_lanes as lanes
import bench_lanes_live as live
from uprun import preheat_up

from preheat.core.percentiles import sample_quantile
from preheat.engine.sim import SimConfig
from preheat.proto.preheat.v1 import inference_pb2_grpc

POOL_NAME = "lanes"
MODEL = "sim-8b"
# the router's patience: nothing in this run is given up on or held for its deadline
ROUTER_ARGS = (
    "--queue-timeout-s=3600",
    "--first-token-timeout-s=0",  # a first token minutes late is the measure, not a fault
    "--request-timeout-s=0",
)
# like vLLM, a full sim engine queues; the flood must not overflow its waiting list
WORKER_ARGS = ("--sim-opt=max_waiting=100000",)


def pool_file(*, with_lanes: bool, target_ms: int = 600_000) -> str:
    """The pool file of one run: one sim replica (no autoscaling range, no standby, no
    load or warm-up time), classes ``interactive`` (priority 0) and ``batch`` (priority 2
    with lanes, 0 without), both non-sheddable with a TTFT target of ``target_ms``."""
    batch = 2 if with_lanes else 0
    return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {POOL_NAME}}}
spec:
  model: {{name: {MODEL}}}
  engine:
    kind: sim
    args: {{timeScale: 1, loadTime: 0s, warmupTime: 0s}}
  replicas: {{min: 1, max: 1, warmStandby: 0}}
  traffic:
    defaultClass: interactive
    classes:
      - {{name: interactive, ttftMs: {target_ms}, priority: 0, sheddable: false}}
      - {{name: batch, ttftMs: {target_ms}, priority: {batch}, sheddable: false}}
"""


async def _send(address: str, jobs: list[lanes.Job], block: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as ch:
        stub = inference_pb2_grpc.InferenceStub(ch)
        tasks = []
        start = time.perf_counter()
        for job in sorted(jobs, key=lambda j: j.arrival):
            delay = start + job.arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(live._one(stub, job, block, out)))
        done = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [repr(e)[:160] for e in done if isinstance(e, BaseException)]
    print(f"  {len(out)} answered, {len(errors)} errors {errors[:3]}", file=sys.stderr)
    return out


def run_up(
    jobs: list[lanes.Job], *, with_lanes: bool, block: int, keep: Path | None
) -> dict[str, float]:
    """One ``preheat up`` run: request id -> TTFT ms at the client."""
    name = "lanes" if with_lanes else "fcfs"
    with tempfile.TemporaryDirectory(prefix="lanes-up-") as tmp:
        folder = keep if keep is not None else Path(tmp)
        pool = pool_file(with_lanes=with_lanes)
        with preheat_up(
            pool, folder, name, router_args=ROUTER_ARGS, worker_args=WORKER_ARGS
        ) as state:
            address = state["router"]["grpc"]
            print(f"{name}: preheat up ready, router {address}", file=sys.stderr, flush=True)
            return asyncio.run(_send(address, jobs, block))


def _row(label: str, ttft: dict[str, float], jobs: list[lanes.Job], target_ms: float) -> str:
    cells = [label]
    for tag in ("i-", "b-"):
        mine = [j for j in jobs if j.rid.startswith(tag)]
        xs = [ttft[j.rid] for j in mine if j.rid in ttft]
        cells += [f"{sample_quantile(0.5, xs):,.0f} ms", f"{sample_quantile(0.99, xs):,.0f} ms"]
        if tag == "i-":
            ok = sum(1 for x in xs if x <= target_ms)
            cells.append(f"{100 * ok / len(mine):.1f}% ({len(mine) - len(xs)} unanswered)")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=90.0)
    p.add_argument("--load", type=float, default=1.5)
    p.add_argument("--interactive-load", type=float, default=0.5)
    p.add_argument("--interactive-ttft-ms", type=float, default=8000.0)
    p.add_argument("--capacity-sample", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", type=Path, help="keep the pool files, run folders and logs here")
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
    equal = [dataclasses.replace(j, priority=lanes.INTERACTIVE) for j in jobs]
    n_int = sum(1 for j in jobs if j.priority == lanes.INTERACTIVE)
    print(
        f"{len(jobs)} requests over {args.seconds:g} s: {n_int} interactive at {rate_i:.2f} "
        f"req/s ({args.interactive_load:g}x), {len(jobs) - n_int} batch at {rate_b:.2f} req/s "
        f"({args.load - args.interactive_load:g}x)\n"
    )
    print(
        "| run | interactive TTFT p50 | p99 | attainment "
        f"(<= {args.interactive_ttft_ms:g} ms) | batch TTFT p50 | p99 |"
    )
    print("|---|---|---|---|---|---|")

    def sim(js: list[lanes.Job], policy: str) -> dict[str, float]:
        return {k: v[1] * 1000 for k, v in lanes.run(cfg, js, policy).items()}

    target = args.interactive_ttft_ms
    print(_row("FCFS, simulated (fcfs policy)", sim(jobs, "fcfs"), jobs, target), flush=True)
    for with_lanes in (False, True):
        what = "lanes (interactive 0, batch 2)" if with_lanes else "FCFS (both priority 0)"
        simulated = sim(jobs if with_lanes else equal, "priority")
        print(_row(f"{what}, simulated", simulated, jobs, target), flush=True)
        measured = run_up(jobs, with_lanes=with_lanes, block=cfg.block_size, keep=args.keep)
        print(_row(f"{what}, live `preheat up`", measured, jobs, target), flush=True)


if __name__ == "__main__":
    main()
