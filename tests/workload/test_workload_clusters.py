"""The clustered stand-in trace (``preheat bench traces``' clustered.jsonl): deterministic,
its means and bounds as specified, and burstier than Poisson by the routers' own measure."""

from __future__ import annotations

import itertools

import pytest

from preheat.core.traffic.arrivals import ArrivalBins, dispersion
from preheat.workload.clusters import ClusterSpec, clustered_trace


def test_the_same_seed_gives_the_same_trace_and_sizes_keep_their_bounds() -> None:
    spec = ClusterSpec(duration_s=600.0, seed=3)
    a, b = clustered_trace(spec), clustered_trace(spec)
    assert a == b
    assert a != clustered_trace(ClusterSpec(duration_s=600.0, seed=4))
    assert [r.index for r in a] == list(range(len(a)))
    assert all(x.arrival_s <= y.arrival_s for x, y in itertools.pairwise(a))
    assert all(0 <= r.arrival_s < 600.0 for r in a)
    assert all(1 <= r.input_tokens <= spec.prompt_max for r in a)
    assert all(1 <= r.output_tokens <= spec.output_max for r in a)
    # background 2 req/s and 0.1 clusters/s of 22.5 on average: about 4.25 req/s
    assert len(a) / 600.0 == pytest.approx(4.25, rel=0.2)
    mean_prompt = sum(r.input_tokens for r in a) / len(a)
    assert mean_prompt == pytest.approx(2048.0, rel=0.15)  # a little under: the clip


def test_its_arrivals_are_burstier_than_poisson_and_without_clusters_they_are_not() -> None:
    def d(spec: ClusterSpec) -> float:
        trace = clustered_trace(spec)
        bins = ArrivalBins()
        for r in trace:
            bins.observe(r.arrival_s)
        got = dispersion(bins.flush(spec.duration_s), float(len(trace)))
        assert got is not None
        return got

    assert d(ClusterSpec(duration_s=1200.0)) > 2.5
    assert d(ClusterSpec(duration_s=1200.0, clusters_per_s=0.0)) == pytest.approx(1.0, abs=0.2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"duration_s": 0.0}, "duration_s must be > 0"),
        ({"cluster_min": 9, "cluster_max": 3}, "1 <= min <= max"),
        ({"background_rps": 0.0, "clusters_per_s": 0.0}, "must be > 0"),
        ({"spread_s": -1.0}, "spread_s must be >= 0"),
    ],
)
def test_a_spec_that_cannot_make_a_trace_says_why(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterSpec(**kwargs)  # type: ignore[arg-type]
