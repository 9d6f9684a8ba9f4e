"""``preheat bench forecast``: the forecast's errors on a rate series (pure) and the command
on each kind of input, with clear errors for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preheat.bench.forecast_accuracy import evaluate, variants, window_rates
from preheat.cli import main

W = 600.0  # ServeGen's 10-minute windows
DAY = 86_400.0


def _workweek(days: int) -> list[float]:
    """10-minute rates: weekdays 100 req/s from 08:00 to 20:00 and 40 otherwise, weekends
    (days 5 and 6 of each week) 40 all day."""
    out = []
    for i in range(int(days * DAY / W)):
        t = i * W
        day, hour = int(t // DAY) % 7, (t % DAY) / 3600.0
        out.append(100.0 if day < 5 and 8.0 <= hour < 20.0 else 40.0)
    return out


def test_window_rates_count_arrivals_per_window() -> None:
    assert window_rates([0.5, 1.0, 1.5, 2.5, 7.9], 2.0) == [1.5, 0.5, 0.0, 0.5]
    assert window_rates([], 2.0) == []
    with pytest.raises(ValueError, match="window-s"):
        window_rates([1.0], 0.0)


def test_a_steady_series_is_forecast_exactly_by_every_variant() -> None:
    for v in variants(DAY):
        acc = evaluate([50.0] * 300, W, v.hw, [W, 3600.0], 0.0)
        for a in acc.values():
            assert a is not None
            assert a.p90 == pytest.approx(0.0, abs=1e-9)


def test_the_seasons_foresee_what_level_and_trend_cannot() -> None:
    """Three weeks of a work week: six hours ahead, the daily season is far closer than
    level and trend (which cannot see 08:00 coming), and in the third week the weekly one
    closer still (the daily season expects Friday's day on Saturday)."""
    rates = _workweek(21)
    none, daily, weekly = (
        evaluate(rates, W, v.hw, [6 * 3600.0], 14 * DAY)[6 * 3600.0] for v in variants(DAY)
    )
    assert none is not None
    assert daily is not None
    assert weekly is not None
    assert daily.p90 < 0.8 * none.p90
    # (measured: p90 100% -> 78%, median 31% -> 23%; the trend, extrapolated six hours
    # across each step, is most of what is left)
    assert weekly.p90 < 0.9 * daily.p90
    assert weekly.median < 0.85 * daily.median


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["bench", "forecast", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_command_reads_servegen_a_schedule_or_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rates = _workweek(9)
    csv = tmp_path / "agg.csv"
    csv.write_text(
        "workload,window_start_s,total_rate_rps,active_clients\n"
        + "".join(f"a/b,{i * W:g},{r},1\n" for i, r in enumerate(rates))
    )
    md = tmp_path / "bench.md"
    rc, out, _ = _cli(["--servegen", str(csv), "--workload", "a/b", "--write", str(md)], capsys)
    assert rc == 0
    assert "errors counted from period 7 on" in out
    for name in ("level, trend", "season (24h)", "season (24h) + weekly (7 x 24h)"):
        assert f"| {name} |" in out
    assert "<!-- bench:forecast-a-b -->" in md.read_text()

    day = tmp_path / "day.json"
    day.write_text(json.dumps({"rates_rps": rates[: 2 * 144], "window_s": W}))
    rc, out, _ = _cli(["--schedule", str(day), "--horizons", "1h"], capsys)
    assert rc == 0
    assert "errors counted from period 1 on" in out
    assert "1h ahead" in out

    trace = tmp_path / "t.jsonl"
    lines = [
        {"timestamp_ms": 250.0 * i, "input_tokens": 10, "output_tokens": 5} for i in range(960)
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rc, out, _ = _cli(
        ["--trace", str(trace), "--window-s", "10", "--period", "1m", "--horizons", "10s"],
        capsys,
    )
    assert rc == 0
    assert "t.jsonl (960 requests): 24 windows of 10s" in out
    assert "| season (1m) + weekly (7 x 1m) |" in out  # named by the period, not "daily"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--servegen", "{csv}", "--workload", "nope"], "no windows for workload 'nope'"),
        (["--servegen", "{csv}", "--workload", "a/b", "--horizons", "soon"], "not a duration"),
        (["--servegen", "{csv}", "--workload", "a/b", "--score-from", "5"], "nothing to score"),
        (["--schedule", "{tmp}/missing.json"], "--schedule"),
        (["--trace", "{tmp}/missing.jsonl"], "missing.jsonl"),
        # flags the source does not read were ignored: --window-s 0 with --servegen ran
        (
            ["--servegen", "{csv}", "--window-s", "0", "--format", "azure"],
            "--format is read with --trace only; --window-s is read with --trace only",
        ),
        (["--schedule", "{tmp}/s.json", "--workload", "a/b"], "--workload is read with --servegen"),
        (["--trace", "{tmp}/missing.jsonl", "--window-s", "nan"], "--window-s must be > 0"),
    ],
)
def test_bad_input_is_a_clear_error(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "agg.csv"
    csv.write_text(
        "workload,window_start_s,total_rate_rps\n"
        + "".join(f"a/b,{i * W:g},10\n" for i in range(2 * 144))
    )
    rc, _, err = _cli([a.format(csv=csv, tmp=tmp_path) for a in argv], capsys)
    assert rc == 2
    assert message in err
