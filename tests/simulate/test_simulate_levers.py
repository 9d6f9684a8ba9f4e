"""``preheat simulate --sweep engine.args....``: the engine levers side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preheat.report.record import read_run
from preheat.report.summary import summarize
from preheat.simulate.options import apply_overrides, parse_sweep


def _pool(tmp_path: Path) -> Path:
    p = tmp_path / "pool.yaml"
    p.write_text(
        "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: t}\n"
        "spec: {model: {name: m}, engine: {kind: sim, args: {quantization: fp8}}, "
        "replicas: {min: 1, max: 1}}\n"
    )
    return p


def _trace(tmp_path: Path, n: int = 40) -> Path:
    p = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp_ms": 100 * i, "input_tokens": 900 + 37 * i, "output_tokens": 40}
        for i in range(n)
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def test_engine_args_sweep_keys_are_any_vllm_arg_nested_included() -> None:
    assert parse_sweep("engine.args.quantization=none,fp8") == (
        "engine.args.quantization",
        ("none", "fp8"),
    )
    key = "engine.args.speculativeConfig.synthetic_acceptance_length"
    assert parse_sweep(f"{key}=2.2,2.9")[1] == ("2.2", "2.9")
    spec = {"engine": {"args": {"quantization": "fp8"}}}
    # "none" unsets the arg (vLLM's default: no quantization); nested keys make objects
    out = apply_overrides(spec, [("engine.args.quantization", "none"), (key, "2.5")])
    assert out["engine"]["args"] == {"speculativeConfig": {"synthetic_acceptance_length": 2.5}}
    assert spec["engine"]["args"] == {"quantization": "fp8"}  # the input is left alone


def test_sweep_over_levers_prints_latency_goodput_and_gpu_hours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    base = ["simulate", "--pool", str(_pool(tmp_path)), "--trace", str(_trace(tmp_path))]
    rc = main(
        [
            *base,
            "--out",
            str(tmp_path / "sweep"),
            "--sweep",
            "engine.args.quantization=none,fp8",
            "--no-plots",
            "--jobs",
            "1",
            "--ttft-objective-ms",
            "500",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    head = next(line for line in out.splitlines() if line.startswith("setting"))
    for column in ("SLO", "goodput", "GPU-h", "TTFT p50", "ITL p50", "p95", "p99"):
        assert column in head
    runs = {
        v: summarize(read_run(tmp_path / "sweep" / f"engine.args.quantization={v}"))
        for v in ("none", "fp8")
    }
    assert "engine.args.quantization=none" in out
    assert "engine.args.quantization=fp8" in out
    none, fp8 = runs["none"], runs["fp8"]
    assert none.ok == fp8.ok == 40
    # FP8 weights: shorter decode steps and prefills on the same load
    assert fp8.itl_ms.p50 is not None
    assert none.itl_ms.p50 is not None
    assert fp8.itl_ms.p50 < none.itl_ms.p50
    assert fp8.ttft_ms.p50 is not None
    assert none.ttft_ms.p50 is not None
    assert fp8.ttft_ms.p50 < none.ttft_ms.p50


def test_speculation_in_the_sim_needs_its_acceptance_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    rc = main(
        [
            "simulate",
            "--pool",
            str(_pool(tmp_path)),
            "--trace",
            str(_trace(tmp_path)),
            "--out",
            str(tmp_path / "run"),
            "--set",
            "engine.args.speculativeConfig.method=eagle",
            "--set",
            "engine.args.speculativeConfig.num_speculative_tokens=3",
            "--no-plots",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "spec.engine.args.speculativeConfig: the sim engine needs the expected acceptance" in err
