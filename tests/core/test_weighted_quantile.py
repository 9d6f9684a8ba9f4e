"""weighted_sample_quantile equals sample_quantile on the expanded samples."""

from __future__ import annotations

import random

import pytest

from preheat.core.percentiles import sample_quantile, weighted_sample_quantile


@pytest.mark.parametrize("q", [0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0])
def test_matches_the_expanded_samples(q: float) -> None:
    rng = random.Random(7)
    for _ in range(50):
        runs = [
            (round(rng.uniform(0, 100), 1), rng.randint(1, 5)) for _ in range(rng.randint(1, 9))
        ]
        expanded = [v for v, c in runs for _ in range(c)]
        assert weighted_sample_quantile(q, runs) == pytest.approx(sample_quantile(q, expanded))


def test_table() -> None:
    assert weighted_sample_quantile(0.5, [(10.0, 1), (20.0, 1), (30.0, 1), (40.0, 1)]) == 25.0
    assert weighted_sample_quantile(0.5, [(40.0, 3), (10.0, 1)]) == 40.0
    assert weighted_sample_quantile(0.0, [(5.0, 0), (7.0, 2)]) == 7.0


def test_no_samples_and_bad_q_are_refused() -> None:
    with pytest.raises(ValueError, match="no samples"):
        weighted_sample_quantile(0.5, [(1.0, 0)])
    with pytest.raises(ValueError, match="within"):
        weighted_sample_quantile(1.5, [(1.0, 1)])
