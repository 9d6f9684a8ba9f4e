"""The suite's Hypothesis settings (tests/conftest.py): no deadline anywhere, and under CI a
run that depends on nothing but the commit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent


def test_no_property_test_has_a_wall_clock_deadline() -> None:
    assert settings.default.deadline is None


def _profile_under(env: dict[str, str], tmp_path: Path) -> list[str]:
    """The settings a pytest run under ``env`` sees, printed by a one-test file beside a
    copy of the suite's conftest."""
    tmp_path.mkdir()
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_probe.py").write_text(
        textwrap.dedent(
            """
            from hypothesis import settings

            def test_probe():
                d = settings.default
                print(f"PROFILE derandomize={d.derandomize} database={d.database} "
                      f"deadline={d.deadline}")
            """
        )
    )
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(tmp_path)],
        env={**base, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith("PROFILE")]


def test_ci_runs_the_same_examples_every_time_and_keeps_no_database(tmp_path: Path) -> None:
    (ci,) = _profile_under({"CI": "true"}, tmp_path / "ci")
    assert ci == "PROFILE derandomize=True database=None deadline=None"
    (dev,) = _profile_under({}, tmp_path / "dev")
    assert "derandomize=False" in dev
    assert "database=None" not in dev
    (picked,) = _profile_under({"HYPOTHESIS_PROFILE": "ci"}, tmp_path / "picked")
    assert picked == ci
