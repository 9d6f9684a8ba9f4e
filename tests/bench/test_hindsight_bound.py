"""The hindsight bound: each step's need, through the pool's own scaling rules (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from preheat.bench.hindsight_bound import bound, main, needs
from tests.core.autoscaling.autoscalingkit import config


def test_needs_counts_each_steps_arrivals_at_the_rate_a_pod_takes() -> None:
    arrivals = [0.1 * i for i in range(100)] + [10.0 + 0.01 * i for i in range(300)]
    assert needs(arrivals, per_pod=10.0, step_s=10.0) == [1, 3]  # 10 req/s, then 30
    assert needs([], 10.0, 10.0) == []
    with pytest.raises(ValueError, match="per_pod"):
        needs([1.0], 0.0, 10.0)


def test_without_windows_or_limits_the_bound_is_every_steps_need() -> None:
    cfg = config(up=(0.0, 0.0, 100), down=(0.0, 0.0, 100))
    need = [3, 9, 2, 2, 7, 1]
    b = bound(need, 15.0, cfg, start=3)
    assert b.ruled_pod_s == b.ideal_pod_s == sum(need) * 15.0
    assert b.peak_need == 9


def test_a_fall_is_held_for_the_scale_down_window_then_stepped_down() -> None:
    """10 pods for 600 s, then 2: the 300 s window holds 10 until 900 s (the last 10 was
    recommended at 585 s), then -2 every 60 s: 8 at 900, 6 at 960, 4 at 1020, 2 at 1080."""
    cfg = config(up=(0.0, 15.0, 4), down=(300.0, 60.0, 2))
    need = [10] * 40 + [2] * 40
    b = bound(need, 15.0, cfg, start=10)
    assert b.ideal_pod_s == 40 * 15 * 10 + 40 * 15 * 2
    held = 60 * 15 * 10  # steps 0-59 at 10
    stepped = 4 * 15 * (8 + 6 + 4) + 8 * 15 * 2
    assert b.ruled_pod_s == held + stepped
    # and a rise is followed within the scale-up step limit (+4 per 15 s)
    rise = bound([2] * 4 + [10] * 4, 15.0, cfg, start=2)
    assert rise.ruled_pod_s == 15 * (2 * 4 + 6 + 10 + 10 + 10)


def test_the_command_prints_both_against_a_fixed_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp_ms": {i * 50}, "input_tokens": 100, "output_tokens": 10}}\n'
            for i in range(1200)
        )
    )
    pool = Path(__file__).resolve().parents[2] / "src/preheat/bench/autoscaling-pool.yaml"
    assert main([str(trace), "--pool", str(pool), "--per-pod", "5", "--fixed", "8"]) == 0
    out = capsys.readouterr().out
    assert "peak need 4 pods" in out  # 20 req/s at 5 each
    assert "every step's need: " in out
    assert "x 8 fixed pods" in out
