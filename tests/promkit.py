"""A real Prometheus for the tests that run ``preheat up`` against one: the binary (a CI
failure, else a skip, when it is missing) and a server scraping the run folder's
``prometheus-targets.json`` (file service discovery, what ``preheat up --prometheus``
writes) every second, on a port held until it stopped. Shared by tests/local and
tests/dashboards (importable from every test folder: tests/ is on sys.path through its
conftest.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from preheat.process.ports import ReservedPort


def tool(name: str, *candidates: str | None) -> str:
    """The first executable of ``candidates``, else ``name`` on PATH; a CI failure, else a
    skip, when there is none."""
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if found is None:
        why = f"no {name} binary (scripts/get_helm.sh, scripts/prometheus.sh install them)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; CI=true, so this fails instead of skipping")
        pytest.skip(why)
    return found


@contextlib.contextmanager
def file_sd_prometheus(
    tmp: Path, run: Path, *, rule_files: Sequence[Path] = (), flags: Sequence[str] = ()
) -> Iterator[str]:
    """Prometheus scraping ``run/prometheus-targets.json`` (and evaluating ``rule_files``)
    every second until the block ends; yields its URL."""
    binary = tool("prometheus")
    reserved = ReservedPort()  # held until the server is gone: nothing else can take it
    listed = ", ".join(f"'{r}'" for r in rule_files)
    rules = f"rule_files: [{listed}]\n" if rule_files else ""
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"{rules}"
        "scrape_configs:\n"
        "  - job_name: preheat-local\n"
        "    file_sd_configs:\n"
        f"      - files: ['{run / 'prometheus-targets.json'}']\n"
        "        refresh_interval: 1s\n"
    )
    log = tmp / "prometheus.log"
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{reserved.port}",
            "--log.level=warn",
            *flags,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{reserved.port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reserved.release()
