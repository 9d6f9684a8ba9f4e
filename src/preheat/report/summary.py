"""The figures of a run: :func:`summarize` turns a :class:`~preheat.report.record.Run` into a
:class:`RunSummary` (pure, no I/O), which the report table, the simulator's sweep table and
tests read.

Definitions (what the report's columns mean):

- **Latency percentiles** (p50/p95/p99) are sample quantiles (linear interpolation between
  closest ranks, :func:`preheat.core.percentiles.sample_quantile`) over the requests that
  finished (``ok``): TTFT and end-to-end one value per request; ITL pools every inter-token
  gap of every ok request.
- **SLO attainment** is the share of *all* requests that finished within the objective:
  a rejected or failed request counts as a miss. ``None`` when the run has no objective.
  ``slo_attainment`` asks for both objectives that are set.
- **Cache hit rate** is the sum of cached prompt tokens over the sum of prompt tokens (ok
  requests; the others have no usage).
- **Replica-seconds** by state integrate ``replicas.jsonl`` as a step function: each sample
  holds until the next one, the last one until the end of the run (``meta.duration_s``
  when it is later than the last sample, else the last sample ends it).
- **Stages** (``stages_ms``): per stage the server reported (queue, prefill, decode, the
  engine's own TTFT, the time outside the engine), its quantiles over the ok requests that
  carry it.
- **Latency budget** (:mod:`preheat.report.budget`): per stage (router, network, queue,
  prefill, decode) p50/p95/p99, and which stage owns the slowest 5%'s TTFT and e2e.
- **By endpoint**: ok requests per worker that served them (where the server said), with
  their TTFT quantiles and cache hit rate.
- **Load generator** (``load_generator``): what ``preheat load`` said about itself in
  ``meta.extra["load"]`` (dropped at its concurrency cap, late, not sent after a stop).
- **Scaling events** are events of kind ``scale_up`` and ``scale_down``; every kind is also
  counted in ``events_by_kind``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from preheat.core.percentiles import sample_quantile, weighted_sample_quantile
from preheat.report.budget import LatencyBudget, latency_budget
from preheat.report.record import ReplicaSample, RequestOutcome, Run, count_outcomes

REPLICA_STATES: tuple[str, ...] = ("active", "standby", "starting", "draining")
SCALING_KINDS: tuple[str, ...] = ("scale_up", "scale_down")


@dataclass(frozen=True)
class Quantiles:
    """p50/p95/p99 of ``count`` samples; all three ``None`` when there are none."""

    count: int = 0
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None

    @classmethod
    def of(cls, samples: Sequence[float]) -> Quantiles:
        if not samples:
            return cls()
        return cls(
            count=len(samples),
            p50=sample_quantile(0.50, samples),
            p95=sample_quantile(0.95, samples),
            p99=sample_quantile(0.99, samples),
            mean=sum(samples) / len(samples),
        )

    @classmethod
    def of_runs(cls, runs: Sequence[tuple[float, float]]) -> Quantiles:
        """The same from ``(value, count)`` runs, without expanding them."""
        total = sum(c for _, c in runs)
        if total <= 0:
            return cls()
        return cls(
            count=int(total),
            p50=weighted_sample_quantile(0.50, runs),
            p95=weighted_sample_quantile(0.95, runs),
            p99=weighted_sample_quantile(0.99, runs),
            mean=sum(v * c for v, c in runs) / total,
        )


def itl_runs(requests: Sequence[RequestOutcome]) -> list[tuple[float, float]]:
    """Every inter-token gap of ``requests`` as ``(ms, count)`` runs."""
    counts: Counter[float] = Counter()
    for r in requests:
        if r.itl_ms:
            counts.update(r.itl_ms)
        else:  # the simulator's run-length form
            for value, count in r.itl_runs_ms:
                counts[value] += int(count)
    return list(counts.items())


@dataclass(frozen=True)
class EndpointSummary:
    """The ok requests one endpoint (worker) served."""

    requests: int
    ttft_ms: Quantiles
    cache_hit_rate: float | None


@dataclass(frozen=True)
class ClassSummary:
    """The requests that named one traffic class (``slo_class``), whatever their outcome."""

    requests: int
    ok: int
    rejected: int
    error: int
    ttft_ms: Quantiles  # of the ok ones
    ttft_attainment: float | None  # within ttft_objective_ms; misses: not ok, late
    ttft_objective_ms: float = 0.0  # the class's TTFT target, else the run's; 0 = none


@dataclass(frozen=True)
class RunSummary:
    """Everything the report prints about one run."""

    name: str
    simulated: bool
    target: str
    duration_s: float
    requests: int
    ok: int
    rejected: int
    error: int
    ttft_ms: Quantiles
    itl_ms: Quantiles
    e2e_ms: Quantiles
    ttft_objective_ms: float
    e2e_objective_ms: float
    ttft_attainment: float | None
    e2e_attainment: float | None
    slo_attainment: float | None
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    cache_hit_rate: float | None
    output_tokens_per_s: float | None
    replica_seconds: dict[str, float] = field(default_factory=dict)
    peak_replicas: int = 0
    scaling_events: int = 0
    events_by_kind: dict[str, int] = field(default_factory=dict)
    errors_by_message: dict[str, int] = field(default_factory=dict)
    stages_ms: dict[str, Quantiles] = field(default_factory=dict)
    budget: LatencyBudget | None = None  # per stage p50/p95/p99 and the tail's owner
    by_endpoint: dict[str, EndpointSummary] = field(default_factory=dict)
    # by the traffic class the requests named (empty when none named one)
    by_class: dict[str, ClassSummary] = field(default_factory=dict)
    load_generator: dict[str, Any] = field(default_factory=dict)  # meta.extra["load"]


def run_end_s(run: Run) -> float:
    """The run's length: ``meta.duration_s`` if set, else the last thing that happened."""
    if run.meta.duration_s > 0:
        return run.meta.duration_s
    ends = [r.t_s + r.e2e_ms / 1e3 for r in run.requests]
    ends += [e.t_s for e in run.events]
    ends += [s.t_s for s in run.replicas]
    return max(ends, default=0.0)


