"""The latency budget: where a request's time went, stage by stage, and which stage owns the tail.

A request's stages, in the order it meets them (from its ``stages_ms``):

- ``router``: the router's receipt to its call to the worker that served it (parse, admission,
  queue for an endpoint, scheduling, earlier failed attempts): the router says it on the last
  chunk (``Timing.router_ms``); the simulator's ``route``;
- ``network``: the rest of the client's TTFT outside the router and the engine: both hops,
  the worker's own handling, the client; the simulator's ``network`` (its RTT);
- ``queue``, ``prefill``: the engine's, to the first token;
- ``decode``: the engine's, first to last token.

TTFT = router + network + queue + prefill; e2e adds decode. A run straight to workers (no
router) has no ``router`` or ``network``; the table shows the stages the run has.

**Which stage dominates the tail**: over the slowest 5% of ok requests (TTFT at or above the
run's p95 TTFT; for e2e, e2e at or above its p95), each stage's share of their summed time:
the stage to work on to move the p95/p99.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from preheat.core.percentiles import sample_quantile
from preheat.report.record import RequestOutcome

STAGES: tuple[str, ...] = ("router", "network", "queue", "prefill", "decode")
TTFT_STAGES: tuple[str, ...] = ("router", "network", "queue", "prefill")
TAIL_QUANTILE = 0.95
_ALIASES = {"route": "router"}  # the simulator's names


@dataclass(frozen=True)
class StageQuantiles:
    count: int
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True)
class LatencyBudget:
    """Per stage p50/p95/p99 (ms) over the ok requests that carry it, and each stage's share
    of the TTFT and e2e tails."""

    stages: dict[str, StageQuantiles] = field(default_factory=dict)
    ttft_tail: dict[str, float] = field(default_factory=dict)  # stage -> share (sums to 1)
    e2e_tail: dict[str, float] = field(default_factory=dict)
    ttft_tail_requests: int = 0
    e2e_tail_requests: int = 0

    @property
    def ttft_dominant(self) -> str:
        return max(self.ttft_tail, key=self.ttft_tail.__getitem__) if self.ttft_tail else ""

    @property
    def e2e_dominant(self) -> str:
        return max(self.e2e_tail, key=self.e2e_tail.__getitem__) if self.e2e_tail else ""


def request_stages(stages_ms: Mapping[str, float]) -> dict[str, float]:
    """A request's budget stages from its ``stages_ms`` (the simulator's names mapped)."""
    out: dict[str, float] = {}
    for name, ms in stages_ms.items():
        stage = _ALIASES.get(name, name)
        if stage in STAGES:
            out[stage] = max(0.0, float(ms))
    return out


def _shares(rows: Sequence[Mapping[str, float]], names: Iterable[str]) -> dict[str, float]:
    sums = {n: sum(r.get(n, 0.0) for r in rows) for n in names}
    total = sum(sums.values())
    if total <= 0:
        return {}
    return {n: v / total for n, v in sums.items() if n in {k for r in rows for k in r}}


def _tail(
    requests: Sequence[tuple[float, dict[str, float]]], names: tuple[str, ...]
) -> tuple[dict[str, float], int]:
    if not requests:
        return {}, 0
    cut = sample_quantile(TAIL_QUANTILE, [v for v, _ in requests])
    rows = [stages for v, stages in requests if v >= cut]
    return _shares(rows, names), len(rows)


def latency_budget(requests: Iterable[RequestOutcome]) -> LatencyBudget | None:
    """The budget of the ok requests that carry a stage breakdown; None when none does."""
    per: list[tuple[RequestOutcome, dict[str, float]]] = []
    for r in requests:
        if r.outcome != "ok":
            continue
        stages = request_stages(r.stages_ms)
        if stages:
            per.append((r, stages))
    if not per:
        return None
    samples: dict[str, list[float]] = {}
    for _, stages in per:
        for name, ms in stages.items():
            samples.setdefault(name, []).append(ms)
    quantiles = {
        name: StageQuantiles(
            count=len(samples[name]),
            p50=sample_quantile(0.50, samples[name]),
            p95=sample_quantile(0.95, samples[name]),
            p99=sample_quantile(0.99, samples[name]),
        )
        for name in STAGES
        if name in samples
    }
    ttft_tail, n_ttft = _tail([(r.ttft_ms, s) for r, s in per], TTFT_STAGES)
    e2e_tail, n_e2e = _tail([(r.e2e_ms, s) for r, s in per], STAGES)
    return LatencyBudget(quantiles, ttft_tail, e2e_tail, n_ttft, n_e2e)


def render_budget(b: LatencyBudget) -> list[str]:
    """The budget as table lines (the report's and the simulator's)."""
    lines = [
        "  latency budget (ms; client -> router -> network -> queue -> prefill -> decode; "
        "network = the rest of TTFT):"
    ]
    lines.append(f"    {'stage':<16} {'n':>7} {'p50':>9} {'p95':>9} {'p99':>9}")
    for name, q in b.stages.items():
        lines.append(f"    {name:<16} {q.count:>7} {q.p50:>9.1f} {q.p95:>9.1f} {q.p99:>9.1f}")

    def shares(tail: dict[str, float]) -> str:
        ordered = sorted(tail.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{k} {v:.0%}" for k, v in ordered)

    if b.ttft_tail:
        lines.append(
            f"    TTFT tail (slowest 5%, {b.ttft_tail_requests} requests): "
            f"{shares(b.ttft_tail)}: {b.ttft_dominant} dominates"
        )
    if b.e2e_tail:
        lines.append(
            f"    e2e tail (slowest 5%, {b.e2e_tail_requests} requests): "
            f"{shares(b.e2e_tail)}: {b.e2e_dominant} dominates"
        )
    return lines
