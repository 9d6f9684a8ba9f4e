"""``preheat bench forecast``: how far off ``autoscaling.predictive``'s forecast would be on
a series of arrival rates, with no season, the daily season, and the daily and weekly ones,
side by side (:mod:`preheat.core.autoscaling.forecast`, the policy's own code and
smoothing).

The rates are any of:

- ``--servegen CSV --workload W``: ServeGen's aggregate rate per 10-minute window
  (``../shared/data/servegen_aggregate_rate_10min.csv``: ``language/m-large``, ``m-mid`` and
  ``m-small`` cover 14 days);
- ``--schedule JSON``: ``{"rates_rps": [...], "window_s": W}`` (what ``preheat bench traces``
  writes as ``diurnal-schedule.json``);
- ``--trace FILE`` (any format ``preheat simulate`` reads) counted in ``--window-s`` windows.

Each window's rate is observed at the window's end (it is the window's mean, known when it
ends), as the operator observes the rate over its ``window`` at each evaluation. Every
observation predicts each ``--horizons`` ahead; the first observation at or after that time
checks it: ``error = |forecast - observed| / observed`` (windows with nothing arriving are
not scored). Errors are counted from ``--score-from`` periods on (default: after seven
periods when the series is longer than seven, so that the weekly season is in use; else
after one), and summarised as median and 90th percentile, nearest rank.

Never a test: the figures depend on the traffic. Run it on your own rates before turning
``autoscaling.predictive`` (or ``weekly``) on.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from preheat.api.pool import parse_duration
from preheat.core.autoscaling.forecast import (
    Accuracy,
    Forecast,
    HoltWinters,
    accuracy,
    observe,
    predict,
)
from preheat.report.markdown import write_section
from preheat.simulate.compare import read_schedule
from preheat.simulate.options import SimInputError
from preheat.workload.bursts import read_servegen_rates
from preheat.workload.traceargs import read_requests
from preheat.workload.traces import FORMATS, TraceError, TraceOptions

SERVEGEN_WINDOW_S = 600.0

__all__ = ["Variant", "evaluate", "variants", "window_rates"]


@dataclass(frozen=True)
class Variant:
    name: str
    hw: HoltWinters


def variants(period_s: float) -> tuple[Variant, ...]:
    """The forecasts compared: the policy's smoothing with its season off (``gamma`` 0: the
    offsets stay 0), on, and with the weekly one."""
    daily = HoltWinters(period_s=period_s)
    p = _dur(period_s)
    return (
        Variant("level, trend", replace(daily, gamma=0.0)),
        Variant(f"season ({p})", daily),
        Variant(f"season ({p}) + weekly (7 x {p})", replace(daily, weekly=True)),
    )


def window_rates(arrivals: Sequence[float], window_s: float) -> list[float]:
    """Arrivals (seconds, any order) counted per ``window_s`` window from 0, as req/s."""
    if window_s <= 0:
        raise ValueError(f"--window-s must be > 0, got {window_s:g}")
    if not arrivals:
        return []
    n = int(max(arrivals) // window_s) + 1
    counts = [0] * n
    for t in arrivals:
        counts[int(t // window_s)] += 1
    return [c / window_s for c in counts]


def evaluate(
    rates: Sequence[float],
    window_s: float,
    hw: HoltWinters,
    horizons_s: Sequence[float],
    score_from_s: float,
) -> dict[float, Accuracy | None]:
    """Each horizon's errors over the series (window ``i`` observed at ``(i + 1) *
    window_s``), counted for predictions checked at or after ``score_from_s``."""
    times = [(i + 1) * window_s for i in range(len(rates))]
    errors: dict[float, list[float]] = {h: [] for h in horizons_s}
    pending: list[tuple[float, float, float]] = []  # (due, horizon, value)
    f: Forecast | None = None
    for t, y in zip(times, rates, strict=True):
        due = [p for p in pending if p[0] <= t + 1e-6]
        pending = [p for p in pending if p[0] > t + 1e-6]
        if t >= score_from_s and y > 0:
            for _, h, v in due:
                errors[h].append(abs(v - y) / y)
        f = observe(f, t, y, hw)
        pending.extend((t + h, h, predict(f, h, hw)) for h in horizons_s)
    return {h: accuracy(errors[h]) for h in horizons_s}


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--servegen", type=Path, help="ServeGen aggregate rates (CSV)")
    src.add_argument("--schedule", type=Path, help='{"rates_rps": [...], "window_s": W}')
    src.add_argument("--trace", type=Path, help="a request trace, counted in --window-s")
    p.add_argument(
        "--workload",
        default=None,
        help=f"with --servegen: the workload (default {DEFAULT_WORKLOAD})",
    )
    p.add_argument("--format", choices=FORMATS, default=None, help="with --trace (default auto)")
    p.add_argument(
        "--window-s", type=float, default=None, help=f"with --trace (default {DEFAULT_WINDOW_S:g})"
    )
    p.add_argument("--period", default="24h", help="autoscaling.predictive.period (24h)")
    p.add_argument(
        "--horizons", default="10m,1h,6h", help="how far ahead, comma-separated durations"
    )
    p.add_argument(
        "--score-from",
        type=float,
        default=None,
        help="count errors from this many periods on (default 7 when the series is longer, else 1)",
    )
    p.add_argument("--write", type=Path, default=None, help="update this benchmarks.md")


@dataclass(frozen=True)
class Series:
    rates: list[float]
    window_s: float
    source: str  # what it is, for the report
    name: str  # for the benchmarks.md section


DEFAULT_WORKLOAD = "language/m-large"
DEFAULT_WINDOW_S = 60.0


def unused_flags(args: argparse.Namespace) -> list[str]:
    """A flag its source does not read, each named (it was ignored: ``--window-s 0`` with
    ``--servegen`` ran as if it had not been given)."""
    out = []
    for flag, value, source in (
        ("--workload", args.workload, "--servegen"),
        ("--format", args.format, "--trace"),
        ("--window-s", args.window_s, "--trace"),
    ):
        given = getattr(args, source.removeprefix("--")) is not None
        if value is not None and not given:
            out.append(f"{flag} is read with {source} only")
    return out


def _series(args: argparse.Namespace) -> Series:
    if args.servegen is not None:
        workload = args.workload or DEFAULT_WORKLOAD
        rates = read_servegen_rates(args.servegen, workload)
        source = f"ServeGen `{workload}` ({args.servegen.name})"
        return Series(rates, SERVEGEN_WINDOW_S, source, workload.replace("/", "-"))
    if args.schedule is not None:
        s = read_schedule(args.schedule)
        return Series(list(s.rates_rps), s.window_s, args.schedule.name, args.schedule.stem)
    window_s = DEFAULT_WINDOW_S if args.window_s is None else args.window_s
    if not 0 < window_s < math.inf:  # before the trace is read
        raise ValueError(f"--window-s must be > 0 and finite, got {window_s:g}")
    trace = read_requests(args.trace, TraceOptions(fmt=args.format or "auto"))
    rates = window_rates([r.arrival_s for r in trace], window_s)
    source = f"{args.trace.name} ({len(trace):,} requests)"
    return Series(rates, window_s, source, args.trace.stem)


def report(
    rates: Sequence[float],
    window_s: float,
    source: str,
    period_s: float,
    horizons_s: Sequence[float],
    score_from: float,
) -> str:
    """The markdown table of each variant's errors at each horizon."""
    span = len(rates) * window_s
    head = " | ".join(f"{_dur(h)} ahead (median / p90)" for h in horizons_s)
    lines = [
        f"{source}: {len(rates):,} windows of {_dur(window_s)} ({span / period_s:.1f} periods "
        f"of {_dur(period_s)}), mean {sum(rates) / max(1, len(rates)):.1f} req/s; errors "
        f"counted from period {score_from:g} on.",
        "",
        f"| forecast | {head} | scored |",
        "|---|" + "---:|" * (len(horizons_s) + 1),
    ]
    for v in variants(period_s):
        acc = evaluate(rates, window_s, v.hw, horizons_s, score_from * period_s)
        cells = " | ".join(
            "-" if a is None else f"{a.median * 100:.0f}% / {a.p90 * 100:.0f}%"
            for a in (acc[h] for h in horizons_s)
        )
        scored = max((a.count for a in acc.values() if a is not None), default=0)
        lines.append(f"| {v.name} | {cells} | {scored:,} |")
    return "\n".join(lines) + "\n"


