"""The CLI's trace options: --duration counts replay seconds (after scaling)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from preheat.load.main import add_arguments, read_requests, trace_options
from preheat.workload.traces import load_trace


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--target", "h:1", "--trace", "t.jsonl", *argv])


def _trace(path: Path, n: int) -> Path:
    rows = [{"timestamp_ms": i * 1000, "input_tokens": 8, "output_tokens": 2} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("argv", "arrivals"),
    [
        ((), [float(i) for i in range(10)]),
        (("--duration", "4"), [0.0, 1.0, 2.0, 3.0]),
        (("--time-scale", "0.5", "--duration", "2"), [0.0, 0.5, 1.0, 1.5]),
        (("--rate-scale", "2", "--duration", "2"), [0.0, 0.5, 1.0, 1.5]),
        (("--start-s", "5", "--max-requests", "2"), [0.0, 1.0]),
    ],
)
def test_slicing_and_scaling(tmp_path: Path, argv: tuple[str, ...], arrivals: list[float]) -> None:
    reqs = load_trace(_trace(tmp_path / "t.jsonl", 10), trace_options(_args(*argv)))
    assert [r.arrival_s for r in reqs] == pytest.approx(arrivals)


def test_a_non_positive_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="--duration must be > 0"):
        trace_options(_args("--duration", "0"))
    # with the other flags' problems, and the value as given (not scaled)
    with pytest.raises(ValueError, match=r"^--duration must be > 0, got -5.0; --time-scale"):
        trace_options(_args("--duration", "-5", "--time-scale", "0", "--rate-scale", "10"))


def test_root_sessions_need_prefix_blocks(tmp_path: Path) -> None:
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    reqs = read_requests(azure, trace_options(_args()))
    assert [r.session_id for r in reqs] == ["", ""]
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 4.314579])
    ours = tmp_path / "ours.jsonl"
    rows = [
        {"timestamp_ms": 0, "input_tokens": 600, "output_tokens": 2, "prefix_block_ids": [0, 1]},
        {"timestamp_ms": 5, "input_tokens": 600, "output_tokens": 2, "prefix_block_ids": [0, 2]},
    ]
    ours.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r.session_id for r in read_requests(ours, trace_options(_args()))] == ["c1", "c2"]


def test_a_trace_of_shared_timestamps_is_said_and_spread_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {"timestamp_ms": (i // 4) * 1000, "input_tokens": 8, "output_tokens": 2} for i in range(8)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    together = read_requests(path, trace_options(_args()))
    assert [r.arrival_s for r in together] == [0, 0, 0, 0, 1, 1, 1, 1]
    err = capsys.readouterr().err
    assert "75% of the requests arrive at the same instant as the one before" in err
    assert "--spread-ties 1" in err
    spread = read_requests(path, trace_options(_args("--spread-ties", "1")))
    assert [r.arrival_s for r in spread] == pytest.approx([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75])
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="--spread-ties must be >= 0, got -1"):
        trace_options(_args("--spread-ties", "-1"))
    with pytest.raises(ValueError, match="--spread-ties must be >= 0, got inf"):
        trace_options(_args("--spread-ties", "inf"))


def test_bad_trace_flags_are_refused_together_each_by_its_flag() -> None:
    with pytest.raises(ValueError, match=r"^--time-scale") as e:
        trace_options(_args("--time-scale", "0", "--max-requests", "-1", "--token-scale", "-2"))
    said = str(e.value)
    assert said.startswith("--time-scale must be > 0, got 0.0; --max-requests must be >= 0"), said
    assert "--token-scale must be > 0" in said
    assert "time_scale" not in said


def test_objectives_and_drain_out_of_range_are_refused_before_any_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a NaN objective or drain passed every check and the replay ran (port 9: discard,
    # nothing listens; the refusal comes before any connection is tried)
    from preheat.cli import main

    trace = str(_trace(tmp_path / "t.jsonl", 3))
    argv = ["load", "--target", "127.0.0.1:9", "--trace", trace, "--out", str(tmp_path / "r")]
    assert main([*argv, "--ttft-objective-ms", "nan", "--e2e-objective-ms", "-1"]) == 2
    said = capsys.readouterr().err
    assert (
        "--ttft-objective-ms must be >= 0 and finite (0: none), got nan; "
        "--e2e-objective-ms must be >= 0 and finite (0: none), got -1.0"
    ) in said
    assert main([*argv, "--drain-s", "nan"]) == 2
    assert "drain_s must be >= 0, got nan" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
