"""preheat load against real sim workers and a real router on loopback: every request is
accounted for, rejections are recorded as such, the OpenAI HTTP path works, Ctrl-C stops
sending and still writes everything. Small traces, compressed in time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from preheat.bench.workerproc import ServiceProcess, spawn_router, spawn_worker
from preheat.load.replay import Api, LoadOptions, replay
from preheat.report.record import RunMeta, RunWriter, read_run
from preheat.report.summary import summarize
from preheat.workload.traces import TraceOptions, load_trace

FAST_WORKER = ["--engine", "sim", "--sim-load-s", "0", "--sim-warmup-s", "0"]
FAST_WORKER += ["--log-level", "WARNING"]


def write_trace(path: Path, n: int, gap_ms: int, output_tokens: int = 6) -> Path:
    """``n`` requests ``gap_ms`` apart in four sessions; each prompt is two shared blocks
    (a system prompt), plus a session block on odd requests: real prefix sharing."""
    lines = []
    for i in range(n):
        blocks = [1, 2] + ([10 + i % 4] if i % 2 else [])
        lines.append(
            json.dumps(
                {
                    "timestamp_ms": i * gap_ms,
                    "input_tokens": len(blocks) * 512 - 100,
                    "output_tokens": output_tokens,
                    "session_id": f"s{i % 4}",
                    "prefix_block_ids": blocks,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def small(path: Path, **kw: object) -> list:  # type: ignore[type-arg]
    return load_trace(path, TraceOptions(token_scale=1 / 32, **kw))  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def preheat_process(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """``preheat <args>`` as a child; killed if the test leaves it running (a failure)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "preheat.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _preheat(*args: str) -> tuple[int, str, str]:
    async with preheat_process(*args) as proc:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cli_replay_accounts_for_every_request_and_reports(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", 20, gap_ms=1000)
    run_dir = tmp_path / "run"
    async with spawn_worker(FAST_WORKER) as w:
        rc, out, err = await _preheat(
            "load", "--target", w.grpc_target, "--trace", str(trace),
            "--time-scale", "0.05", "--token-scale", str(1 / 32),
            "--ttft-objective-ms", "10000", "--out", str(run_dir),
        )  # fmt: skip
    assert rc == 0, out + err
    assert "20 scheduled: 20 sent (20 ok, 0 rejected, 0 error)" in out
    run = read_run(run_dir)
    assert {r.request_id for r in run.requests} == {f"r{i}" for i in range(20)}
    assert len(run.requests) == 20
    assert all(r.outcome == "ok" for r in run.requests)
    first = run.requests[0]
    assert first.output_tokens == 6
    # one gap per streamed chunk: 5 for 6 tokens, fewer when a late engine loop sends
    # several tokens in one chunk (a busy machine)
    assert 1 <= len(first.itl_ms) <= 5
    assert first.endpoint
    assert set(first.stages_ms) >= {"queue", "prefill", "decode", "server_ttft"}
    assert first.ttft_ms >= first.stages_ms["server_ttft"]
    s = summarize(run)
    assert s.cached_tokens > 0  # the shared system-prompt blocks hit the prefix cache
    assert s.ttft_attainment == 1.0
    assert run.meta.extra["load"]["sent"] == 20
    rc, out, err = await _preheat("report", str(run_dir))
    assert rc == 0, err
    assert "requests 20: ok 20" in out
    assert (run_dir / "latency_cdf.png").exists()


async def test_a_full_worker_rejects_and_the_rejection_is_recorded(tmp_path: Path) -> None:
    # one running sequence, one waiting: six requests at once cannot all be taken
    trace = write_trace(tmp_path / "t.jsonl", 6, gap_ms=0, output_tokens=100)
    args = [*FAST_WORKER, "--sim-max-num-seqs", "1", "--sim-opt", "max_waiting=1"]
    async with spawn_worker(args) as w:
        with RunWriter(tmp_path / "run", RunMeta(name="full")) as writer:
            summary = await replay(w.grpc_target, small(trace), LoadOptions(), writer)
    run = read_run(tmp_path / "run")
    assert summary.recorded == len(run.requests) == 6
    assert summary.ok >= 1
    assert summary.rejected >= 1
    rejected = [r for r in run.requests if r.outcome == "rejected"]
    assert len(rejected) == summary.rejected
    assert all(r.error.startswith("RESOURCE_EXHAUSTED") for r in rejected)
    assert summary.ok + summary.rejected == 6


async def _wait_ready(router: ServiceProcess, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.get(router.http_url + "/ready") as resp:
                if resp.status == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError("router never became ready:\n" + "\n".join(router.log[-20:]))


async def test_openai_http_through_a_router(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", 10, gap_ms=50)
    async with spawn_worker([*FAST_WORKER, "--worker-id", "w0"]) as w:
        endpoints = tmp_path / "endpoints.json"
        endpoints.write_text(
            json.dumps([{"id": "w0", "address": w.grpc_target, "metrics_url": w.http_url}])
        )
        async with spawn_router(["--discovery", f"static:{endpoints}"]) as router:
            await _wait_ready(router)
            with RunWriter(tmp_path / "run", RunMeta(name="http")) as writer:
                summary = await replay(
                    router.http_url, small(trace), LoadOptions(api="openai"), writer
                )
    run = read_run(tmp_path / "run")
    assert (summary.ok, summary.rejected, summary.error) == (10, 0, 0), run.requests
    assert all(r.output_tokens == 6 for r in run.requests)
    assert all(r.prompt_tokens > 0 and r.ttft_ms > 0 for r in run.requests)
    assert all(r.ttft_ms <= r.e2e_ms for r in run.requests)
    assert sum(r.cached_tokens for r in run.requests) > 0
    assert [r.session_id for r in run.requests[:4]] == ["s0", "s1", "s2", "s3"]
    # the router names the worker and passes the engine's stage breakdown over HTTP too,
    # with its own stage; network is what is left of the client's TTFT
    assert {r.endpoint for r in run.requests} == {"w0"}
    for r in run.requests:
        assert set(r.stages_ms) == {
            "queue", "prefill", "decode", "server_ttft", "outside_engine", "router", "network"
        }  # fmt: skip
        assert 0 < r.stages_ms["server_ttft"] <= r.ttft_ms
        assert 0 < r.stages_ms["router"] < r.ttft_ms
        ttft = r.stages_ms["router"] + r.stages_ms["network"] + r.stages_ms["server_ttft"]
        assert ttft == pytest.approx(r.ttft_ms, abs=0.01)
    budget = summarize(run).budget
    assert budget is not None
    assert list(budget.stages) == ["router", "network", "queue", "prefill", "decode"]


async def test_ctrl_c_stops_sending_and_keeps_what_was_sent(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", 40, gap_ms=300)
    run_dir = tmp_path / "run"
    async with spawn_worker(FAST_WORKER) as w, preheat_process(
        "load", "--target", w.grpc_target, "--trace", str(trace),
        "--token-scale", str(1 / 32), "--out", str(run_dir), "--no-progress",
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)  # "replaying ..." once started
        await asyncio.sleep(1.0)  # 12 s of trace: about 4 sent by now
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130, out.decode() + err.decode()
    assert "stopping: no more requests" in err.decode()
    run = read_run(run_dir)
    load = run.meta.extra["load"]
    assert 0 < load["sent"] < 40
    assert load["not_sent"] == 40 - load["sent"]
    assert len(run.requests) == load["sent"]
    assert all(r.outcome in ("ok", "error") for r in run.requests)
    assert run.meta.duration_s > 0


async def test_bad_input_is_one_clear_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp_ms": 0, "input_tokens": 5, "output_tokens": 1}\n{oops\n')
    rc, _, err = await _preheat("load", "--target", "127.0.0.1:1", "--trace", str(bad))
    assert rc == 2
    assert f"{bad}:2: invalid JSON" in err
    assert "Traceback" not in err
    rc, _, err = await _preheat("load", "--target", "http://x:1", "--trace", str(bad))
    assert rc == 2
    assert "gRPC wants HOST:PORT" in err
    rc, _, err = await _preheat(
        "load", "--target", "127.0.0.1:1", "--trace", str(bad), "--time-scale", "0"
    )
    assert rc == 2
    assert "--time-scale must be > 0" in err


async def test_router_admission_rejections_are_recorded_on_both_wires(tmp_path: Path) -> None:
    # a router with no endpoint and no room to wait refuses at once: 429 / RESOURCE_EXHAUSTED
    trace = write_trace(tmp_path / "t.jsonl", 3, gap_ms=0)
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text("[]")
    async with spawn_router(["--discovery", f"static:{endpoints}", "--max-queue", "0"]) as r:
        wires: list[tuple[Api, str]] = [("grpc", r.grpc_target), ("openai", r.http_url)]
        for api, target in wires:
            with RunWriter(tmp_path / api, RunMeta(name=api)) as writer:
                summary = await replay(target, small(trace), LoadOptions(api=api), writer)
            run = read_run(tmp_path / api)
            assert (summary.rejected, summary.ok, summary.error) == (3, 0, 0), run.requests
            assert [r.outcome for r in run.requests] == ["rejected"] * 3
            prefix = "RESOURCE_EXHAUSTED" if api == "grpc" else "HTTP 429"
            assert all(r.error.startswith(prefix) for r in run.requests), run.requests
            assert "router queue is full" in run.requests[0].error


async def test_a_second_ctrl_c_cancels_what_is_in_flight(tmp_path: Path) -> None:
    # long answers (1000 tokens at ~9 ms each) and a long drain: only the second Ctrl-C ends it
    trace = write_trace(tmp_path / "t.jsonl", 10, gap_ms=100, output_tokens=1000)
    run_dir = tmp_path / "run"
    async with spawn_worker(FAST_WORKER) as w, preheat_process(
        "load", "--target", w.grpc_target, "--trace", str(trace),
        "--token-scale", str(1 / 32), "--out", str(run_dir), "--drain-s", "120",
        "--no-progress",
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)
        await asyncio.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        await asyncio.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130, out.decode() + err.decode()
    assert "stopping now: requests in flight are cancelled" in err.decode()
    run = read_run(run_dir)
    load = run.meta.extra["load"]
    assert load["cancelled"] >= 1
    assert load["sent"] + load["not_sent"] == 10
    cancelled = [r for r in run.requests if r.error.startswith("cancelled")]
    assert len(cancelled) == load["cancelled"]
    assert len(run.requests) == load["sent"]
