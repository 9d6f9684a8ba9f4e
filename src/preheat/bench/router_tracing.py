"""``preheat bench router --part tracing``: what OpenTelemetry tracing costs the router.

One fast sim worker; in front of it three ``preheat router`` processes, all up at once: tracing
off, on with 1% sampling (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``,
``OTEL_TRACES_SAMPLER_ARG=0.01``), on with every request sampled (``parentbased_always_on``),
both exporting over OTLP/gRPC to a receiver in this process (which counts the spans; its CPU
is not the router's). The same number of distinct prompts go direct and through each router
in interleaved rounds whose order rotates (as the ``overhead`` part does); the client measures
TTFT; router CPU per request is the router process's utime+stime over its requests.

Tracing off is also timed in-process: the hooks a request passes with tracing off (each an
``is None`` test) against the same loop without them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import timeit
from collections.abc import Sequence
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from preheat.bench.router_bench import (
    SIM_FAST,
    PartResult,
    _header,
    _q,
    _side,
    _ttfts_ms,
    cpu_seconds,
)
from preheat.bench.workerproc import spawn_router, spawn_worker
from preheat.core.routing.types import Candidate, Endpoint, RouteDecision
from preheat.load.stream import StreamRecord
from preheat.process.tracing import Tracing
from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc
from preheat.router.frontend import tracing
from preheat.workload.prompts import words

DIRECT = "direct"
SIDES = ("off", "1%", "100%")
SAMPLERS = {
    "1%": ("parentbased_traceidratio", "0.01"),
    "100%": ("parentbased_always_on", ""),
}
TARGET_1PCT_P50_MS = 0.05  # the bound on what 1% sampling may add to the p50 TTFT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("tracing")
    g.add_argument(
        "--tracing-requests", type=int, default=600, help="requests per path (tracing part)"
    )
    g.add_argument("--tracing-concurrency", default="1", help="comma-separated levels")
    g.add_argument(
        "--tracing-loops", type=int, default=5000, help="requests of the in-process timing"
    )


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that counts what it is sent."""

    def __init__(self) -> None:
        self.spans = 0

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _env(side: str, endpoint: str) -> dict[str, str]:
    if side == "off":
        return {"OTEL_SDK_DISABLED": "true"}
    sampler, arg = SAMPLERS[side]
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_TRACES_SAMPLER": sampler,
        "OTEL_TRACES_SAMPLER_ARG": arg,
        "OTEL_SERVICE_NAME": f"preheat-router-bench-{side}",
    }


def off_hooks_ns(n: int = 200_000) -> float:
    """Nanoseconds the tracing-off hooks add to one request: the front end's ``start`` (None)
    and the dispatcher's nine ``is None`` tests, against the same loop without them."""
    t: tracing.RequestTrace | None = None

    def hooks() -> None:
        tr = tracing.start(None, {}, "grpc", "text_completion", 0.0)
        for _ in range(9):
            if tr is not None or t is not None:
                raise AssertionError

    def bare() -> None:
        for _ in range(9):
            pass

    with_hooks = min(timeit.repeat(hooks, number=n, repeat=5)) / n
    without = min(timeit.repeat(bare, number=n, repeat=5)) / n
    return max(0.0, (with_hooks - without) * 1e9)


