"""A run's misses and replicas by period: where in a long run (a replayed day) the SLO was
missed and what the pool held then. Pure, no I/O: :func:`by_period` turns a
:class:`~preheat.report.record.Run` and the periods' edges into one :class:`PeriodFigures`
per period; :func:`render_periods` is the table ``preheat report --periods`` prints.

- A request belongs to the period it was sent in (``t_s``).
- A **miss** is what SLO attainment counts against (:mod:`preheat.report.summary`): a
  request rejected or failed, or finished over the run's TTFT objective (or its e2e
  objective, when set). Without an objective only the rejected and failed are misses.
- **Mean replicas**: ``replicas.jsonl`` integrated over the period as a step function (as
  the run's replica-seconds are), every state counted (active, standby, starting,
  draining: each holds a GPU), divided by the period's length.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from preheat.report.record import RequestOutcome, Run
from preheat.report.summary import REPLICA_STATES, replica_steps, run_end_s

__all__ = ["PeriodFigures", "by_period", "parse_periods", "render_periods"]

#: at most this many periods (a table a person reads; ``--periods 1`` on a day is 86,400)
MAX_PERIODS = 1000


@dataclass(frozen=True)
class PeriodFigures:
    start_s: float
    end_s: float
    requests: int
    misses: int
    rejected: int
    failed: int
    late: int  # finished, over an objective
    replica_seconds: float

    @property
    def mean_replicas(self) -> float:
        span = self.end_s - self.start_s
        return self.replica_seconds / span if span > 0 else 0.0


def parse_periods(text: str) -> tuple[float, ...]:
    """``--periods``: the periods' edges in seconds of the run (``0,360,720,2160``: a period
    from each edge to the next, the last to the run's end), or one length (``360``: periods
    of 360 s from 0, the last cut at the run's end). ValueError saying what is wrong."""
    parts = [p.strip() for p in text.split(",")]
    try:
        edges = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"--periods {text!r}: expected seconds, e.g. 360 or 0,360,720") from None
    if not all(math.isfinite(e) and e >= 0 for e in edges):
        raise ValueError(f"--periods {text!r}: every edge must be a finite number >= 0")
    if len(edges) == 1 and edges[0] <= 0:
        raise ValueError(f"--periods {text!r}: a period's length must be > 0")
    if any(b <= a for a, b in itertools.pairwise(edges)):
        raise ValueError(f"--periods {text!r}: the edges must increase")
    if len(edges) > MAX_PERIODS:
        raise ValueError(f"--periods {text!r}: at most {MAX_PERIODS} periods")
    return edges


def _bounds(edges: Sequence[float], end_s: float) -> list[tuple[float, float]]:
    """(start, end) of each period: the edges, or one length repeated to the run's end."""
    if len(edges) == 1:
        step = edges[0]
        n = max(1, math.ceil(end_s / step))
        if n > MAX_PERIODS:
            raise ValueError(
                f"--periods {step:g}: {n} periods in a run of {end_s:.0f} s; at most {MAX_PERIODS}"
            )
        return [(i * step, min((i + 1) * step, end_s)) for i in range(n)]
    ends = [*edges[1:], max(end_s, edges[-1])]
    return [(a, b) for a, b in zip(edges, ends, strict=True) if b > a]


def _late(r: RequestOutcome, ttft_ms: float, e2e_ms: float) -> bool:
    return (ttft_ms > 0 and r.ttft_ms > ttft_ms) or (e2e_ms > 0 and r.e2e_ms > e2e_ms)


def by_period(run: Run, edges: Sequence[float]) -> list[PeriodFigures]:
    """The run's figures in each period of ``edges`` (:func:`parse_periods`)."""
    end = max([run_end_s(run), *(r.t_s for r in run.requests)])  # every request in one
    bounds = _bounds(edges, end)
    ttft, e2e = run.meta.ttft_objective_ms, run.meta.e2e_objective_ms
    counts = [[0, 0, 0, 0] for _ in bounds]  # requests, rejected, failed, late
    starts = [a for a, _ in bounds]
    for r in run.requests:
        i = _index(starts, bounds, r.t_s)
        if i is None:
            continue
        c = counts[i]
        c[0] += 1
        if r.outcome == "rejected":
            c[1] += 1
        elif r.outcome != "ok":
            c[2] += 1
        elif _late(r, ttft, e2e):
            c[3] += 1
    held = [0.0 for _ in bounds]
    for t0, t1, sample in replica_steps(run.replicas, end):
        pods = sum(getattr(sample, s) for s in REPLICA_STATES)
        for i, (a, b) in enumerate(bounds):
            overlap = min(t1, b) - max(t0, a)
            if overlap > 0:
                held[i] += overlap * pods
    return [
        PeriodFigures(a, b, c[0], c[1] + c[2] + c[3], c[1], c[2], c[3], h)
        for (a, b), c, h in zip(bounds, counts, held, strict=True)
    ]


def _index(starts: Sequence[float], bounds: Sequence[tuple[float, float]], t: float) -> int | None:
    """The period ``t`` falls in (None: before the first or past the last; the periods
    follow each other, the last closed at its end)."""
    i = bisect.bisect_right(starts, t) - 1
    if i < 0:
        return None
    return i if t < bounds[i][1] or (i == len(bounds) - 1 and t == bounds[i][1]) else None


def render_periods(run: Run, periods: Sequence[PeriodFigures]) -> str:
    """The table: one line per period, then (with several) ``all``: their sums, and the
    replicas held on average over them."""
    ttft, e2e = run.meta.ttft_objective_ms, run.meta.e2e_objective_ms
    objective = " and ".join(
        s
        for s in (
            f"TTFT <= {ttft:g} ms" if ttft > 0 else "",
            f"e2e <= {e2e:g} ms" if e2e > 0 else "",
        )
        if s
    )
    said = objective or "no objective: misses are the rejected and failed"
    lines = [
        f"by period (a miss: rejected, failed or over the SLO; SLO: {said}):",
        f"  {'period (s)':>17} {'requests':>9} {'misses':>8} {'rejected':>9} {'failed':>7} "
        f"{'late':>7} {'mean replicas':>14}",
    ]
    rows = list(periods)
    if len(rows) > 1:
        rows.append(
            PeriodFigures(
                rows[0].start_s,
                rows[-1].end_s,
                requests=sum(p.requests for p in periods),
                misses=sum(p.misses for p in periods),
                rejected=sum(p.rejected for p in periods),
                failed=sum(p.failed for p in periods),
                late=sum(p.late for p in periods),
                replica_seconds=sum(p.replica_seconds for p in periods),
            )
        )
    for n, p in enumerate(rows):
        span = "all" if n == len(periods) else f"{p.start_s:g}-{p.end_s:g}"
        lines.append(
            f"  {span:>17} {p.requests:>9} {p.misses:>8} {p.rejected:>9} {p.failed:>7} "
            f"{p.late:>7} {p.mean_replicas:>14.1f}"
        )
    return "\n".join(lines)
