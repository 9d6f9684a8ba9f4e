"""``preheat simulate --compare``: the pool's own policy against HPA, KEDA, KPA and fixed
pools on one trace, each swept over its main knob.

Every contender runs on the same trace, pool file and simulator settings; only the policy
and its knob change (:func:`settings` says how each becomes pool overrides and a
``SimOptions.autoscale`` policy). The knobs, with their defaults:

``preheat`` (the pool's ``autoscaling``, :func:`preheat.core.autoscaling.decide`)
    the target (ms) of the pool's first latency objective; default 0.4, 0.6, 0.8, 1.0,
    1.5, 2 and 3 x the SLO (a pool without a latency objective gets ``ttft`` p99 at that
    target). Targets looser than the SLO are swept too, as the baselines' knobs are over
    an eightfold range: a p99 target over the SLO can still keep 99% of the requests
    within it, on fewer GPU-hours, and only the sweep shows where.
``hpa`` (:class:`~preheat.core.autoscaling.baselines.Hpa`)
    the target in flight per pod (the average-utilization target times the pod's slots);
    default 8, 16, 32, 48, 64.
``kpa`` (:class:`~preheat.core.autoscaling.baselines.Kpa`, evaluated every 2 s)
    the target concurrency per pod (``target x utilization``); default 8, 16, 32, 48, 64.
``keda`` (:class:`~preheat.core.autoscaling.baselines.Keda`)
    the queue threshold, waiting requests per pod; default 0.5, 1, 2, 4, 8.
``scheduled`` (:class:`~preheat.core.autoscaling.baselines.Scheduled`, needs
    ``--schedule FILE``)
    one size per hour of the day, set from a reference day's rates (the file: JSON
    ``{"rates_rps": [...], "window_s": W}``, one rate per 10-minute window replayed in
    ``W`` seconds, as ``preheat bench traces`` writes it) as the hour's busiest window over
    the knob, the requests per second one pod takes; default 8, 10, 12, 14, 16.
``fixed``
    the pool's size (``min = max = desired``, no standby, no autoscaling); default 1, 2,
    3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32 up to ``replicas.max``; the CLI then runs the
    sizes skipped under the hindsight-best one
    (:func:`~preheat.simulate.pareto.next_fixed_probe`).

The baselines keep the pool's ``replicas`` (min, max, warm standby) and read the gauges
they read upstream (``in_flight``, the pool's ``queueDepth``; the latter is added to the
pool's objectives when it has none, so the metric source computes it).

The result (:func:`points`, :mod:`preheat.simulate.pareto`) is one attainment/GPU-hours
point per run: the table (:func:`table_markdown`), the Pareto plot (:func:`plot`) with the
hindsight-best fixed pool as the reference line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preheat.core.autoscaling import Context, Decision, PolicyState
from preheat.core.autoscaling.baselines import Hpa, Keda, Kpa, Scheduled
from preheat.simulate.options import SimInputError
from preheat.simulate.pareto import (
    Point,
    cheapest_at,
    front,
    hindsight_fixed,
    uncovered,
    unrun_fixed_below,
)
from preheat.workload.diurnal import WINDOWS_PER_HOUR, hourly_schedule

__all__ = [
    "POLICIES",
    "Schedule",
    "Setting",
    "default_values",
    "parse_compare",
    "parse_knobs",
    "read_schedule",
    "refuse_unused",
    "settings",
    "slo_of",
    "summary_lines",
    "table_markdown",
]

DecideFn = Callable[[Context], tuple[Decision, PolicyState]]
POLICIES: tuple[str, ...] = ("preheat", "hpa", "keda", "kpa", "scheduled", "fixed")
HPA_SLOTS = 64  # the pod's batch slots the HPA's utilization is a share of
FIXED_SIZES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
PREHEAT_FRACTIONS: tuple[float, ...] = (0.4, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0)
KNOB_UNITS = {
    "preheat": "objective target ms",
    "hpa": "in flight per pod",
    "kpa": "concurrency per pod",
    "keda": "waiting per pod",
    "scheduled": "req/s per pod",
    "fixed": "pods",
}


@dataclass(frozen=True)
class Schedule:
    """A reference day's rates: ``rates_rps[i]`` over replay ``[i * window_s, ...)``, six
    windows an hour of the day."""

    rates_rps: tuple[float, ...]
    window_s: float


def read_schedule(path: Path, flag: str = "--schedule") -> Schedule:
    """A day's rates (``{"rates_rps": [...], "window_s": W}``, as `preheat bench traces`
    writes); errors name ``flag``."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise SimInputError(f"{flag} {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise SimInputError(f"{flag} {path}: not JSON ({e})") from None
    rates = doc.get("rates_rps") if isinstance(doc, dict) else None
    window = doc.get("window_s") if isinstance(doc, dict) else None
    if (
        not isinstance(rates, list)
        or not rates
        or not all(isinstance(r, int | float) and r >= 0 for r in rates)
    ):
        raise SimInputError(f"{flag} {path}: rates_rps must be a list of numbers >= 0")
    if not isinstance(window, int | float) or window <= 0:
        raise SimInputError(f"{flag} {path}: window_s must be a number > 0")
    return Schedule(tuple(float(r) for r in rates), float(window))


def history_samples(schedule: Schedule) -> tuple[tuple[float, float], ...]:
    """The day's rates as the forecast's history before t=0: window ``i`` of ``n`` observed
    at its start, ``(i - n) * window_s`` (so the last window ends at 0)."""
    n, w = len(schedule.rates_rps), schedule.window_s
    return tuple(((i - n) * w, r) for i, r in enumerate(schedule.rates_rps))


@dataclass(frozen=True)
class Setting:
    """One run of the comparison: a policy at one value of its knob."""

    policy: str
    value: float
    label: str  # "hpa 32/pod", "fixed 4 pods", "preheat p99<=300ms"
    overrides: tuple[tuple[str, str], ...]  # pool spec overrides (``--set`` style)
    autoscale: DecideFn | None  # None: the pool's own policy (decide)
    interval_s: float | None  # evaluation period; None: the simulator's

    @property
    def setting(self) -> str:
        return self.label.split(" ", 1)[1] if " " in self.label else self.label


def parse_compare(text: str) -> tuple[str, ...]:
    """``"hpa,keda,kpa,fixed"`` -> the policies, in order, each once; ``all``: every one
    but ``scheduled`` (which needs a schedule)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return tuple(p for p in POLICIES if p != "scheduled")
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise SimInputError(
            f"--compare: unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)}, all)"
        )
    if not names:
        raise SimInputError("--compare: name at least one policy")
    return tuple(dict.fromkeys(names))


def parse_knobs(items: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """``["hpa=16,32", "fixed=2,4"]`` -> the values each named policy is swept over."""
    out: dict[str, tuple[float, ...]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in POLICIES:
            raise SimInputError(
                f"--knob {item!r}: expected POLICY=V1,V2,... with POLICY one of "
                f"{', '.join(POLICIES)}"
            )
        try:
            values = tuple(float(v) for v in raw.split(",") if v.strip())
        except ValueError:
            raise SimInputError(f"--knob {item!r}: values must be numbers") from None
        if not values or any(not math.isfinite(v) or v <= 0 for v in values):
            raise SimInputError(f"--knob {item!r}: give one or more values > 0")
        if name == "fixed" and any(v != int(v) for v in values):
            raise SimInputError(f"--knob {item!r}: pool sizes are whole numbers")
        out[name] = values
    return out


def refuse_unused(
    policies: Sequence[str] | None,
    knobs: Mapping[str, object],
    *,
    schedule_given: bool,
    attainment_given: bool = False,
    no_probe: bool = False,
) -> None:
    """Refuse what the comparison would silently not read, every problem at once: a
    ``--knob`` for a policy not compared (or with no ``--compare`` at all: ``policies``
    None), a ``--schedule`` without ``scheduled`` compared (``all`` leaves it out), a
    ``--target-attainment`` or ``--no-probe`` with no comparison."""
    problems: list[str] = []
    if policies is None:
        if knobs:
            problems.append("--knob sweeps a policy of --compare: give --compare too")
        if schedule_given:
            problems.append("--schedule is read by --compare scheduled: give it too")
        if attainment_given:
            problems.append("--target-attainment is read by --compare: give it too")
        if no_probe:
            problems.append("--no-probe is read by --compare: give it too")
    else:
        compared = ", ".join(policies)
        problems.extend(
            f"--knob {name}: {name} is not compared (--compare {compared}); add it there"
            for name in knobs
            if name not in policies
        )
        if schedule_given and "scheduled" not in policies:
            problems.append(
                f"--schedule is read by scheduled only, which is not compared (--compare "
                f"{compared}; `all` leaves it out): add scheduled there"
            )
    if problems:
        raise SimInputError("; ".join(problems))


def _objectives(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    auto = spec.get("autoscaling") or {}
    objs = auto.get("objectives") or []
    return [dict(o) for o in objs if isinstance(o, Mapping)]


def _is_latency(o: Mapping[str, Any]) -> bool:
    return str(o.get("signal", "")) in ("ttft", "itl", "e2e")


def slo_of(spec: Mapping[str, Any], given_ms: float) -> float:
    """The SLO's TTFT bound: ``given_ms`` if > 0, else the pool's ttft objective's target."""
    if given_ms > 0:
        return given_ms
    for o in _objectives(spec):
        if o.get("signal") == "ttft" and o.get("targetMs"):
            return float(o["targetMs"])
    raise SimInputError(
        "--compare needs an SLO: give --ttft-objective-ms, or a pool with a ttft objective"
    )


def default_values(policy: str, slo_ms: float, max_replicas: int) -> tuple[float, ...]:
    if policy == "preheat":
        return tuple(round(slo_ms * f, 3) for f in PREHEAT_FRACTIONS)
    if policy in ("hpa", "kpa"):
        return (8.0, 16.0, 32.0, 48.0, 64.0)
    if policy == "keda":
        return (0.5, 1.0, 2.0, 4.0, 8.0)
    if policy == "scheduled":
        return (8.0, 10.0, 12.0, 14.0, 16.0)
    sizes = [float(n) for n in FIXED_SIZES if n <= max_replicas]
    return tuple(sizes or [float(max_replicas)])


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _g(x: float) -> str:
    return f"{x:g}"


def settings(
    policies: Sequence[str],
    knobs: Mapping[str, Sequence[float]],
    spec: Mapping[str, Any],
    slo_ms: float,
    schedule: Schedule | None = None,
) -> list[Setting]:
    """Every run of the comparison, policy by policy, knob values ascending."""
    if "scheduled" in policies and schedule is None:
        raise SimInputError("--compare scheduled needs --schedule FILE (a reference day's rates)")
    replicas = spec.get("replicas") or {}
    max_replicas = int(replicas.get("max", 1) or 1)
    objectives = _objectives(spec)
    base_objs = objectives or [{"signal": "queueDepth", "perReplica": 4}]
    if not any(o.get("signal") == "queueDepth" for o in base_objs):
        base_objs = [*base_objs, {"signal": "queueDepth", "perReplica": 4}]
    baseline_ov = (("autoscaling.objectives", _json(base_objs)),)
    out: list[Setting] = []
    for policy in policies:
        values = sorted(set(knobs.get(policy) or default_values(policy, slo_ms, max_replicas)))
        for v in values:
            if policy == "preheat":
                objs = [dict(o) for o in objectives]
                lat = next((o for o in objs if _is_latency(o)), None)
                if lat is None:
                    lat = {"signal": "ttft", "percentile": 99}
                    objs.insert(0, lat)
                lat["targetMs"] = v
                name = f"{lat['signal']} p{_g(float(lat.get('percentile', 95)))}"
                out.append(
                    Setting(
                        policy,
                        v,
                        f"preheat {name}<={_g(v)}ms",
                        (("autoscaling.objectives", _json(objs)),),
                        None,
                        None,
                    )
                )
            elif policy == "hpa":
                hpa = Hpa(target_utilization=v / HPA_SLOTS, slots_per_replica=HPA_SLOTS)
                out.append(Setting(policy, v, f"hpa {_g(v)}/pod", baseline_ov, hpa, 15.0))
            elif policy == "kpa":
                kpa = Kpa(target_concurrency=v / 0.7, target_utilization=0.7)
                out.append(Setting(policy, v, f"kpa {_g(v)}/pod", baseline_ov, kpa, 2.0))
            elif policy == "keda":
                keda = Keda(threshold=v)
                out.append(Setting(policy, v, f"keda {_g(v)}/pod", baseline_ov, keda, 15.0))
            elif policy == "scheduled":
                assert schedule is not None
                lowest = int(replicas.get("min", 1) or 0)
                sizes = hourly_schedule(schedule.rates_rps, v, lowest=max(1, lowest))
                sizes = tuple(min(max_replicas, n) for n in sizes)
                slot = WINDOWS_PER_HOUR * schedule.window_s
                sch = Scheduled(sizes, slot_s=slot, lead_s=60.0)
                label = f"scheduled {_g(v)} req/s/pod"
                out.append(Setting(policy, v, label, baseline_ov, sch, 15.0))
            else:
                n = int(v)
                ov = (
                    ("replicas.min", str(n)),
                    ("replicas.max", str(n)),
                    ("replicas.desired", str(n)),
                    ("replicas.warmStandby", "0"),
                    ("autoscaling.objectives", "[]"),
                )
                out.append(
                    Setting(policy, v, f"fixed {n} pod{'' if n == 1 else 's'}", ov, None, None)
                )
    return out


# --- the report ----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def table_markdown(points: Sequence[Point], target: float) -> str:
    """One row per run, grouped by policy; a row on the Pareto front is marked."""
    on_front = set(front(points))
    ref = hindsight_fixed(points, target)
    rows = [
        "| policy | setting | SLO attainment | GPU-hours | x hindsight fixed | Pareto |",
        "|---|---|---:|---:|---:|:-:|",
    ]
    for p in points:
        ratio = f"{p.gpu_hours / ref.gpu_hours:.2f}" if ref and ref.gpu_hours > 0 else "-"
        mark = "yes" if p in on_front else ""
        rows.append(
            f"| {p.policy} | {p.setting} | {_pct(p.attainment)} | {p.gpu_hours:.2f} | {ratio}"
            f" | {mark} |"
        )
    return "\n".join(rows)


def summary_lines(points: Sequence[Point], target: float, ours: str = "preheat") -> list[str]:
    """What the curves say: the reference, each policy's cost at the target attainment, and
    whether ours is at or left of each baseline's curve."""
    ref = hindsight_fixed(points, target)
    lines: list[str] = []
    if ref is not None:
        met = "reaches" if ref.attainment >= target else "does not reach"
        lines.append(
            f"hindsight-best fixed pool: {ref.setting} ({_pct(ref.attainment)} on "
            f"{ref.gpu_hours:.2f} GPU-h; {met} {_pct(target)})"
        )
        below = unrun_fixed_below(points, target)
        if below is not None:
            lines.append(
                f"CAUTION: {below} pod{'' if below == 1 else 's'} not run: the hindsight-best "
                f"is only the best of the sizes run, and every 'x hindsight fixed' ratio may "
                f"be flattering (add --knob fixed={below})"
            )
    policies = list(dict.fromkeys(p.policy for p in points))
    for name in policies:
        mine = [p for p in points if p.policy == name]
        best = cheapest_at(mine, target)
        if best is None:
            top = max(mine, key=lambda p: (p.attainment, -p.gpu_hours))
            lines.append(
                f"{name}: no setting reaches {_pct(target)} (best {top.setting}: "
                f"{_pct(top.attainment)} on {top.gpu_hours:.2f} GPU-h)"
            )
            continue
        vs = ""
        if ref is not None and ref.gpu_hours > 0 and ref.attainment >= target:
            vs = f", {best.gpu_hours / ref.gpu_hours:.2f}x the hindsight fixed pool"
        lines.append(
            f"{name} at {_pct(target)}: {best.setting}, {best.gpu_hours:.2f} GPU-h "
            f"({_pct(best.attainment)}){vs}"
        )
    mine = [p for p in points if p.policy == ours]
    if mine:
        for name in policies:
            if name == ours:
                continue
            left = uncovered(mine, [p for p in points if p.policy == name])
            if not left:
                lines.append(f"{ours} at or left of {name} at every attainment {name} reaches")
            else:
                shown = ", ".join(
                    f"{p.setting} ({_pct(p.attainment)} on {p.gpu_hours:.2f})" for p in left
                )
                lines.append(f"{ours} NOT at or left of {name} at: {shown}")
    return lines


def plot(points: Sequence[Point], target: float, path: Path, title: str = "") -> Path:
    """Attainment against GPU-hours, one curve per policy (its settings by GPU-hours), the
    hindsight-best fixed pool as a reference line."""
    from matplotlib.figure import Figure  # only when plotting

    fig = Figure(figsize=(7.5, 5))
    ax = fig.subplots()
    for k, name in enumerate(dict.fromkeys(p.policy for p in points)):
        mine = sorted((p for p in points if p.policy == name), key=lambda p: p.gpu_hours)
        ax.plot(
            [p.gpu_hours for p in mine],
            [100 * p.attainment for p in mine],
            marker="o",
            color=f"C{k}",
            label=name,
        )
    ref = hindsight_fixed(points, target)
    if ref is not None:
        ax.axvline(ref.gpu_hours, color="0.4", linestyle="--", linewidth=1)
        ax.annotate(
            f"hindsight fixed: {ref.setting}",
            (ref.gpu_hours, 100 * ref.attainment),
            fontsize=8,
            xytext=(4, -12),
            textcoords="offset points",
        )
    ax.axhline(100 * target, color="0.7", linestyle=":", linewidth=1)
    ax.set_xlabel("GPU-hours")
    ax.set_ylabel("SLO attainment (%)")
    low = min((100 * p.attainment for p in points), default=0.0)
    ax.set_ylim(max(0.0, min(low, 100 * target) - 2), 100.5)
    ax.set_title(title or "SIMULATED: SLO attainment against GPU-hours (up-left is better)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