def replica_steps(
    samples: Sequence[ReplicaSample], end_s: float
) -> list[tuple[float, float, ReplicaSample]]:
    """(from, until, sample): each sample holding until the next (the last one until
    ``end_s`` when that is later), in time order."""
    ordered = sorted(samples, key=lambda s: s.t_s)
    return [
        (s.t_s, ordered[i + 1].t_s if i + 1 < len(ordered) else max(end_s, s.t_s), s)
        for i, s in enumerate(ordered)
    ]


def replica_seconds(samples: Sequence[ReplicaSample], end_s: float) -> dict[str, float]:
    """Replica-seconds per state (:func:`replica_steps`)."""
    out = dict.fromkeys(REPLICA_STATES, 0.0)
    for t0, t1, s in replica_steps(samples, end_s):
        for state in REPLICA_STATES:
            out[state] += (t1 - t0) * getattr(s, state)
    return out


def _attainment(requests: Sequence[RequestOutcome], ok_within: int) -> float | None:
    return ok_within / len(requests) if requests else None


def _short_error(message: str) -> str:
    head = message.split(":", 1)[0].strip()
    return head[:60] or "unknown"


def summarize(run: Run) -> RunSummary:
    """The figures of ``run`` (see the module docstring for each definition)."""
    reqs = run.requests
    counts = count_outcomes(reqs)
    ok = [r for r in reqs if r.outcome == "ok"]
    ttft = [r.ttft_ms for r in ok]
    e2e = [r.e2e_ms for r in ok]
    meta = run.meta
    ttft_obj, e2e_obj = meta.ttft_objective_ms, meta.e2e_objective_ms

    ttft_att = (
        _attainment(reqs, sum(1 for r in ok if r.ttft_ms <= ttft_obj)) if ttft_obj > 0 else None
    )
    e2e_att = _attainment(reqs, sum(1 for r in ok if r.e2e_ms <= e2e_obj)) if e2e_obj > 0 else None
    slo_att: float | None = None
    if ttft_obj > 0 or e2e_obj > 0:
        both = sum(
            1
            for r in ok
            if (ttft_obj <= 0 or r.ttft_ms <= ttft_obj) and (e2e_obj <= 0 or r.e2e_ms <= e2e_obj)
        )
        slo_att = _attainment(reqs, both)

    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    end = run_end_s(run)
    kinds = Counter(e.kind for e in run.events)
    stage_samples: dict[str, list[float]] = {}
    for r in ok:
        for stage, ms in r.stages_ms.items():
            stage_samples.setdefault(stage, []).append(ms)
    errors = Counter(_short_error(r.error) for r in reqs if r.outcome == "error")
    return RunSummary(
        name=meta.name,
        simulated=meta.simulated,
        target=meta.target,
        duration_s=end,
        requests=len(reqs),
        ok=counts["ok"],
        rejected=counts["rejected"],
        error=counts["error"],
        ttft_ms=Quantiles.of(ttft),
        itl_ms=Quantiles.of_runs(itl_runs(ok)),
        e2e_ms=Quantiles.of(e2e),
        ttft_objective_ms=ttft_obj,
        e2e_objective_ms=e2e_obj,
        ttft_attainment=ttft_att,
        e2e_attainment=e2e_att,
        slo_attainment=slo_att,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens=output,
        cache_hit_rate=cached / prompt if prompt > 0 else None,
        output_tokens_per_s=output / end if end > 0 else None,
        replica_seconds=replica_seconds(run.replicas, end),
        peak_replicas=max(
            (s.active + s.standby + s.starting + s.draining for s in run.replicas), default=0
        ),
        scaling_events=sum(kinds[k] for k in SCALING_KINDS),
        events_by_kind=dict(sorted(kinds.items())),
        errors_by_message=dict(errors.most_common()),
        stages_ms={k: Quantiles.of(v) for k, v in stage_samples.items()},
        budget=latency_budget(reqs),
        by_endpoint=_by_endpoint(ok),
        by_class=_by_class(reqs, ttft_obj, meta.class_ttft_ms),
        load_generator=_load_generator(meta.extra.get("load")),
    )


