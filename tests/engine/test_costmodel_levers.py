"""The sim engine's levers against the H100 measurements they come from.

Reads ``../shared/calibration/levers_h100.json``, ``llama32b_h100_costs.json`` and
``mixed_step_h100.json`` (beside the repository; the packaged copies must equal them) and
checks the cost model at every measured point, within 10%:

- each lever's step time relative to the bf16 step of the same file (FP8 weights: decode
  and prefill; FP8 KV cache: whole decode steps, with bf16 and FP8 weights; speculative
  verification steps by batch and k): the sim's base is the older 8B measurement, whose
  absolute times differ from this file's (RoPE tables per layer, calibration README), so the
  lever is what transfers (README: "the ratios between levers are the transferable part");
- the draft-model and EAGLE-head steps, and the 32B shape's prefill and decode, absolute;
- README part 2's worked example of speculative speed-ups, and that the benefit falls with
  the batch.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from preheat.core.errors import PreheatError
from preheat.engine.costmodel import (
    PACKAGED_32B,
    PACKAGED_LEVERS,
    PACKAGED_MIXED,
    CostModel,
    LeverCosts,
    acceptance_length,
    kv_cache_tokens,
    load_calibration,
)
from preheat.engine.sim import SimConfig

SHARED = Path(__file__).resolve().parents[3] / "shared" / "calibration"
BASE = CostModel.default()


def _shared(name: str) -> dict[str, Any]:
    path = SHARED / name
    if not path.exists():
        why = f"no shared calibration at {path} (../shared beside the repository)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI=true, so this fails instead of skipping")
        pytest.skip(why)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="module")
def levers() -> dict[str, Any]:
    return _shared(PACKAGED_LEVERS)


@pytest.mark.parametrize("name", [PACKAGED_LEVERS, PACKAGED_MIXED, PACKAGED_32B])
def test_packaged_copies_equal_the_measurements(name: str) -> None:
    assert load_calibration(packaged=name) == _shared(name)


def test_the_lever_constants_are_fitted_from_the_shared_files() -> None:
    fitted = LeverCosts.fit(_shared(PACKAGED_LEVERS), _shared(PACKAGED_MIXED))
    assert fitted == LeverCosts.default()
    # README part 1: FP8 saves 2.2-2.4 ms per 8B decode step; the 8k prefill 0.74
    assert 2.2 < fitted.fp8_decode_saving_ms < 2.4
    # the mixed-step README's u: 13.3 / 14.4 / 17.7 / 19.8 / 22.0 us per chunk token
    us = dict(fitted.token_us_knots)
    for c, want in ((128, 13.3), (256, 14.4), (512, 17.7), (1024, 19.8), (2048, 22.0)):
        assert us[c] == pytest.approx(want, rel=0.05)


def test_fp8_weights_decode_steps(levers: dict[str, Any]) -> None:
    fp8 = BASE.with_(weights="fp8")
    rows = {(r["batch"], r["mode"]): r["ms"] for r in levers["fp8"]["decode"]}
    for (batch, mode), ms in rows.items():
        if mode != "fp8_tensor":
            continue
        want = ms / rows[(batch, "bf16")]
        got = fp8.decode_step_ms(batch, 2048) / BASE.decode_step_ms(batch, 2048)
        assert got == pytest.approx(want, rel=0.10), (batch, got, want)


def test_fp8_weights_prefill(levers: dict[str, Any]) -> None:
    fp8 = BASE.with_(weights="fp8")
    rows = {(r["new"], r["mode"]): r["ms_eager"] for r in levers["fp8"]["prefill"]}
    for (new, mode), ms in rows.items():
        if mode != "fp8_tensor":
            continue
        want = ms / rows[(new, "bf16")]
        got = fp8.prefill_ms(new) / BASE.prefill_ms(new)
        assert got == pytest.approx(want, rel=0.10), (new, got, want)


def test_fp8_kv_cache_decode_steps_with_bf16_and_fp8_weights(levers: dict[str, Any]) -> None:
    rows = {
        (r["batch"], r["context"], r["kv"], r["weights"]): r["ms"]
        for r in levers["kvfp8"]["decode_step"]
        if r["attention"] == "triton"
    }
    checked = 0
    for (batch, context, kv, weights), ms in rows.items():
        model = BASE.with_(kv_dtype=kv, weights="fp8" if weights == "fp8_tensor" else "bf16")
        want = ms / rows[(batch, context, "bf16", "bf16")]
        got = model.decode_step_ms(batch, context) / BASE.decode_step_ms(batch, context)
        assert got == pytest.approx(want, rel=0.10), (batch, context, kv, weights, got, want)
        checked += 1
    assert checked == 24


def test_speculative_verification_steps_by_batch_and_k(levers: dict[str, Any]) -> None:
    rows = [r for r in levers["spec"]["verify"] if r["attention"] == "triton"]
    assert len(rows) == 20
    for r in rows:
        batch, k = r["batch"], r["k"]
        # ngram drafts cost nothing on the GPU: the step is the verification alone
        model = BASE.with_(spec_method="ngram", spec_tokens=k) if k else BASE
        got = model.verify_step_ms(batch, r["context"]) / BASE.decode_step_ms(batch, r["context"])
        assert got == pytest.approx(r["ratio_to_k0"], rel=0.10), (batch, k, got)


def test_draft_model_and_eagle_head_steps(levers: dict[str, Any]) -> None:
    lv = LeverCosts.default()
    method = {"1b": "draft_model", "eagle8b": "eagle"}
    for r in levers["spec"]["draft_decode"]:
        got = lv.draft_step_ms(method[r["model"]], r["batch"])
        assert got == pytest.approx(r["ms"], rel=0.10), (r["model"], r["batch"], got)
    assert lv.draft_step_ms("ngram", 64) == 0.0


def _speedup(model: CostModel, batch: int) -> float:
    return BASE.decode_step_ms(batch, 2048) / model.decode_step_ms(batch, 2048)


@pytest.mark.parametrize(
    ("method", "rate", "k", "batch", "readme"),
    [
        ("eagle", 0.8, 3, 1, 2.27),
        ("eagle", 0.8, 3, 64, 2.17),
        ("draft_model", 0.8, 3, 1, 1.62),
        ("draft_model", 0.8, 3, 64, 1.51),
        ("draft_model", 0.6, 7, 1, 0.86),
        ("draft_model", 0.6, 7, 64, 0.73),
    ],
)
def test_speculative_speedups_match_the_readmes_worked_example(
    method: str, rate: float, k: int, batch: int, readme: float
) -> None:
    model = BASE.with_(
        spec_method=method, spec_tokens=k, spec_accept_len=acceptance_length(k, rate)
    )
    assert _speedup(model, batch) == pytest.approx(readme, rel=0.10)


def test_the_benefit_of_speculation_falls_as_the_batch_grows() -> None:
    model = BASE.with_(spec_method="eagle", spec_tokens=5, spec_accept_len=3.0)
    gains = [_speedup(model, b) for b in (1, 8, 32, 64, 128, 256)]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 2.0 > gains[-1]


def test_the_32b_shape_at_every_measured_point() -> None:
    data = _shared(PACKAGED_32B)
    big = CostModel.for_shape("32b")
    for r in data["prefill"]:
        assert big.prefill_ms(r["new"]) == pytest.approx(r["ms"], rel=0.10), r["new"]
    for r in data["decode"]:
        got = big.decode_step_ms(r["batch"], r["context"])
        assert got == pytest.approx(r["ms"], rel=0.10), r["batch"]
        assert got >= r["floor_ms"] * 0.99
    assert big.weight_load_s() == pytest.approx(BASE.weight_load_s() * 65.53 / 16.06, rel=0.01)


def test_memory_freed_or_halved_becomes_kv_blocks() -> None:
    base = kv_cache_tokens()
    assert base == 25_000 * 16
    assert kv_cache_tokens(kv="fp8") == 2 * base
    # FP8 weights free 7.0 GB of the 8B's weights: 7e9 / 128 KiB more tokens
    assert kv_cache_tokens(weights="fp8") == base + int(7.0e9 // 131072)
    assert kv_cache_tokens("32b") < base // 20 < kv_cache_tokens("32b", "fp8")
    assert SimConfig.from_options({"kv_cache_dtype": "fp8"}).num_gpu_blocks == 50_000
    assert (
        SimConfig.from_options({"kv_cache_dtype": "fp8", "num_gpu_blocks": 7}).num_gpu_blocks == 7
    )


def test_sim_options_refuse_what_the_sim_cannot_model() -> None:
    for options, words in (
        ({"quantization": "awq"}, "quantization='awq': the sim models none, fp8"),
        ({"model_size": "70b"}, "model_size='70b'"),
        ({"spec_method": "eagle", "spec_tokens": 3}, "needs one of spec_acceptance_length"),
        (
            {"spec_method": "eagle", "spec_tokens": 3, "spec_acceptance_length": 5},
            "must be in [1, 4]",
        ),
    ):
        with pytest.raises(PreheatError, match=re.escape(words)):
            SimConfig.from_options(options)
