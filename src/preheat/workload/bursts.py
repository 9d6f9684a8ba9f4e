"""Bursty traffic for the autoscaling benchmark: Azure request sizes on a ServeGen rate curve.

How the bursts are made (every step deterministic given ``BurstSpec.seed``):

1. **Rate curve.** ``servegen_aggregate_rate_10min.csv`` gives, per 10-minute window, the
   summed request rate of one ServeGen workload (``language/m-small`` by default: Alibaba
   Bailian production traffic). Among all spans of ``windows`` consecutive windows (24 =
   4 hours) that have no gap (no window below 10% of the workload's median rate: the data
   has a few near-zero windows that are collection gaps, not traffic) and whose peak lies
   in the middle half of the span (a climb, a peak and the way down, not a span starting
   or ending at its peak), take the one with the largest peak/mean ratio
   (:func:`select_span`). For m-small and 24 windows that is windows 1689-1712: about
   1,100 req/s, two climbs to 3,157 and 3,880 req/s, then about 1,650 req/s.
2. **Time compression.** Each 10-minute window is replayed in ``window_s`` seconds (60 s:
   10x faster), so a climb that took the real service 20 minutes takes 2 minutes here,
   i.e. about as long as two cold starts of a GPU worker: a hard test for an autoscaler.
3. **Rescaling.** The curve is multiplied so that its mean over the span is
   ``mean_rps``; its shape (peak/mean ratio) is kept. Each window's rate is held constant
   for its compressed duration (the data are window means).
4. **Arrivals.** A non-homogeneous Poisson process with that piecewise-constant rate:
   exponential inter-arrival times at each window's rate (exact for a piecewise-constant
   rate, since the exponential is memoryless), from ``random.Random(seed)``.
5. **Request sizes.** Arrival ``k`` gets the prompt and output token counts of row
   ``(offset + k) mod n`` of ``azure_llm_2023_conv.csv`` (``n`` = 19,366 rows, in the
   trace's own order, so consecutive requests keep the trace's size sequence), with
   ``offset`` drawn from the same generator: rows are thinned when the curve asks for
   fewer requests than the trace has and replicated (wrapping around) when it asks for
   more. Azure has no prefix or session information, so these requests share no prefix.
"""

from __future__ import annotations

import bisect
import csv
import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preheat.workload.traces import (
    TraceError,
    TraceOptions,
    TraceRequest,
    check_trace_size,
    load_trace,
)

SERVEGEN_WINDOW_S = 600.0
DEFAULT_WORKLOAD = "language/m-small"


@dataclass(frozen=True)
class BurstSpec:
    """What bursty trace to build (see the module docstring for each step)."""

    workload: str = DEFAULT_WORKLOAD
    windows: int = 24  # 10-minute windows of the ServeGen span (24 = 4 hours)
    window_s: float = 60.0  # replay seconds per 10-minute window
    mean_rps: float = 12.0  # mean request rate of the replay
    seed: int = 0
    gap_fraction: float = 0.1  # a window below this fraction of the median is a gap

    def __post_init__(self) -> None:
        errors: list[str] = []
        if self.windows < 4:
            errors.append(f"windows must be >= 4, got {self.windows}")
        if not self.window_s > 0:
            errors.append(f"window_s must be > 0, got {self.window_s}")
        if not self.mean_rps > 0:
            errors.append(f"mean_rps must be > 0, got {self.mean_rps}")
        if not 0 <= self.gap_fraction < 1:
            errors.append(f"gap_fraction must be in [0, 1), got {self.gap_fraction}")
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def duration_s(self) -> float:
        return self.windows * self.window_s


