"""The trace flags that ``preheat load`` and ``preheat simulate`` share, and how they turn
into :class:`~preheat.workload.traces.TraceOptions` and requests: one definition, so a trace
replays the same way live and simulated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from preheat.workload.traces import FORMATS, TraceOptions, TraceRequest, read_trace, tied_share

#: the share of requests tied with the one before from which the replay says so
TIED_NOTE = 0.05
#: the flag that sets each :class:`TraceOptions` field as given (its refusals name the flag)
FLAGS = {
    "start_s": "--start-s",
    "duration_s": "--duration",  # scaled only when valid, so a refusal shows the flag's value
    "time_scale": "--time-scale",
    "rate_scale": "--rate-scale",
    "max_requests": "--max-requests",
    "max_input_tokens": "--max-input-tokens",
    "token_scale": "--token-scale",
    "sessions": "--sessions",
    "spread_ties_s": "--spread-ties",
}


def add_trace_arguments(group: Any) -> None:
    """``--trace`` and the flags that select, scale and clip it (an argparse group)."""
    group.add_argument(
        "--trace",
        type=Path,
        required=True,
        help="trace file (JSONL: ours or Mooncake; CSV: Azure LLM or BurstGPT)",
    )
    group.add_argument(
        "--format", choices=FORMATS, default="auto", help="trace format (default auto)"
    )
    group.add_argument("--start-s", type=float, default=0.0, help="skip this much of the trace")
    group.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every arrival time (0.1 = ten times faster)",
    )
    group.add_argument(
        "--rate-scale", type=float, default=1.0, help="divide every arrival time (10 = 10x rate)"
    )
    group.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of replay (after scaling); the rest of the trace is not sent",
    )
    group.add_argument("--max-requests", type=int, default=None, help="at most N requests")
    group.add_argument(
        "--token-scale",
        type=float,
        default=1.0,
        help="prompt tokens per trace token, block by block (shared prefixes stay shared)",
    )
    group.add_argument("--max-input-tokens", type=int, default=None, help="clip prompt lengths")
    group.add_argument("--max-output-tokens", type=int, default=None, help="clip output lengths")
    group.add_argument(
        "--trace-model",
        default="",
        metavar="NAME",
        help="keep only this model's rows (a BurstGPT trace's Model column: ChatGPT, GPT-4)",
    )
    group.add_argument(
        "--spread-ties",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="requests that share a timestamp arrive evenly over this many seconds from it "
        "instead of all at once (BurstGPT's timestamps are whole seconds: 1); in the trace's "
        "time, before the scales (default 0: as the file says)",
    )
    group.add_argument(
        "--sessions",
        choices=("keep", "root", "none"),
        default="root",
        help="session ids: keep the trace's, derive from the conversation root when the "
        "trace has none but has prefix blocks (default), or none",
    )


def trace_options(args: argparse.Namespace) -> TraceOptions:
    """The options :func:`add_trace_arguments`' flags ask for; ValueError if they conflict
    or one is out of range (:class:`TraceOptions`' checks, each naming its flag)."""
    factor = args.time_scale / args.rate_scale if args.rate_scale > 0 else 1.0
    duration = args.duration
    if duration is not None and duration > 0 and factor > 0:
        duration /= factor  # the replay's seconds, in the trace's
    try:
        return TraceOptions(
            fmt=args.format,
            start_s=args.start_s,
            duration_s=duration,
            time_scale=args.time_scale,
            rate_scale=args.rate_scale,
            max_requests=args.max_requests,
            max_input_tokens=args.max_input_tokens,
            token_scale=args.token_scale,
            sessions=args.sessions,
            model=args.trace_model,
            spread_ties_s=args.spread_ties,
        )
    except ValueError as e:  # every problem at once, each naming the flag that set it
        raise ValueError("; ".join(_flagged(p) for p in str(e).split("; "))) from None


def _flagged(problem: str) -> str:
    """``time_scale must be > 0, got 0.0`` -> ``--time-scale must be > 0, got 0.0``."""
    field, _, rest = problem.partition(" ")
    return f"{FLAGS[field]} {rest}" if field in FLAGS else problem


def read_requests(path: Path, options: TraceOptions) -> list[TraceRequest]:
    """The trace's requests (``sessions="root"`` on a trace without prefix blocks keeps its
    own session ids: :class:`TraceOptions`). Rows the file has but that are not replayed (a
    CSV trace's 0-token rows) are said on stderr."""
    trace = read_trace(path, options)
    said = trace.describe_skipped()
    if said:
        print(f"preheat: {path}: {said}", file=sys.stderr)
    tied = tied_share(trace.requests)
    if tied >= TIED_NOTE and options.spread_ties_s == 0:
        print(
            f"preheat: {path}: {tied:.0%} of the requests arrive at the same instant as the "
            "one before (the file's timestamps are coarse?): they are sent together; "
            "--spread-ties 1 spreads each second's over that second",
            file=sys.stderr,
        )
    return trace.requests
