"""The report's PNG plots (matplotlib ``Figure`` objects rendered straight to PNG by the
Agg canvas: no pyplot, no display, no global state).

- ``latency_cdf.png``: CDFs of TTFT, ITL and end-to-end latency (ok requests).
- ``ttft_over_time.png``: each request's TTFT at the time it was sent, the TTFT objective as a
  line, rejected and failed requests as marks along the top edge.
- ``replicas.png``: replicas by state over time (stacked steps) with the control plane's
  events marked (scale-ups and scale-downs as labelled vertical lines, other events as ticks).
  Written only when the run has replica samples or events.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from preheat.core.percentiles import sample_quantile
from preheat.report.record import Run
from preheat.report.summary import REPLICA_STATES, itl_runs, run_end_s

_STATE_COLORS = {
    "active": "#2b7bba",
    "standby": "#f2a93b",
    "starting": "#9bb7d4",
    "draining": "#c8553d",
}
_EVENT_COLORS = {"scale_up": "#1a9850", "scale_down": "#d73027"}


def _title(run: Run, what: str) -> str:
    """``SIMULATED`` leads every plot title of a simulated run."""
    return f"{'SIMULATED: ' if run.meta.simulated else ''}{run.meta.name}: {what}"


_CDF_POINTS = 2000


def cdf_points(runs: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """(values, cumulative share) of ``(value, count)`` runs, thinned to at most
    ``_CDF_POINTS`` steps (the largest value always kept)."""
    ordered = sorted((v, c) for v, c in runs if c > 0)
    total = sum(c for _, c in ordered)
    xs: list[float] = []
    ys: list[float] = []
    seen = 0.0
    for value, count in ordered:
        seen += count
        xs.append(value)
        ys.append(seen / total)
    if len(xs) > _CDF_POINTS:
        step = len(xs) / _CDF_POINTS
        keep = sorted({int(i * step) for i in range(_CDF_POINTS)} | {len(xs) - 1})
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    return xs, ys


def _cdf(ax: Axes, runs: Sequence[tuple[float, float]], label: str, objective: float = 0.0) -> None:
    ax.set_title(label)
    ax.set_xlabel("ms")
    ax.grid(True, alpha=0.3)
    xs, ys = cdf_points(runs)
    if not xs:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        return
    ax.step(xs, ys, where="post")
    ax.set_ylim(0, 1.02)
    if xs[0] > 0 and xs[-1] / xs[0] > 50:
        ax.set_xscale("log")
    if objective > 0:
        ax.axvline(objective, color="#d73027", linestyle="--", label=f"objective {objective:g}")
        ax.legend(loc="lower right", fontsize=8)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_latency_cdf(run: Run, path: Path) -> Path:
    ok = [r for r in run.requests if r.outcome == "ok"]
    fig = Figure(figsize=(13, 4))
    axes = fig.subplots(1, 3)
    _cdf(axes[0], [(r.ttft_ms, 1) for r in ok], "TTFT", run.meta.ttft_objective_ms)
    _cdf(axes[1], itl_runs(ok), "inter-token latency")
    _cdf(axes[2], [(r.e2e_ms, 1) for r in ok], "end-to-end", run.meta.e2e_objective_ms)
    axes[0].set_ylabel("share of requests (ITL: of gaps)")
    fig.suptitle(_title(run, f"latency CDFs ({len(ok)} ok of {len(run.requests)} requests)"))
    return _save(fig, path)


_WINDOWS = 20
_MAX_SCATTER = 20_000


def _windowed_p95(points: Sequence[tuple[float, float]], end: float) -> list[tuple[float, float]]:
    """(window start, p95 of the values sent in it) over ``_WINDOWS`` equal windows; windows
    with no sample are left out."""
    width = end / _WINDOWS
    bins: list[list[float]] = [[] for _ in range(_WINDOWS)]
    for t, v in points:
        bins[min(_WINDOWS - 1, max(0, int(t / width)))].append(v)
    return [(i * width, sample_quantile(0.95, b)) for i, b in enumerate(bins) if b]


def plot_ttft_over_time(run: Run, path: Path) -> Path:
    fig = Figure(figsize=(11, 4))
    ax = fig.subplots()
    ok = [r for r in run.requests if r.outcome == "ok"]
    every = max(1, -(-len(ok) // _MAX_SCATTER))  # ceil: a long run shows 1 in `every`
    shown = ok[::every]
    label = "TTFT (ok)" if every == 1 else f"TTFT (ok, 1 in {every} shown)"
    ax.scatter([r.t_s for r in shown], [r.ttft_ms for r in shown], s=6, alpha=0.6, label=label)
    top = max((r.ttft_ms for r in ok), default=1.0)
    obj = run.meta.ttft_objective_ms
    if obj > 0:
        ax.axhline(obj, color="#d73027", linestyle="--", label=f"objective {obj:g} ms")
        top = max(top, obj)
    for outcome, marker, color in (("rejected", "x", "#d73027"), ("error", "v", "black")):
        ts = [r.t_s for r in run.requests if r.outcome == outcome]
        if ts:
            ax.scatter(ts, [top * 1.05] * len(ts), marker=marker, color=color, s=18, label=outcome)
    end = max(run_end_s(run), 1e-3)
    windows = _windowed_p95([(r.t_s, r.ttft_ms) for r in ok], end)
    if windows:
        ax.step(
            [t for t, _ in windows],
            [v for _, v in windows],
            where="post",
            color="#333333",
            linewidth=1.2,
            label=f"p95 per {end / _WINDOWS:.3g} s",
        )
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_xlim(0, end)
    ax.set_ylim(0, top * 1.12)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(_title(run, "TTFT over time"))
    return _save(fig, path)


def plot_replicas(run: Run, path: Path) -> Path:
    fig = Figure(figsize=(11, 4))
    ax = fig.subplots()
    samples = sorted(run.replicas, key=lambda s: s.t_s)
    end = run_end_s(run)
    if samples:
        ts = [s.t_s for s in samples]
        if end > ts[-1]:
            ts.append(end)
            samples.append(samples[-1])
        layers = [[float(getattr(s, state)) for s in samples] for state in REPLICA_STATES]
        ax.stackplot(
            ts,
            *layers,
            labels=list(REPLICA_STATES),
            colors=[_STATE_COLORS[s] for s in REPLICA_STATES],
            step="post",
            alpha=0.85,
        )
    peak = max((s.active + s.standby + s.starting + s.draining for s in samples), default=1)
    ax.set_ylim(0, peak + 1.5)
    for e in run.events:
        color = _EVENT_COLORS.get(e.kind)
        if color is not None:
            ax.axvline(e.t_s, color=color, linestyle="--", linewidth=1.2)
            label = f"{e.kind.replace('_', ' ')} {e.from_replicas}->{e.to_replicas}"
            ax.annotate(
                label,
                (e.t_s, peak + 1.4),
                rotation=90,
                fontsize=7,
                va="top",
                ha="right",
                color=color,
            )
        else:
            ax.plot([e.t_s], [peak + 0.4], marker="|", color="#555555", markersize=8)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("replicas")
    ax.set_xlim(0, max(end, 1e-3))
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if run.requests:
        rate = ax.twinx()
        width = max(end, 1e-3) / _WINDOWS
        counts = [0] * _WINDOWS
        for r in run.requests:
            counts[min(_WINDOWS - 1, max(0, int(r.t_s / width)))] += 1
        (line,) = rate.step(
            [i * width for i in range(_WINDOWS + 1)],
            [c / width for c in counts] + [counts[-1] / width],
            where="post",
            color="#333333",
            linewidth=1.2,
            label="requests/s sent",
        )
        rate.set_ylabel("requests/s")
        rate.set_ylim(0, max(counts) / width * 1.3 + 1e-9)
        handles.append(line)
        labels.append("requests/s sent")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.06, 1.0), fontsize=8)
    ax.set_title(_title(run, "replicas by state (dashed: scaling decisions, ticks: events)"))
    return _save(fig, path)


def write_plots(run: Run, folder: Path | str) -> list[Path]:
    """Writes the plots into ``folder`` (created if needed); returns their paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        plot_latency_cdf(run, out / "latency_cdf.png"),
        plot_ttft_over_time(run, out / "ttft_over_time.png"),
    ]
    if run.replicas or run.events:
        paths.append(plot_replicas(run, out / "replicas.png"))
    return paths
