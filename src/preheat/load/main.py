"""``preheat load --target HOST:PORT --trace FILE``: replay a trace against a router or a
worker (gRPC, or the OpenAI HTTP API with ``--api openai``) and record every request's
outcome into a run folder that ``preheat report`` reads.

Exit codes: 0 the replay ran (whatever the server answered); 1 the target cannot be
reached; 2 bad input (options, trace); 130 stopped by Ctrl-C (what was sent is still
recorded).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from preheat.load.clients import ConnectError
from preheat.load.replay import APIS, LoadOptions, LoadSummary, replay
from preheat.report.record import REQUESTS_FILE, RequestOutcome, RunMeta, RunWriter, read_meta
from preheat.workload.traceargs import add_trace_arguments, read_requests, trace_options
from preheat.workload.traces import TraceError, TraceRequest

LOAD_KEY = "load"  # meta.extra[LOAD_KEY]: what this replay did


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("target")
    g.add_argument(
        "--target",
        required=True,
        help="gRPC HOST:PORT of a router or worker; with --api openai, http://HOST:PORT",
    )
    g.add_argument("--api", choices=APIS, default="grpc", help="wire to use (default grpc)")
    g.add_argument("--model", default="", help="model name to send (default: the pool's)")
    t = parser.add_argument_group("trace")
    add_trace_arguments(t)
    s = parser.add_argument_group("sending")
    s.add_argument(
        "--concurrency",
        type=int,
        default=1024,
        help="most requests in flight; one due beyond it is dropped and recorded as such",
    )
    s.add_argument("--timeout-s", type=float, default=300.0, help="per-request deadline")
    s.add_argument(
        "--drain-s",
        type=float,
        default=10.0,
        help="after Ctrl-C, how long requests in flight may finish",
    )
    s.add_argument(
        "--ttft-deadline-ms",
        type=int,
        default=0,
        help="TTFT budget sent with each request, for the server's admission (0: none)",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="run folder (default runs/load-<time>). A folder that `preheat up` is "
        "recording into is joined: requests go next to its events, on its time axis",
    )
    o.add_argument("--name", default="", help="run name (default: the folder's name)")
    o.add_argument(
        "--ttft-objective-ms",
        type=float,
        default=0.0,
        help="TTFT objective the report measures attainment against (0: none)",
    )
    o.add_argument("--e2e-objective-ms", type=float, default=0.0, help="end-to-end objective")
    o.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (off a terminal: no periodic progress lines)",
    )


def _fail(message: str) -> int:
    print(f"preheat load: {message}", file=sys.stderr)
    return 2


def _describe(args: argparse.Namespace) -> str:
    """The trace and the options it was replayed with, for meta.json."""
    parts = [str(args.trace)]
    defaults: dict[str, object] = {
        "format": "auto",
        "start_s": 0.0,
        "time_scale": 1.0,
        "rate_scale": 1.0,
        "duration": None,
        "max_requests": None,
        "token_scale": 1.0,
        "max_input_tokens": None,
        "max_output_tokens": None,
        "sessions": "root",
    }
    for key, default in defaults.items():
        value = getattr(args, key)
        if value != default:
            parts.append(f"--{key.replace('_', '-')} {value}")
    return " ".join(parts)


def open_writer(folder: Path, meta: RunMeta) -> tuple[RunWriter, float, bool]:
    """The writer for ``folder``: joins a run another producer (``preheat up``) is recording
    there (its meta has a ``t0_unix`` and no earlier replay of ours), writing only
    ``requests.jsonl`` on its time axis; otherwise starts a fresh run. Returns the writer,
    ``t0_unix`` and whether it joined."""
    existing = read_meta(folder)
    if existing is not None and existing.t0_unix > 0 and LOAD_KEY not in existing.extra:
        joined = existing
        for key in ("trace", "target"):  # `command` stays the other producer's
            setattr(joined, key, getattr(meta, key))
        if meta.ttft_objective_ms > 0 or joined.ttft_objective_ms <= 0:
            joined.ttft_objective_ms = meta.ttft_objective_ms
        if meta.e2e_objective_ms > 0:
            joined.e2e_objective_ms = meta.e2e_objective_ms
        return RunWriter(folder, joined, parts=(REQUESTS_FILE,)), joined.t0_unix, True
    meta.t0_unix = time.time()
    return RunWriter(folder, meta), meta.t0_unix, False


class _Progress:
    """A rich progress bar over recorded outcomes on a terminal; elsewhere (a log file, make
    demo) a plain line every ``LOG_EVERY_S`` seconds; nothing with ``quiet``."""

    LOG_EVERY_S = 10.0

    def __init__(self, total: int, *, tty: bool, quiet: bool) -> None:
        self.total = total
        self.counts = {"ok": 0, "rejected": 0, "error": 0}
        self._bar: Any = None
        self._log = not tty and not quiet
        self._start = time.monotonic()
        self._next_log = self._start + self.LOG_EVERY_S
        if tty and not quiet:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("replay"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[status]}"),
                transient=False,
            )
            self._task = self._bar.add_task("replay", total=total, status="")

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        if self._bar is None:
            yield
            return
        with self._bar:
            yield

    def __call__(self, outcome: RequestOutcome) -> None:
        self.counts[outcome.outcome] += 1
        c = self.counts
        status = f"ok {c['ok']}  rejected {c['rejected']}  error {c['error']}"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, status=status)
        elif self._log and time.monotonic() >= self._next_log:
            now = time.monotonic()
            self._next_log = now + self.LOG_EVERY_S
            done = sum(c.values())
            print(f"  {now - self._start:6.1f} s  {done}/{self.total} done: {status}", flush=True)


async def _run(
    args: argparse.Namespace,
    requests: list[TraceRequest],
    options: LoadOptions,
    writer: RunWriter,
    progress: _Progress,
) -> LoadSummary:
    stop, abort = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if not stop.is_set():
            print(
                f"\nstopping: no more requests; waiting up to {options.drain_s:g} s for those "
                "in flight (Ctrl-C again to stop now)",
                file=sys.stderr,
            )
            stop.set()
        elif not abort.is_set():
            print("stopping now: requests in flight are cancelled", file=sys.stderr)
            abort.set()

    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, on_signal)
        loop.add_signal_handler(signal.SIGTERM, on_signal)
    try:
        with progress.running():
            return await replay(
                args.target, requests, options, writer, stop=stop, abort=abort, on_result=progress
            )
    finally:
        with contextlib.suppress(NotImplementedError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)


def run(args: argparse.Namespace) -> int:
    try:
        return _replay_cli(args)
    except KeyboardInterrupt:  # before the replay's own handler is installed, or after
        print("preheat load: interrupted", file=sys.stderr)
        return 130


def _replay_cli(args: argparse.Namespace) -> int:
    try:
        topts = trace_options(args)
        options = LoadOptions(
            api=args.api,
            concurrency=args.concurrency,
            max_output_tokens=args.max_output_tokens,
            request_timeout_s=args.timeout_s,
            drain_s=args.drain_s,
            model=args.model,
            ttft_deadline_ms=args.ttft_deadline_ms,
        )
    except ValueError as err:
        return _fail(str(err))
    if args.api == "grpc" and "://" in args.target:
        return _fail(f"--target {args.target}: gRPC wants HOST:PORT (or use --api openai)")
    if args.api == "openai" and not args.target.startswith(("http://", "https://")):
        return _fail(f"--target {args.target}: --api openai wants http://HOST:PORT")
    bad = [
        f"{flag} must be >= 0 and finite (0: none), got {value}"
        for flag, value in (
            ("--ttft-objective-ms", args.ttft_objective_ms),
            ("--e2e-objective-ms", args.e2e_objective_ms),
        )
        if not 0 <= value < math.inf
    ]
    if bad:
        return _fail("; ".join(bad))
    try:
        requests = read_requests(args.trace, topts)
    except TraceError as err:
        return _fail(str(err))
    if not requests:
        return _fail(f"{args.trace}: no request in the selected slice")

    stamp = datetime.now(UTC)
    folder: Path = args.out or Path("runs") / f"load-{stamp:%Y%m%d-%H%M%S}"
    meta = RunMeta(
        name=args.name or folder.name,
        started_at=stamp.isoformat(timespec="seconds"),
        trace=_describe(args),
        target=f"{args.api} {args.target}",
        ttft_objective_ms=args.ttft_objective_ms,
        e2e_objective_ms=args.e2e_objective_ms,
        command=shlex.join(["preheat", *sys.argv[1:]]),
    )
    try:
        writer, t0, joined = open_writer(folder, meta)
    except OSError as err:
        return _fail(f"cannot write the run folder {folder}: {err.strerror}")
    options = replace(options, t0_unix=t0)
    span = requests[-1].arrival_s
    how = "joining the run being recorded in" if joined else "recording into"
    if joined and writer.meta.duration_s > 0:
        print(
            f"note: the run in {folder} already ended ({writer.meta.duration_s:.0f} s); "
            "requests are placed on its time axis anyway (use another --out for a fresh run)",
            file=sys.stderr,
        )
    print(
        f"replaying {len(requests)} requests over {span:.1f} s against {args.api} "
        f"{args.target}; {how} {folder}",
        flush=True,
    )
    progress = _Progress(len(requests), tty=sys.stdout.isatty(), quiet=args.no_progress)
    summary: LoadSummary | None = None
    failure = "interrupted"
    try:
        summary = asyncio.run(_run(args, requests, options, writer, progress))
    except ConnectError as err:
        failure = str(err)
        print(f"preheat load: {err}", file=sys.stderr)
        return 1
    finally:
        _finish(writer, folder, joined, summary, failure, meta.command, time.time() - t0)
    print(summary.line())
    if summary.errors:
        print("errors: " + ", ".join(f"{k} x{n}" for k, n in summary.errors.items()))
    print(f"run folder: {folder}  (preheat report {folder})")
    return 130 if summary.stopped else 0


def _finish(
    writer: RunWriter,
    folder: Path,
    joined: bool,
    summary: LoadSummary | None,
    failure: str,
    command: str,
    end_s: float,
) -> None:
    """Closes the writer with the final meta. A joined run's meta is re-read first, so what
    the other producer wrote meanwhile is kept; only this replay's fields are set."""
    if joined:
        current = read_meta(folder)
        if current is not None:
            for key in ("trace", "target", "ttft_objective_ms", "e2e_objective_ms"):
                setattr(current, key, getattr(writer.meta, key))
            writer.meta = current
    mine: dict[str, Any] = summary_dict(summary) if summary is not None else {"failed": failure}
    mine["command"] = command
    writer.meta.extra = {**writer.meta.extra, LOAD_KEY: mine}
    writer.meta.duration_s = max(writer.meta.duration_s, end_s)
    writer.close()


def summary_dict(s: LoadSummary) -> dict[str, Any]:
    return {
        "scheduled": s.scheduled,
        "sent": s.sent,
        "ok": s.ok,
        "rejected": s.rejected,
        "error": s.error,
        "cancelled": s.cancelled,
        "dropped": s.dropped,
        "late": s.late,
        "not_sent": s.not_sent,
        "max_lag_ms": round(s.max_lag_ms, 3),
        "wall_s": round(s.wall_s, 3),
    }
