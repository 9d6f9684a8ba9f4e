"""A synthetic trace whose requests come in clusters: a stand-in for bursty, prefill-heavy
traffic (coding assistants: a client sends a batch of completions at once).

Not a copy of any public trace. Its defaults are the Azure LLM inference 2023 *code*
trace's published means as issue 17 quotes them (mean prompt about 2,000 tokens, mean
output 28; 8,819 requests over an hour, bursty) with shapes chosen here: arrivals are a
Poisson background plus clusters (a Poisson process of clusters, each of a uniform number
of requests spread uniformly over ``spread_s``); prompt and output lengths are lognormal
with the given means and log-space deviations, clipped. What a replay of it measures is a
property of this generator, said as such wherever it is quoted (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from preheat.workload.traces import TraceRequest

__all__ = ["ClusterSpec", "clustered_trace"]


@dataclass(frozen=True)
class ClusterSpec:
    """The generator's parameters (rates in req/s or clusters/s, lengths in tokens)."""

    duration_s: float = 1200.0
    background_rps: float = 2.0
    clusters_per_s: float = 0.1
    cluster_min: int = 5
    cluster_max: int = 40
    spread_s: float = 2.0
    prompt_mean: float = 2048.0
    prompt_sigma: float = 0.9
    prompt_max: int = 8000
    output_mean: float = 28.0
    output_sigma: float = 1.2
    output_max: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        errors: list[str] = []
        for name in ("duration_s", "prompt_mean", "output_mean"):
            if not getattr(self, name) > 0:
                errors.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "background_rps",
            "clusters_per_s",
            "spread_s",
            "prompt_sigma",
            "output_sigma",
        ):
            if not getattr(self, name) >= 0:
                errors.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.cluster_min <= self.cluster_max:
            errors.append(
                f"cluster sizes must satisfy 1 <= min <= max, got {self.cluster_min}, "
                f"{self.cluster_max}"
            )
        if self.prompt_max < 1 or self.output_max < 1:
            errors.append("prompt_max and output_max must be >= 1")
        if self.background_rps <= 0 and self.clusters_per_s <= 0:
            errors.append("background_rps or clusters_per_s must be > 0")
        if errors:
            raise ValueError("; ".join(errors))


def _lognormal(rng: random.Random, mean: float, sigma: float, top: int) -> int:
    """A lognormal length with mean ``mean`` (before clipping to ``[1, top]``)."""
    return max(1, min(top, round(mean * math.exp(rng.gauss(0.0, sigma) - sigma * sigma / 2))))


def _poisson(rng: random.Random, rate: float, end: float) -> list[float]:
    out: list[float] = []
    if rate <= 0:
        return out
    t = rng.expovariate(rate)
    while t < end:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def clustered_trace(spec: ClusterSpec) -> list[TraceRequest]:
    """The trace (sorted by arrival, indexed from 0; no sessions or shared prefixes)."""
    rng = random.Random(spec.seed)
    times = _poisson(rng, spec.background_rps, spec.duration_s)
    for start in _poisson(rng, spec.clusters_per_s, spec.duration_s):
        n = rng.randint(spec.cluster_min, spec.cluster_max)
        times.extend(start + rng.uniform(0.0, spec.spread_s) for _ in range(n))
    times = sorted(t for t in times if t < spec.duration_s)
    return [
        TraceRequest(
            arrival_s=t,
            input_tokens=_lognormal(rng, spec.prompt_mean, spec.prompt_sigma, spec.prompt_max),
            output_tokens=_lognormal(rng, spec.output_mean, spec.output_sigma, spec.output_max),
            index=i,
        )
        for i, t in enumerate(times)
    ]
