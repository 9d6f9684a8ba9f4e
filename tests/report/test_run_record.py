"""The run record survives a write/read round trip, and a live run cut short stays readable."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import pytest

from preheat.report.record import (
    REQUESTS_FILE,
    ReplicaSample,
    RequestOutcome,
    Run,
    RunFormatError,
    RunMeta,
    RunWriter,
    ScaleEvent,
    _dump,
    read_run,
    write_run,
)


def test_round_trip_keeps_every_field(tmp_path: Path, run_known: Run) -> None:
    write_run(tmp_path / "run", run_known)
    back = read_run(tmp_path / "run")
    assert back == run_known


def test_a_partial_last_line_is_tolerated(tmp_path: Path) -> None:
    with RunWriter(tmp_path, RunMeta(name="cut")) as w:
        w.request(RequestOutcome("a", 0.0, "ok", ttft_ms=5.0))
    with (tmp_path / REQUESTS_FILE).open("a") as f:
        f.write('{"request_id": "b", "t_s": 1')  # killed mid-write
    back = read_run(tmp_path)
    assert [r.request_id for r in back.requests] == ["a"]
    assert back.cut_off == (f"{REQUESTS_FILE}:2",)  # and said (it was left out silently)


def test_the_report_says_which_line_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    with RunWriter(tmp_path, RunMeta(name="cut")) as w:
        w.request(RequestOutcome("a", 0.0, "ok", ttft_ms=5.0))
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    assert "cut off" not in capsys.readouterr().out
    with (tmp_path / REQUESTS_FILE).open("a") as f:
        f.write('{"request_id": "b", "t_s": 1')  # killed mid-write
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    assert (
        f"note: {tmp_path / REQUESTS_FILE}:2: the line was cut off mid-write (the run stopped "
        "while writing it); left out"
    ) in capsys.readouterr().out


def test_a_malformed_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    with RunWriter(tmp_path, RunMeta(name="bad")) as w:
        w.request(RequestOutcome("a", 0.0, "ok"))
    with (tmp_path / REQUESTS_FILE).open("a") as f:
        f.write("not json\n")
        f.write('{"request_id": "c", "t_s": 2, "outcome": "ok"}\n')
    with pytest.raises(RunFormatError, match=rf"{REQUESTS_FILE}:2: not JSON"):
        read_run(tmp_path)


def test_unknown_outcome_is_refused(tmp_path: Path) -> None:
    with RunWriter(tmp_path, RunMeta(name="bad")) as w:
        w.request(RequestOutcome("a", 0.0, "maybe"))  # type: ignore[arg-type]
    with pytest.raises(RunFormatError, match="outcome 'maybe'"):
        read_run(tmp_path)


def test_a_field_of_the_wrong_type_names_it(tmp_path: Path) -> None:
    with RunWriter(tmp_path, RunMeta(name="bad")):
        pass
    (tmp_path / REQUESTS_FILE).write_text('{"request_id": "a", "t_s": "soon", "outcome": "ok"}\n')
    with pytest.raises(RunFormatError, match=rf"{REQUESTS_FILE}:1: field 't_s' must be float"):
        read_run(tmp_path)


def test_ints_are_accepted_for_floats_and_unknown_keys_ignored(tmp_path: Path) -> None:
    with RunWriter(tmp_path, RunMeta(name="ok")):
        pass
    (tmp_path / REQUESTS_FILE).write_text(
        '{"request_id": "a", "t_s": 1, "outcome": "ok", "ttft_ms": 7, "new_field": [1]}\n'
    )
    (r,) = read_run(tmp_path).requests
    assert (r.t_s, r.ttft_ms) == (1, 7)


def test_itl_runs_must_be_pairs_of_numbers(tmp_path: Path) -> None:
    with RunWriter(tmp_path, RunMeta(name="bad")):
        pass
    (tmp_path / REQUESTS_FILE).write_text(
        '{"request_id": "a", "t_s": 0, "outcome": "ok", "itl_runs_ms": ["x"]}\n'
    )
    with pytest.raises(RunFormatError, match="field 'itl_runs_ms'"):
        read_run(tmp_path)


@pytest.mark.parametrize(
    "record",
    [
        RequestOutcome(
            "r",
            1.5,
            "ok",
            ttft_ms=12.0,
            itl_runs_ms=[[7.5, 3.0], [8.0, 1.0]],
            stages_ms={"queue": 1.0, "prefill": 11.0},
        ),
        ScaleEvent(2.0, "scale_up", reason="why", pool="p", from_replicas=1, to_replicas=2),
        ReplicaSample(3.0, active=2, standby=1),
    ],
)
def test_a_record_line_is_what_asdict_gives(record: object) -> None:
    """The JSON line is written from the fields without asdict's deep copy: the same
    object, and every field a JSON value (a nested dataclass would need asdict again)."""
    assert json.loads(_dump(record)) == asdict(record)  # type: ignore[call-overload]
    for f in fields(record):  # type: ignore[arg-type]
        assert not is_dataclass(getattr(record, f.name))
