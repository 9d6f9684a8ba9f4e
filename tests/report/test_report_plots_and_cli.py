"""The plots are real PNGs; `preheat report` prints the table, writes plots, and refuses bad
input with one clear message and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import matplotlib.image
import pytest

from preheat.cli import main
from preheat.report.plots import cdf_points, write_plots
from preheat.report.record import META_FILE, REQUESTS_FILE, Run, RunMeta, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    """A PNG that decodes to a picture of a sensible size (not a blank stub)."""
    if not path.read_bytes().startswith(PNG_MAGIC):
        return False
    pixels = matplotlib.image.imread(path)
    height, width = pixels.shape[:2]
    return bool(height >= 300 and width >= 600 and pixels.std() > 0.01)


def test_plots_are_written_as_pngs(tmp_path: Path, run_known: Run) -> None:
    paths = write_plots(run_known, tmp_path / "plots")
    assert sorted(p.name for p in paths) == [
        "latency_cdf.png",
        "replicas.png",
        "ttft_over_time.png",
    ]
    for p in paths:
        assert _is_png(p), p


def test_a_run_without_replicas_gets_no_replica_plot(tmp_path: Path, run_known: Run) -> None:
    bare = replace(run_known, events=[], replicas=[])
    names = [p.name for p in write_plots(bare, tmp_path)]
    assert names == ["latency_cdf.png", "ttft_over_time.png"]


def test_an_empty_run_still_plots(tmp_path: Path) -> None:
    paths = write_plots(Run(RunMeta(name="empty"), [], [], []), tmp_path)
    assert all(_is_png(p) for p in paths)


def test_report_cli_prints_table_and_writes_plots(
    tmp_path: Path, run_known: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "run", run_known)
    assert main(["report", str(tmp_path / "run"), "--plots", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "TTFT <= 250 ms 33.3%" in out
    assert _is_png(tmp_path / "p" / "replicas.png")


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preheat.cli", "report", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_missing_folder_is_a_clear_error_with_exit_2(tmp_path: Path) -> None:
    proc = _report(str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "no such run folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_not_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert f"not a run folder (no {META_FILE})" in capsys.readouterr().err


def test_malformed_line_names_the_file_and_line(tmp_path: Path, run_known: Run) -> None:
    write_run(tmp_path, run_known)
    path = tmp_path / REQUESTS_FILE
    lines = path.read_text().splitlines()
    lines.insert(2, "{oops")
    path.write_text("\n".join(lines) + "\n")
    proc = _report(str(tmp_path), "--no-plots")
    assert proc.returncode == 2
    assert f"{REQUESTS_FILE}:3: not JSON" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "latency_cdf.png").exists()


def test_a_field_of_the_wrong_shape_is_a_clear_error(tmp_path: Path, run_known: Run) -> None:
    write_run(tmp_path, run_known)
    (tmp_path / META_FILE).write_text('["not", "an object"]\n')
    proc = _report(str(tmp_path))
    assert proc.returncode == 2
    assert META_FILE in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cdf_points_are_thinned_and_end_at_one() -> None:
    runs = [(float(i), 1) for i in range(10_000, 0, -1)]
    xs, ys = cdf_points(runs)
    assert len(xs) <= 2001
    assert xs == sorted(xs)
    assert ys == sorted(ys)
    assert (xs[0], xs[-1], ys[-1]) == (1.0, 10_000.0, 1.0)


def test_cdf_points_weigh_runs_by_count() -> None:
    assert cdf_points([(2.0, 3), (1.0, 1)]) == ([1.0, 2.0], [0.25, 1.0])


def test_several_runs_side_by_side(
    tmp_path: Path, run_known: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "a", run_known)
    write_run(tmp_path / "b", replace(run_known, requests=run_known.requests[:2]))
    argv = ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--plots", str(tmp_path / "p")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[-2:]}
    assert rows["a"][1:4] == ["6", "1", "1"]  # requests, rejected, error
    assert rows["b"][1:4] == ["2", "0", "0"]
    assert _is_png(tmp_path / "p" / "a" / "latency_cdf.png")
    assert _is_png(tmp_path / "p" / "b" / "latency_cdf.png")


def test_one_bad_folder_among_several_stops_before_any_output(
    tmp_path: Path, run_known: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "a", run_known)
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "missing: no such run folder" in captured.err


def test_plots_and_no_plots_together_are_refused(tmp_path: Path, run_known: Run) -> None:
    # --no-plots used to win silently over --plots DIR
    write_run(tmp_path / "run", run_known)
    proc = _report(str(tmp_path / "run"), "--no-plots", "--plots", str(tmp_path / "p"))
    assert proc.returncode == 2
    assert "argument --plots: not allowed with argument --no-plots" in proc.stderr
    assert not (tmp_path / "p").exists()
