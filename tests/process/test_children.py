"""The one process spawner: output to a log file (``preheat up``) or to a pipe (the
benchmarks' ready lines), the child in its own process group either way."""

from __future__ import annotations

import sys
from pathlib import Path

from preheat.process.children import spawn

_SAY = "import os, sys; print('pgid', os.getpgid(0)); sys.stdout.flush(); sys.stdin.read()"


async def test_output_to_a_pipe_when_there_is_no_log_file() -> None:
    child = await spawn("say", [sys.executable, "-c", _SAY], None, now=1.5)
    assert child.proc.stdout is not None
    assert child.log_path is None
    line = (await child.proc.stdout.readline()).decode()
    assert line.split() == ["pgid", str(child.pid)]  # its own group, not ours
    assert await child.proc.wait() == 0  # stdin is /dev/null: it ends by itself
    assert await child.stop(grace_s=10) == 0  # nothing to stop: its exit status
    assert child.signalled == []
    assert child.started_at == 1.5


async def test_output_appended_to_the_log_file(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "say.log"
    for _ in range(2):
        child = await spawn("say", [sys.executable, "-c", _SAY], log, now=0.0)
        assert child.proc.stdout is None
        await child.proc.wait()
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("pgid ") for line in lines)
