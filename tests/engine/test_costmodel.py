"""The cost model against the H100 calibration table, and its formulas' edges."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preheat.engine.costmodel import CostModel, load_calibration

CAL = load_calibration()
# The measurement lives in ../shared beside the repository (never copied into it).
SHARED = Path(__file__).resolve().parents[3] / "shared" / "calibration" / "llama8b_h100_costs.json"
MODEL = CostModel.default()


@pytest.mark.parametrize(
    ("new", "cached", "ms"), [(p["new"], p["cached"], p["ms"]) for p in CAL["prefill"]]
)
def test_prefill_matches_calibration_within_10pct(new: int, cached: int, ms: float) -> None:
    assert MODEL.prefill_ms(new, cached) == pytest.approx(ms, rel=0.10)


@pytest.mark.parametrize(
    ("batch", "context", "ms", "floor_ms"),
    [(d["batch"], d["context"], d["ms"], d["floor_ms"]) for d in CAL["decode"]],
)
def test_decode_matches_calibration_within_10pct(
    batch: int, context: int, ms: float, floor_ms: float
) -> None:
    got = MODEL.decode_step_ms(batch, context)
    assert got == pytest.approx(ms, rel=0.10)
    assert got >= floor_ms * 0.99  # never faster than the bandwidth floor


def test_prefill_extrapolates_linearly_beyond_8192_at_the_last_slope() -> None:
    slope = (246.6 - 116.669) / 4096  # ms per token between the 4096 and 8192 points
    assert MODEL.prefill_ms(16384) - MODEL.prefill_ms(12288) == pytest.approx(slope * 4096)
    assert MODEL.prefill_ms(8192 + 1000) == pytest.approx(246.6 + slope * 1000)


def test_prefill_grows_with_new_and_cached_tokens() -> None:
    news = [1, 16, 128, 512, 1024, 3000, 8192, 20000]
    times = [MODEL.prefill_ms(n) for n in news]
    assert times == sorted(times)
    assert MODEL.prefill_ms(2048, 8192) > MODEL.prefill_ms(2048, 0)
    assert MODEL.prefill_ms(0, 100) == 0.0


def test_a_cache_hit_costs_only_the_uncached_remainder() -> None:
    # 4096 uncached vs the same prompt with 4080 cached: what prefix caching buys.
    assert MODEL.prefill_ms(16, 4080) < MODEL.prefill_ms(4096) / 4


def test_mixed_step_counts_the_fixed_overhead_once() -> None:
    prefill = MODEL.prefill_ms(512)
    decode = MODEL.decode_step_ms(32, 2048)
    mixed = MODEL.step_ms([(512, 0)], 32, 32 * 2048)
    assert max(prefill, decode) < mixed < prefill + decode
    assert mixed == pytest.approx(prefill + MODEL.decode_b_ms * 32 + MODEL.decode_c_ms * 32 * 2048)
    assert MODEL.step_ms([], 32, 32 * 2048) == pytest.approx(decode)
    assert MODEL.step_ms([], 0, 0) == 0.0


def test_scale_multiplies_every_time() -> None:
    slow = MODEL.with_(scale=3.0)
    assert slow.prefill_ms(1000, 500) == pytest.approx(3 * MODEL.prefill_ms(1000, 500))
    assert slow.decode_step_ms(8, 100) == pytest.approx(3 * MODEL.decode_step_ms(8, 100))
    assert slow.loading_s() == pytest.approx(3 * MODEL.loading_s())
    assert slow.warming_s() == pytest.approx(3 * MODEL.warming_s())


def test_startup_phases_from_the_measurement() -> None:
    assert MODEL.weight_load_s(CAL["load_bytes"], cold=True) == pytest.approx(CAL["load_cold_s"])
    assert MODEL.weight_load_s(CAL["load_bytes"], cold=False) == pytest.approx(
        CAL["load_pagecache_s"]
    )
    # Double the bytes, double the time.
    assert MODEL.weight_load_s(2 * CAL["load_bytes"]) == pytest.approx(2 * CAL["load_cold_s"])
    assert MODEL.loading_s() > MODEL.with_(page_cache=True).loading_s()
    assert MODEL.with_(load_s=0.0, warmup_s=0.0).loading_s() == 0.0
    assert MODEL.with_(load_s=0.0, warmup_s=0.0).warming_s() == 0.0


def test_packaged_copy_equals_the_measurement() -> None:
    if not SHARED.exists():
        why = f"no shared calibration at {SHARED} (../shared beside the repository)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI=true, so this fails instead of skipping")
        pytest.skip(why)
    assert load_calibration(SHARED) == CAL
    assert CostModel.from_calibration(load_calibration(SHARED)) == MODEL
