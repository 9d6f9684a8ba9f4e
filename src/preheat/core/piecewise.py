"""Piecewise-linear curves through measured points (the cost models' per-token knots). Pure."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def linear(knots: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through ``knots`` (by rising x), constant beyond the first and the
    last."""
    if x <= knots[0][0]:
        return knots[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(knots):
        if x <= x1:
            return y0 + (x - x0) * (y1 - y0) / (x1 - x0)
    return knots[-1][1]