def _dur(s: float) -> str:
    for unit, n in (("h", 3600.0), ("m", 60.0)):
        if s >= n and math.isclose(s / n, round(s / n)):
            return f"{round(s / n)}{unit}"
    return f"{s:g}s"


def run(args: argparse.Namespace) -> int:
    try:
        period_s = parse_duration(args.period)
        horizons = [parse_duration(h.strip()) for h in args.horizons.split(",") if h.strip()]
        if period_s <= 0 or not horizons or min(horizons) <= 0:
            raise ValueError("--period and every --horizons must be > 0")
        unused = unused_flags(args)
        if unused:
            raise ValueError("; ".join(unused))
        series = _series(args)
    except (ValueError, TraceError, SimInputError) as e:
        print(f"preheat bench forecast: {e}", file=sys.stderr)
        return 2
    rates, window_s = series.rates, series.window_s
    periods = len(rates) * window_s / period_s
    score_from = args.score_from if args.score_from is not None else (7 if periods > 7 else 1)
    if score_from < 0 or score_from >= periods:
        print(
            f"preheat bench forecast: --score-from {score_from:g} leaves nothing to score "
            f"(the series covers {periods:.1f} periods of {_dur(period_s)})",
            file=sys.stderr,
        )
        return 2
    text = report(rates, window_s, series.source, period_s, horizons, score_from)
    print(text, end="")
    if args.write is not None:
        write_section(args.write, f"forecast-{series.name}", text)
    return 0
