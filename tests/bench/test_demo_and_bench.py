"""`preheat demo` and `preheat bench worker` run end to end (behaviour only, no speed)."""

import subprocess
import sys
from pathlib import Path


def _preheat(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preheat.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_demo_prints_ttft_and_itl_per_request():
    proc = _preheat("demo", "--max-tokens", "8", "--prompt-tokens", "256", "--burst", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("request"))
    assert "TTFT ms" in header
    assert "ITL p50" in header
    rows = [line for line in lines if line.startswith(("cold", "same", "follow", "burst"))]
    assert len(rows) == 5
    # the repeated prompt is served from the prefix cache: 256 tokens, 240 cached
    # (full 16-token blocks, the last token always recomputed as vLLM does)
    same = next(r for r in rows if r.startswith("same prompt again")).split()
    assert same[3:5] == ["256", "240"]


def test_bench_worker_prints_and_writes_its_table(tmp_path: Path):
    out = tmp_path / "benchmarks.md"
    proc = _preheat(
        "bench", "worker", "--requests", "4", "--concurrency", "1,2",
        "--time-scales", "0.01", "--max-tokens", "4", "--write", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    assert "added p50 ms" in text
    rows = [line for line in text.splitlines() if line.startswith("| 0.01 |")]
    assert len(rows) == 2
    assert "Failed requests: 0." in text