class _Drop(SpanExporter):
    """Takes every span and sends nothing (the in-process timing's exporter)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def traced_hooks_us(ratio: float, n: int = 5_000) -> float:
    """Microseconds one request's tracing costs the router's event loop at sampling
    ``ratio``: every hook a proxied request passes (start with a client traceparent-less
    request, parse, admission, schedule with 3 alternates, the upstream span and its
    metadata, first token, end), the SDK's batch processor taking the spans (its export
    runs in its own thread: not timed here)."""
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    tr = Tracing(provider, "bench")
    eps = [Endpoint(id=f"w{i}", address=f"10.0.0.{i}:50051") for i in range(4)]
    cands = tuple(Candidate(e, {"queue": 1.0 + i, "prefill": 10.0}) for i, e in enumerate(eps))
    decision = RouteDecision(eps[0], 11.0, "least-latency", "w0: 11 ms", 2, cands)
    req = pb.GenerateRequest(request_id="r", model="m", prompt="p")
    req.sampling.max_tokens = 8

    def one() -> None:
        t = tracing.start(tr, {}, "grpc", "text_completion", 1.0)
        assert t is not None
        t.parsed(req, 256, 1.0001)
        t.admission(True, "", "", "", 1.0002)
        t.scheduled(decision, 1.0002, 1.0002, 1.0003)
        t.upstream("w0", "10.0.0.0:50051", 1.0003)
        t.first_token(1.002)
        t.end("ok", 1.004, tokens=8)

    try:
        best = min(timeit.repeat(one, number=n, repeat=3)) / n
    finally:
        tr.shutdown()
    return best * 1e6


async def part_tracing(args: argparse.Namespace) -> PartResult:
    load0 = os.getloadavg()[0]
    levels = [int(c) for c in args.tracing_concurrency.split(",")]
    rounds = args.rounds
    per_round = max(1, args.tracing_requests // rounds)
    receiver = _Receiver()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    endpoint = f"http://127.0.0.1:{port}"
    worker_args = [*SIM_FAST, "--sim-time-scale", args.overhead_time_scale]
    worker_args += ["--worker-id", "w0", "--log-level", "WARNING"]
    router_args = ["--policy", "preheat", "--coalesce-tokens", "1", "--log-level", "WARNING"]
    rows: list[str] = []
    failed = 0
    verdict = ""
    spans_by_side: dict[str, int] = {}
    try:
        async with spawn_worker(worker_args) as w:
            with tempfile.TemporaryDirectory(prefix="preheat-bench-") as tmp:
                path = Path(tmp) / "endpoints.json"
                rows_ep = [{"address": w.grpc_target, "id": "w0"}]
                path.write_text(json.dumps(rows_ep))
                disc = ["--discovery", f"static:{path}", *router_args]
                async with (
                    spawn_router(disc, env=_env("off", endpoint)) as r_off,
                    spawn_router([*disc, "--tracing"], env=_env("1%", endpoint)) as r_1,
                    spawn_router([*disc, "--tracing"], env=_env("100%", endpoint)) as r_100,
                    grpc.aio.insecure_channel(w.grpc_target) as d_ch,
                    grpc.aio.insecure_channel(r_off.grpc_target) as off_ch,
                    grpc.aio.insecure_channel(r_1.grpc_target) as one_ch,
                    grpc.aio.insecure_channel(r_100.grpc_target) as all_ch,
                ):
                    routers = {"off": r_off, "1%": r_1, "100%": r_100}
                    stubs = {
                        DIRECT: pb_grpc.InferenceStub(d_ch),
                        "off": pb_grpc.InferenceStub(off_ch),
                        "1%": pb_grpc.InferenceStub(one_ch),
                        "100%": pb_grpc.InferenceStub(all_ch),
                    }
                    sides = (DIRECT, *SIDES)
                    for side in sides:  # warm: connections, the routers' endpoint state
                        for _ in range(50):
                            warm = [words(16, 7_000 + i) for i in range(10)]
                            recs = await _side(stubs[side], warm, 1, f"warm-{side}", 2)
                            if all(r.ok for r in recs):
                                break
                    for level in levels:
                        recs_by: dict[str, list[StreamRecord]] = {s: [] for s in sides}
                        # per round: each side's records (the paired comparison)
                        by_round: list[dict[str, list[StreamRecord]]] = []
                        cpu = dict.fromkeys(SIDES, 0.0)
                        for rnd in range(rounds):
                            by_round.append({})
                            turn = rnd % len(sides)
                            order = sides[turn:] + sides[:turn]
                            for k, side in enumerate(order):
                                seed0 = 10_000_000 * level + 100_000 * rnd + 20_000 * k
                                prompts = [
                                    words(args.prompt_tokens, seed0 + i) for i in range(per_round)
                                ]
                                pid = routers[side].proc.pid if side in routers else 0
                                cpu0 = cpu_seconds(pid) if pid else 0.0
                                tag = f"{side}-{level}-{rnd}"
                                got = await _side(stubs[side], prompts, level, tag, args.max_tokens)
                                recs_by[side] += got
                                by_round[-1][side] = got
                                if pid:
                                    cpu[side] += cpu_seconds(pid) - cpu0
                        failed += sum(1 for rs in recs_by.values() for x in rs if not x.ok)
                        rows.append(_row(level, recs_by, cpu))
                        print(rows[-1], flush=True)
                        if level == levels[0]:
                            verdict = _verdict(recs_by, by_round)
            spans_by_side = {"all": receiver.spans}
    finally:
        await server.stop(None)
    n = args.tracing_loops
    off_ns = off_hooks_ns(40 * n)
    loop_us = {side: traced_hooks_us(ratio, n) for side, ratio in (("1%", 0.01), ("100%", 1.0))}
    cmd = (
        f"preheat bench router --part tracing --tracing-requests {args.tracing_requests}"
        f" --tracing-concurrency {args.tracing_concurrency} --rounds {rounds}"
        f" --prompt-tokens {args.prompt_tokens} --max-tokens {args.max_tokens}"
        f" --overhead-time-scale {args.overhead_time_scale} --tracing-loops {n}"
    )
    body = "\n".join(
        [
            "## Router: what tracing costs (off, 1% sampled, every request sampled)",
            "",
            *_header(cmd, load0),
            f"One sim worker at time scale {args.overhead_time_scale}; three `preheat router`s "
            "in front of it, up at once: tracing off (no `--tracing`), `--tracing` with",
            "`OTEL_TRACES_SAMPLER=parentbased_traceidratio` and `OTEL_TRACES_SAMPLER_ARG=0.01`, "
            "and `--tracing` with `parentbased_always_on`; the traced ones export over",
            "OTLP/gRPC (the SDK's batch processor) to a receiver in the benchmark's process. "
            f"Each level sends {args.tracing_requests} requests per path",
            f"({args.prompt_tokens}-token distinct prompts, {args.max_tokens} output tokens) "
            f"in {rounds} interleaved rounds whose order rotates; TTFT is the client's.",
            "Added = the path's TTFT minus going direct to the worker; CPU = the router "
            "process's utime+stime per request.",
            "",
            "| concurrency | requests/path | TTFT p50 direct ms | added p50 off ms"
            " | added p50 1% ms | added p50 100% ms | added p99 off ms | added p99 1% ms"
            " | added p99 100% ms | CPU ms/request off | CPU ms/request 1%"
            " | CPU ms/request 100% |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Spans the receiver got from the two traced routers: {spans_by_side.get('all', 0)}.",
            f"Tracing off, timed in-process: the hooks a request passes add {off_ns:.0f} ns "
            "(the front end's `tracing.start` returning None and the dispatcher's `is None` "
            "tests).",
            "Tracing on, timed in-process (every hook of one proxied request, the batch "
            "processor taking its spans; the export itself runs in the SDK's thread): "
            f"{loop_us['1%']:.1f} us per request at 1% sampling, {loop_us['100%']:.1f} us at "
            "100%.",
            "",
            verdict,
            f"Failed requests: {failed}.",
        ]
    )
    return PartResult("router-tracing", body, failed)


def _row(level: int, recs: dict[str, list[StreamRecord]], cpu: dict[str, float]) -> str:
    d = _ttfts_ms(recs[DIRECT])
    added50 = [_q(_ttfts_ms(recs[s]), 0.5) - _q(d, 0.5) for s in SIDES]
    added99 = [_q(_ttfts_ms(recs[s]), 0.99) - _q(d, 0.99) for s in SIDES]
    per = [1e3 * cpu[s] / max(len(recs[s]), 1) for s in SIDES]
    cells = [f"{level}", f"{len(recs[DIRECT])}", f"{_q(d, 0.5):.2f}"]
    cells += [f"{x:+.3f}" for x in added50] + [f"{x:+.3f}" for x in added99]
    cells += [f"{x:.3f}" for x in per]
    return "| " + " | ".join(cells) + " |"


def _paired(by_round: list[dict[str, list[StreamRecord]]], side: str) -> list[float]:
    """Per round, ``side``'s p50 TTFT minus the tracing-off router's (the same round's
    conditions on both sides of each difference)."""
    return [
        _q(_ttfts_ms(r[side]), 0.5) - _q(_ttfts_ms(r["off"]), 0.5)
        for r in by_round
        if r.get(side) and r.get("off")
    ]


def _verdict(
    recs: dict[str, list[StreamRecord]], by_round: list[dict[str, list[StreamRecord]]]
) -> str:
    def p50(side: str) -> float:
        return _q(_ttfts_ms(recs[side]), 0.5)

    paired = {side: _paired(by_round, side) for side in ("1%", "100%")}

    def spread(xs: list[float]) -> str:
        if not xs:
            return "-"
        return f"median {_q(xs, 0.5):+.3f} ms (rounds from {min(xs):+.3f} to {max(xs):+.3f})"

    one = p50("1%") - p50("off")
    full = p50("100%") - p50("off")
    met = "**met**" if one < TARGET_1PCT_P50_MS else "**missed**"
    off = _ttfts_ms(recs["off"])
    half = len(off) // 2
    noise = abs(_q(off[:half], 0.5) - _q(off[half:], 0.5))
    return (
        f"At the first level, 1% sampling adds {one:+.3f} ms p50 TTFT over tracing off "
        f"(target under {TARGET_1PCT_P50_MS:g} ms: {met}); every request sampled adds "
        f"{full:+.3f} ms. The run's own noise: the tracing-off router's p50 over the first "
        f"and the second half of its rounds differ by {noise:.3f} ms. Paired by round (each "
        f"round's p50 minus the off router's p50 in the same round), 1% adds "
        f"{spread(paired['1%'])}, 100% {spread(paired['100%'])}."
    )
