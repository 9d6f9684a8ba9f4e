"""``preheat demo``: start a sim worker, stream a handful of requests, print TTFT and ITL.

The requests show what the rest of Preheat builds on: a cold prompt, the same prompt again
(served from the prefix cache), a follow-up turn that extends it, then a small concurrent
burst that the engine batches.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import grpc

from preheat.bench.flagcheck import FlagCheck
from preheat.bench.workerproc import spawn_worker
from preheat.core.percentiles import sample_quantile
from preheat.load.stream import StreamRecord, stream_generate
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc
from preheat.workload.prompts import words


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per request")
    parser.add_argument("--prompt-tokens", type=int, default=2048, help="length of the long prompt")
    parser.add_argument("--burst", type=int, default=4, help="concurrent requests at the end")
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="extra argument passed to `preheat worker` (repeatable)",
    )


def _request(rid: str, prompt: str, max_tokens: int) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=rid, prompt=prompt, sampling=pb.SamplingParams(max_tokens=max_tokens, seed=7)
    )


def _row(label: str, rec: StreamRecord) -> str:
    if not rec.ok:
        return f"{label:<22} FAILED {rec.error}"
    itl = [s * 1e3 for s in rec.itl_s] or [0.0]
    return (
        f"{label:<22} {rec.prompt_tokens:>7} {rec.cached_tokens:>7} {rec.completion_tokens:>6}"
        f" {rec.ttft_s * 1e3:>9.1f} {sample_quantile(0.5, itl):>8.1f} {max(itl):>8.1f}"
        f" {rec.e2e_s * 1e3:>9.1f}"
    )


async def _demo(args: argparse.Namespace) -> int:
    # A real H100 cold start (engine init, weight load, warm-up) is ~26 s in the sim's
    # calibrated model; the demo shortens it to 3 s so that it starts promptly.
    worker_args = ["--engine", "sim", "--sim-load-s", "2", "--sim-warmup-s", "1"]
    worker_args += args.worker_arg
    print(f"starting: preheat worker {' '.join(worker_args)}")
    t0 = time.monotonic()
    async with spawn_worker(worker_args) as worker:
        print(f"worker warm on {worker.grpc_target} after {time.monotonic() - t0:.1f}s\n")
        header = (
            f"{'request':<22} {'prompt':>7} {'cached':>7} {'tokens':>6} {'TTFT ms':>9}"
            f" {'ITL p50':>8} {'ITL max':>8} {'e2e ms':>9}"
        )
        print(header)
        print("-" * len(header))
        long_prompt = words(args.prompt_tokens, seed=1)
        follow_up = long_prompt + " " + words(256, seed=2)
        failures = 0
        async with grpc.aio.insecure_channel(worker.grpc_target) as channel:
            stub = pb_grpc.InferenceStub(channel)
            sequential = [
                ("cold long prompt", long_prompt),
                ("same prompt again", long_prompt),
                ("follow-up turn", follow_up),
            ]
            for i, (label, prompt) in enumerate(sequential):
                rec = await stream_generate(stub, _request(f"demo-{i}", prompt, args.max_tokens))
                failures += not rec.ok
                print(_row(label, rec))
            burst = [
                stream_generate(
                    stub, _request(f"burst-{i}", words(512, seed=100 + i), args.max_tokens)
                )
                for i in range(args.burst)
            ]
            for i, rec in enumerate(await asyncio.gather(*burst)):
                failures += not rec.ok
                print(_row(f"burst {i + 1}/{args.burst} (512 tok)", rec))
        print(
            "\nTTFT = first token seen by this client; ITL = gap between token chunks;"
            "\ncached = prompt tokens served from the worker's prefix cache (no prefill)."
        )
    return 1 if failures else 0


#: concurrent requests the burst may send: the sim worker's max_num_seqs
MAX_BURST = 1024
#: the long prompt's words: its text is held in memory (8 bytes a word); the worker refuses
#: what is over its context window with its own message
MAX_PROMPT_TOKENS = 1_000_000


def problems(args: argparse.Namespace) -> list[str]:
    """Every flag out of range (a traceback before: ``--max-tokens -3``, ``--burst -1`` ran)."""
    c = FlagCheck()
    c.number("--max-tokens", args.max_tokens, 1)
    c.number("--prompt-tokens", args.prompt_tokens, 1, high=MAX_PROMPT_TOKENS)
    c.number("--burst", args.burst, 0, high=MAX_BURST)
    return c.problems


def run(args: argparse.Namespace) -> int:
    bad = problems(args)
    if bad:
        print(f"preheat demo: {'; '.join(bad)}", file=sys.stderr)
        return 2
    return asyncio.run(_demo(args))
