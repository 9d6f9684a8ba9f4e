"""A day of traffic for autoscaling: one day of a ServeGen rate curve, Azure request sizes.

How the trace is made (deterministic given ``DiurnalSpec.seed``):

1. **Rate curve.** Day ``day`` of a ServeGen workload's aggregate rates
   (``servegen_aggregate_rate_10min.csv``: 144 ten-minute windows a day;
   ``language/m-large`` by default, 14 days of Alibaba Bailian traffic, no gaps), rescaled so
   that its highest window is ``peak_rps`` (its shape, night and peak, is kept).
2. **Replay speed.** Each 10-minute window is replayed in ``window_s`` seconds (600: real
   time, a 24-hour replay; less compresses the day). ``hours`` (under 24) keeps only the
   day's first hours: the same requests as the whole day's first ones (a slice of a replay
   too long to simulate whole, starting where ``reference_day`` ends).
3. **Arrivals and sizes** as in :mod:`preheat.workload.bursts` (steps 4-5): Poisson at each
   window's rate, prompt and output tokens of the Azure LLM 2023 conv rows in order from a
   seeded offset.

The day before (``reference_day``, rescaled by the same factor) is what an SRE had seen
when setting a schedule: :func:`hourly_schedule` turns it into one pool size per hour of
the day (:class:`preheat.core.autoscaling.baselines.Scheduled` runs it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preheat.workload.bursts import (
    SERVEGEN_WINDOW_S,
    RateCurve,
    read_servegen_rates,
    requests_on_curve,
)
from preheat.workload.traces import TraceRequest

__all__ = ["DiurnalSpec", "day_curves", "diurnal_trace", "hourly_schedule"]

WINDOWS_PER_DAY = int(24 * 3600 / SERVEGEN_WINDOW_S)  # 144
WINDOWS_PER_HOUR = int(3600 / SERVEGEN_WINDOW_S)  # 6


@dataclass(frozen=True)
class DiurnalSpec:
    workload: str = "language/m-large"
    day: int = 1  # which day of the workload to replay (0-based)
    reference_day: int = 0  # the day the schedule is set from
    peak_rps: float = 200.0  # the replayed day's highest window
    window_s: float = SERVEGEN_WINDOW_S  # replay seconds per 10-minute window
    seed: int = 0
    hours: float = 24.0  # the day's first hours replayed (24: all of it)

    def __post_init__(self) -> None:
        errors: list[str] = []
        if self.day < 0 or self.reference_day < 0:
            errors.append("day and reference_day must be >= 0")
        if not self.peak_rps > 0:
            errors.append(f"peak_rps must be > 0, got {self.peak_rps}")
        if not self.window_s > 0:
            errors.append(f"window_s must be > 0, got {self.window_s}")
        if not 0 < self.hours <= 24:
            errors.append(f"hours must be within (0, 24], got {self.hours}")
        if errors:
            raise ValueError("; ".join(errors))


def day_curves(rates: Sequence[float], spec: DiurnalSpec) -> tuple[RateCurve, RateCurve]:
    """(the replayed day, the reference day), both rescaled by the factor that makes the
    replayed day's peak ``peak_rps``."""
    need = (max(spec.day, spec.reference_day) + 1) * WINDOWS_PER_DAY
    if len(rates) < need:
        raise ValueError(
            f"day {max(spec.day, spec.reference_day)} needs {need} windows; got {len(rates)}"
        )

    def span(day: int) -> tuple[float, ...]:
        return tuple(rates[day * WINDOWS_PER_DAY : (day + 1) * WINDOWS_PER_DAY])

    source, ref = span(spec.day), span(spec.reference_day)
    if max(source) <= 0:
        raise ValueError(f"day {spec.day} has no traffic")
    k = spec.peak_rps / max(source)
    first = spec.day * WINDOWS_PER_DAY
    return (
        RateCurve(spec.workload, first, source, tuple(r * k for r in source), spec.window_s),
        RateCurve(
            spec.workload,
            spec.reference_day * WINDOWS_PER_DAY,
            ref,
            tuple(r * k for r in ref),
            spec.window_s,
        ),
    )


def diurnal_trace(
    spec: DiurnalSpec, servegen_csv: Path | str, azure_csv: Path | str
) -> tuple[list[TraceRequest], RateCurve, RateCurve]:
    """The day's requests (its first ``spec.hours``), its rate curve and the reference
    day's (both whole)."""
    day, ref = day_curves(read_servegen_rates(servegen_csv, spec.workload), spec)
    until = spec.hours * 3600.0 * spec.window_s / SERVEGEN_WINDOW_S if spec.hours < 24 else None
    return requests_on_curve(day, azure_csv, spec.seed, until), day, ref


def hourly_schedule(
    rates: Sequence[float],
    per_pod_rps: float,
    windows_per_hour: int = WINDOWS_PER_HOUR,
    lowest: int = 1,
) -> tuple[int, ...]:
    """One pool size per hour: the hour's busiest window over what one pod takes,
    ``max(lowest, ceil(peak / per_pod_rps))``."""
    if not per_pod_rps > 0:
        raise ValueError(f"per_pod_rps must be > 0, got {per_pod_rps}")
    if windows_per_hour < 1:
        raise ValueError(f"windows_per_hour must be >= 1, got {windows_per_hour}")
    out: list[int] = []
    for h in range(0, len(rates), windows_per_hour):
        peak = max(rates[h : h + windows_per_hour])
        out.append(max(lowest, math.ceil(round(peak / per_pod_rps, 9))))
    return tuple(out)
