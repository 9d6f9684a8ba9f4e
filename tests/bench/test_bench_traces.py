"""``preheat bench traces``: the comparison's trace files, each one ``preheat simulate
--trace`` reads back (the burst, the diurnal day and its schedule, the clustered stand-in)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from preheat.bench import traces
from preheat.bench.main import add_arguments, run
from preheat.bench.traces import DATA
from preheat.workload.traces import load_trace


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return run(p.parse_args(argv))


@pytest.mark.needs_shared(
    DATA / "servegen_aggregate_rate_10min.csv", DATA / "azure_llm_2023_conv.csv"
)
def test_every_trace_file_is_written_and_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "traces"
    argv = ["traces", "--out", str(out), "--diurnal-window-s", "1", "--burst-windows", "4"]
    assert main([*argv, "--clustered-duration-s", "120"]) == 0
    printed = capsys.readouterr().out
    for name in ("burst.jsonl", "diurnal.jsonl", "clustered.jsonl"):
        trace = load_trace(out / name)
        assert trace, name
        assert f"{out / name}: " in printed
    clustered = load_trace(out / "clustered.jsonl")
    assert f"{len(clustered):,} requests over 120 s (synthetic" in printed
    assert max(r.arrival_s for r in clustered) < 120.0
    schedule = json.loads((out / "diurnal-schedule.json").read_text())
    assert len(schedule["rates_rps"]) == 144


def test_a_bad_setting_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not (DATA / "servegen_aggregate_rate_10min.csv").is_file():
        pytest.skip("needs the shared data")  # the shared-data check comes first

    def built(*_: object) -> None:
        raise AssertionError("a trace was built before the settings were checked")

    # the whole day is millions of requests (minutes here): refused before any is built
    monkeypatch.setattr(traces.bursts, "bursty_trace", built)
    monkeypatch.setattr(traces.diurnal, "diurnal_trace", built)
    argv = ["traces", "--out", str(tmp_path), "--clustered-duration-s", "0"]
    assert main(argv) == 2
    assert "error: duration_s must be > 0" in capsys.readouterr().out
