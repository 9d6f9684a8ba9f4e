"""A tiny run of ``preheat bench sim`` (every part) into a temporary benchmarks.md: the
sections, tables, targets and plots are written, and each policy's run accounts for every
request."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from preheat.bench import sim, sim_bench

TINY = [
    "--routing-requests", "120",
    "--routing-gpus", "2,3",
    "--search-runs", "1",
    "--search-requests", "60",
    "--burst-windows", "4",
    "--burst-window-s", "8",
    "--burst-mean-rps", "3",
    "--geo-gpus", "3",
    "--geo-requests", "90",
    "--decode-requests", "60",
    "--preheat-concurrency", "68",  # the default is none; the ablation row needs one
]  # fmt: skip


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    sim_bench.add_arguments(p)
    return p.parse_args(argv)


def test_all_parts_write_their_sections_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    doc.write_text("# Benchmarks\n\n<!-- bench:worker -->\nkept\n<!-- /bench:worker -->\n")
    assert sim.run(parse([*TINY, "--write", str(doc)])) == 0
    text = doc.read_text()
    assert "<!-- bench:worker -->\nkept\n<!-- /bench:worker -->" in text
    for part in ("routing", "autoscaling", "geography", "decode"):
        assert f"<!-- bench:sim-{part} -->" in text
        assert f"Command: `preheat bench sim --part {part} " in text
    for policy in sim_bench.ROUTING_POLICIES:
        assert f"| {policy} |" in text or f"| **{policy}** |" in text
    for scaler in ("**preheat**", "**preheat w/o concurrency**", "hpa", "keda", "kpa"):
        assert f"| {scaler} | 0 |" in text
        assert f"| {scaler} | 1 |" in text
    assert (
        "- **preheat**: `decide`: TTFT p99 <= 300 ms over a 30 s window, queueDepth <= "
        "4/replica, concurrency <= 68/replica," in text
    )
    assert "| concurrency/replica | warm standby |" in text
    for c in (48, 68, 96):
        assert f"| {c} | 0 |" in text
        assert f"| {c} | 1 |" in text
    for geo in ("**preheat**", "geo-blind", "local-only"):
        assert f"| {geo} |" in text
    for row in ("preheat, weight 0", "**preheat, weight 0.05**", "round-robin", "least-request"):
        assert f"| {row} |" in text
    # 2 routing targets per pool size, one autoscaling target per standby setting, 2 decode
    # targets per trace and load
    assert text.count("**met**") + text.count("**missed**") == 2 * 2 + 2 + 2 * 4
    for png in ("routing.png", "autoscaling_pareto.png", "autoscaling_pods.png", "geography.png"):
        assert (tmp_path / "docs" / "img" / "bench" / png).stat().st_size > 1000
        assert f"(img/bench/{png})" in text
    out = capsys.readouterr().out
    assert "wrote section sim-geography" in out


def test_every_request_is_accounted_for_and_runs_repeat(tmp_path: Path) -> None:
    args = parse([*TINY, "--policies", "preheat,round-robin"])
    trace = sim_bench._mooncake(args, 60)
    pool = sim_bench._pool(2)
    opts = sim_bench._routing_options("preheat", args)
    a = sim_bench._simulate("a", pool, sim_bench._rescale(trace, 0.6), opts)
    b = sim_bench._simulate("a", pool, sim_bench._rescale(trace, 0.6), opts)
    s = a.summary
    assert s.ok + s.rejected + s.error == len(trace) == 60
    assert [r.ttft_ms for r in a.run.requests] == [r.ttft_ms for r in b.run.requests]


def test_autoscalers_are_the_core_policies() -> None:
    from preheat.core.autoscaling.baselines import Hpa, Keda, Kpa

    scalers = sim_bench.autoscalers(500.0)
    assert scalers["preheat"].decide is None  # the simulator calls core decide itself
    assert isinstance(scalers["hpa"].decide, Hpa)
    assert isinstance(scalers["keda"].decide, Keda)
    assert isinstance(scalers["kpa"].decide, Kpa)


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.run(parse([*TINY, "--data", str(tmp_path)])) == 2
    assert "not found (--data names the shared data folder)" in capsys.readouterr().out


def test_every_bad_flag_is_named_before_any_part_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # each used to end in a traceback (--routing-requests -5, --per-gpu-scale nan), or to
    # fail only after the parts before its own had run (--policies, --autoscalers, --slo-ms)
    argv = [
        *("--routing-requests", "-5", "--per-gpu-scale", "nan", "--routing-gpus", "0,x"),
        *("--policies", "preheat,nosuch", "--autoscalers", "hpa,nosuch", "--slo-ms", "-1"),
        *("--preheat-percentile", "100", "--standby", "0,-1", "--geo-gpus", "2"),
        *("--write", str(tmp_path / "b.md")),
    ]
    assert sim.run(parse(argv)) == 2
    err = capsys.readouterr().err
    for said in (
        "--routing-requests must be >= 1 and finite, got -5",
        "--routing-gpus wants comma-separated ints, got '0,x'",
        "--per-gpu-scale must be > 0 and finite, got nan",
        "--policies: unknown 'nosuch'; known: preheat,",
        "--autoscalers: unknown 'nosuch'; known: preheat, hpa, keda, kpa",
        "--slo-ms must be > 0 and finite, got -1.0",
        "--preheat-percentile must be within (0, 100), got 100.0",
        "--standby: every value must be >= 0, got -1",
        "--geo-gpus must be >= 3 and finite, got 2",
    ):
        assert said in err, said
    assert not (tmp_path / "b.md").exists()
    assert sim_bench.problems(parse(TINY)) == sim_bench.problems(parse([])) == []
