"""``preheat report --periods``: a run's misses and replicas by period."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preheat.cli import main
from preheat.report.periods import MAX_PERIODS, by_period, parse_periods, render_periods
from preheat.report.record import ReplicaSample, RequestOutcome, Run, RunMeta, write_run
from preheat.report.summary import replica_seconds, run_end_s


def _req(i: int, t: float, outcome: str = "ok", ttft: float = 100.0) -> RequestOutcome:
    return RequestOutcome(f"r{i}", t, outcome, ttft_ms=ttft, e2e_ms=ttft + 50.0)  # type: ignore[arg-type]


def _run(ttft_objective_ms: float = 500.0) -> Run:
    requests = [
        _req(0, 1.0),
        _req(1, 2.0, ttft=600.0),  # late
        _req(2, 9.0, "rejected", 0.0),
        _req(3, 10.0, "error", 0.0),  # the second period's first second
        _req(4, 15.0),
        _req(5, 29.0, ttft=900.0),  # late, in the last period
    ]
    replicas = [
        ReplicaSample(0.0, active=2),
        ReplicaSample(5.0, active=2, starting=2),  # 4 held from 5 s
        ReplicaSample(20.0, active=1, draining=1),  # 2 held from 20 s to the end
    ]
    meta = RunMeta("periods", duration_s=30.0, ttft_objective_ms=ttft_objective_ms)
    return Run(meta, requests, [], replicas)


def test_each_period_counts_its_requests_misses_and_held_replicas() -> None:
    periods = by_period(_run(), parse_periods("0,10,20"))
    assert [(p.start_s, p.end_s) for p in periods] == [(0, 10), (10, 20), (20, 30)]
    assert [p.requests for p in periods] == [3, 2, 1]
    assert [(p.rejected, p.failed, p.late) for p in periods] == [(1, 0, 1), (0, 1, 0), (0, 0, 1)]
    assert [p.misses for p in periods] == [2, 1, 1]
    # 2 pods for 5 s and 4 for 5 s; 4 for 10 s; 2 for 10 s
    assert [p.mean_replicas for p in periods] == [3.0, 4.0, 2.0]


def test_the_periods_add_up_to_the_run() -> None:
    run = _run()
    periods = by_period(run, parse_periods("7"))
    assert [(p.start_s, p.end_s) for p in periods][-1] == (28.0, 30.0)  # cut at the run's end
    assert periods[-1].mean_replicas == 2.0
    assert sum(p.requests for p in periods) == len(run.requests)
    held = sum(replica_seconds(run.replicas, run_end_s(run)).values())
    assert sum(p.replica_seconds for p in periods) == pytest.approx(held)


def test_without_an_objective_only_refusals_and_failures_miss() -> None:
    periods = by_period(_run(ttft_objective_ms=0.0), parse_periods("30"))
    assert len(periods) == 1
    assert (periods[0].misses, periods[0].late) == (2, 0)
    assert "no objective" in render_periods(_run(ttft_objective_ms=0.0), periods)


def test_requests_before_the_first_edge_are_left_out() -> None:
    periods = by_period(_run(), parse_periods("10,20"))
    assert [p.requests for p in periods] == [2, 1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected seconds"),
        ("0", "length must be > 0"),
        ("ten", "expected seconds"),
        ("-5", "finite number >= 0"),
        ("nan", "finite number >= 0"),
        ("inf", "finite number >= 0"),
        ("0,10,10", "must increase"),
        ("20,10", "must increase"),
        (",".join(str(i) for i in range(MAX_PERIODS + 1)), f"at most {MAX_PERIODS}"),
    ],
)
def test_bad_periods_are_refused_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_periods(text)


def test_a_length_that_cuts_the_run_into_too_many_periods_is_refused() -> None:
    with pytest.raises(ValueError, match="at most"):
        by_period(_run(), parse_periods("0.01"))


@given(st.lists(st.floats(0.0, 40.0), min_size=1, max_size=40), st.floats(0.5, 15.0))
def test_every_request_is_in_one_period(times: list[float], length: float) -> None:
    """Also one sent after the run's recorded duration (a live run's last ones)."""
    run = _run()
    run.requests = [_req(i, t) for i, t in enumerate(times)]
    periods = by_period(run, parse_periods(f"{length!r}"))
    assert sum(p.requests for p in periods) == len(times)


def test_the_cli_prints_the_periods_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "run", _run())
    assert main(["report", "--no-plots", "--periods", "0,10,20", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "by period (a miss: rejected, failed or over the SLO; SLO: TTFT <= 500 ms)" in out
    starts = ("0-", "10-", "20-", "all ")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(starts)]
    assert rows == [
        ["0-10", "3", "2", "1", "0", "1", "3.0"],
        ["10-20", "2", "1", "0", "1", "0", "4.0"],
        ["20-30", "1", "1", "0", "0", "1", "2.0"],
        ["all", "6", "4", "1", "1", "2", "3.0"],
    ]


def test_the_cli_refuses_bad_periods_before_any_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "run", _run())
    assert main(["report", "--no-plots", "--periods", "10,5", str(tmp_path / "run")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "preheat report: --periods '10,5': the edges must increase" in captured.err