@dataclass(frozen=True)
class RateCurve:
    """The chosen span: ``rates_rps[i]`` holds over replay time ``[i * window_s, (i + 1) *
    window_s)``; ``source_rates_rps`` are ServeGen's, before rescaling."""

    workload: str
    first_window: int  # index of the span's first 10-minute window in the workload
    source_rates_rps: tuple[float, ...]
    rates_rps: tuple[float, ...]
    window_s: float

    @property
    def peak_to_mean(self) -> float:
        return max(self.rates_rps) / statistics.fmean(self.rates_rps)

    def rate_at(self, t_s: float) -> float:
        i = int(t_s // self.window_s)
        return self.rates_rps[i] if 0 <= i < len(self.rates_rps) else 0.0


def read_servegen_rates(path: Path | str, workload: str) -> list[float]:
    """The workload's aggregate rate per 10-minute window, in time order."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(p, None, "no such file")
    rows: list[tuple[float, float]] = []
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        need = {"workload", "window_start_s", "total_rate_rps"}
        if reader.fieldnames is None or not need <= set(reader.fieldnames):
            raise TraceError(p, 1, f"CSV header must have {', '.join(sorted(need))}")
        for row in reader:
            if row["workload"] != workload:
                continue
            try:
                rows.append((float(row["window_start_s"]), float(row["total_rate_rps"])))
            except ValueError:
                raise TraceError(
                    p, reader.line_num, "window_start_s and total_rate_rps must be numbers"
                ) from None
    if not rows:
        raise TraceError(p, None, f"no windows for workload {workload!r}")
    rows.sort()
    return [r for _, r in rows]


def select_span(rates: Sequence[float], windows: int, gap_fraction: float = 0.1) -> int:
    """Index of the first window of the span chosen by step 1 of the module docstring.

    Raises ``ValueError`` when no span qualifies (too few windows, all with gaps).
    """
    if windows > len(rates):
        raise ValueError(f"a span of {windows} windows needs at least that many; got {len(rates)}")
    floor = gap_fraction * statistics.median(rates)
    lo, hi = windows // 4, (3 * windows) // 4
    best: tuple[float, int] | None = None
    for i in range(len(rates) - windows + 1):
        span = rates[i : i + windows]
        if min(span) <= floor or min(span) <= 0:
            continue
        peak = max(range(windows), key=lambda j: (span[j], -j))
        if not lo <= peak < hi:
            continue
        ratio = max(span) / statistics.fmean(span)
        if best is None or ratio > best[0]:
            best = (ratio, i)
    if best is None:
        raise ValueError(f"no span of {windows} windows without gaps with its peak in the middle")
    return best[1]


def rate_curve(rates: Sequence[float], spec: BurstSpec) -> RateCurve:
    """Steps 1-3: select, compress, rescale."""
    first = select_span(rates, spec.windows, spec.gap_fraction)
    source = tuple(rates[first : first + spec.windows])
    k = spec.mean_rps / statistics.fmean(source)
    return RateCurve(spec.workload, first, source, tuple(r * k for r in source), spec.window_s)


def arrivals(curve: RateCurve, rng: random.Random) -> list[float]:
    """Step 4: non-homogeneous Poisson arrivals over the curve (sorted, seconds)."""
    out: list[float] = []
    for i, rate in enumerate(curve.rates_rps):
        start, end = i * curve.window_s, (i + 1) * curve.window_s
        if rate <= 0:
            continue
        t = start + rng.expovariate(rate)
        while t < end:
            out.append(t)
            t += rng.expovariate(rate)
    return out


def bursty_trace(
    spec: BurstSpec, servegen_csv: Path | str, azure_csv: Path | str
) -> tuple[list[TraceRequest], RateCurve]:
    """The bursty trace and the rate curve it follows (steps 1-5)."""
    curve = rate_curve(read_servegen_rates(servegen_csv, spec.workload), spec)
    return requests_on_curve(curve, azure_csv, spec.seed), curve


def requests_on_curve(
    curve: RateCurve, azure_csv: Path | str, seed: int, until_s: float | None = None
) -> list[TraceRequest]:
    """Poisson arrivals following ``curve``, sized by the Azure trace's rows in order from a
    random start (steps 4-5; the bursty and the diurnal traces alike). ``until_s``: only
    the requests arriving before it, drawn as for the whole curve (the sizes' start is drawn
    after every arrival), so they are the whole trace's first requests, exactly."""
    expected = sum(curve.rates_rps) * curve.window_s
    check_trace_size(
        expected,
        f"a curve of {len(curve.rates_rps)} windows of {curve.window_s:g} s at a mean "
        f"{expected / (len(curve.rates_rps) * curve.window_s):,.1f} req/s",
    )
    sizes = load_trace(azure_csv, TraceOptions(fmt="azure"))
    if not sizes:
        raise TraceError(azure_csv, None, "no requests in the Azure trace")
    rng = random.Random(seed)
    times = arrivals(curve, rng)
    offset = rng.randrange(len(sizes))
    if until_s is not None:
        times = times[: bisect.bisect_left(times, until_s)]
    return [
        TraceRequest(
            arrival_s=t,
            input_tokens=sizes[(offset + k) % len(sizes)].input_tokens,
            output_tokens=sizes[(offset + k) % len(sizes)].output_tokens,
            line=sizes[(offset + k) % len(sizes)].line,
            index=k,
        )
        for k, t in enumerate(times)
    ]


def write_preheat_jsonl(requests: Sequence[TraceRequest], path: Path | str) -> None:
    """Writes ``requests`` in the ``preheat`` trace format (see ``workload/traces.py``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for r in requests:
            obj: dict[str, object] = {
                "timestamp_ms": round(r.arrival_s * 1e3, 3),
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
            }
            if r.session_id:
                obj["session_id"] = r.session_id
            if r.prefix_block_ids:
                obj["prefix_block_ids"] = list(r.prefix_block_ids)
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")


def describe(curve: RateCurve, n_requests: int) -> str:
    """One paragraph for the benchmark report."""
    peak = max(curve.rates_rps)
    return (
        f"ServeGen `{curve.workload}` windows {curve.first_window}-"
        f"{curve.first_window + len(curve.rates_rps) - 1} "
        f"({len(curve.rates_rps) * SERVEGEN_WINDOW_S / 3600:g} h, "
        f"{min(curve.source_rates_rps):,.0f}-{max(curve.source_rates_rps):,.0f} req/s), "
        f"each 10-min window replayed in {curve.window_s:g} s "
        f"({SERVEGEN_WINDOW_S / curve.window_s:g}x faster), rescaled to a mean of "
        f"{statistics.fmean(curve.rates_rps):g} req/s (peak {peak:.1f} req/s, "
        f"peak/mean {curve.peak_to_mean:.2f}); {n_requests:,} Poisson arrivals over "
        f"{len(curve.rates_rps) * curve.window_s / 60:g} min with Azure LLM 2023 conv "
        f"request sizes"
    )
