"""Live vs simulated on the same short scenario: TTFT p50/p95 and cache hit rate within 10%.

Live: real ``preheat worker --engine sim`` processes and a real ``preheat router`` on
127.0.0.1, replayed with ``preheat load``'s client (bounded: 114 requests over 30 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preheat.bench.fidelity import (
    BOUND,
    DEFAULT_TRACE,
    Scenario,
    compare,
    run_live,
    run_simulated,
)


@pytest.mark.needs_shared(DEFAULT_TRACE)
async def test_live_and_simulated_agree_within_ten_percent(tmp_path: Path) -> None:
    sc = Scenario()
    live = await run_live(sc, tmp_path)
    sim = run_simulated(sc)
    assert [r.outcome for r in live.requests].count("ok") == len(sc.load())
    assert [r.outcome for r in sim.requests].count("ok") == len(sc.load())
    rows = compare(live, sim)
    report = "; ".join(
        f"{r.metric}: live {r.live:.3f} sim {r.simulated:.3f} ({100 * r.error:.1f}%)" for r in rows
    )
    assert [r.metric for r in rows if r.error > BOUND] == [], report
    # the scenario exercises the prefix cache, not an empty one
    hit = next(r for r in rows if r.metric == "cache hit rate")
    assert hit.live > 0.3