def _load_generator(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _by_class(
    reqs: Sequence[RequestOutcome], ttft_obj: float, targets: Mapping[str, float]
) -> dict[str, ClassSummary]:
    """Per traffic class, when any request named one ("" stands for those that did not:
    the pool's default class); each judged by its own TTFT target (``targets``, the pool's
    classes), else by the run's objective ``ttft_obj``."""
    if not any(r.slo_class for r in reqs):
        return {}
    groups: dict[str, list[RequestOutcome]] = {}
    for r in reqs:
        groups.setdefault(r.slo_class, []).append(r)
    out: dict[str, ClassSummary] = {}
    for name in sorted(groups):
        rs = groups[name]
        counts = count_outcomes(rs)
        ok = [r for r in rs if r.outcome == "ok"]
        objective = targets.get(name, 0.0) if name else 0.0
        objective = objective if objective > 0 else ttft_obj
        within = sum(1 for r in ok if r.ttft_ms <= objective)
        out[name] = ClassSummary(
            requests=len(rs),
            ok=counts["ok"],
            rejected=counts["rejected"],
            error=counts["error"],
            ttft_ms=Quantiles.of([r.ttft_ms for r in ok]),
            ttft_attainment=_attainment(rs, within) if objective > 0 else None,
            ttft_objective_ms=objective,
        )
    return out


def _by_endpoint(ok: Sequence[RequestOutcome]) -> dict[str, EndpointSummary]:
    groups: dict[str, list[RequestOutcome]] = {}
    for r in ok:
        if r.endpoint:
            groups.setdefault(r.endpoint, []).append(r)
    out: dict[str, EndpointSummary] = {}
    for name in sorted(groups):
        rs = groups[name]
        prompt = sum(r.prompt_tokens for r in rs)
        out[name] = EndpointSummary(
            requests=len(rs),
            ttft_ms=Quantiles.of([r.ttft_ms for r in rs]),
            cache_hit_rate=sum(r.cached_tokens for r in rs) / prompt if prompt else None,
        )
    return out
