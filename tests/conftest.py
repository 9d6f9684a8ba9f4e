"""Suite-wide test plumbing.

``@pytest.mark.needs_shared(path, ...)``: the test reads files from ``../shared`` (the traces
and calibration beside the repository). Where one is missing the test skips, unless
``CI=true``: then it fails, so CI cannot pass by skipping what it was meant to run.

Logging: a test that installs a handler on the root logger (a CLI entry point calls
``setup_logging``, which writes to the ``sys.stderr`` of that moment: pytest's capture of
that test) has it removed when it ends, and the root level put back, so a later test's
threads (kopf's, in tests/operator) never write to a closed capture ("--- Logging error
--- ValueError: I/O operation on closed file").

Hypothesis: no property test has a deadline (tests assert behaviour, never wall-clock speed;
a 200-ms default fails a correct example on a busy machine). Under ``CI=true`` the examples
are derandomized and no example database is read or written, so a CI run is reproducible
from the commit alone; elsewhere they are random and the database under ``.hypothesis/``
replays a failure found earlier. ``HYPOTHESIS_PROFILE=ci`` or ``=dev`` picks one by hand.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
_ON_CI = os.environ.get("CI", "").lower() == "true"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _ON_CI else "dev"))


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_shared(*paths): files from ../shared the test reads; skips without them, "
        "fails instead under CI=true",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("needs_shared")
    if marker is None:
        return
    missing = [str(p) for p in marker.args if not Path(p).exists()]
    if not missing:
        return
    why = f"shared data not present: {', '.join(missing)} (../shared beside the repository)"
    if _ON_CI:
        pytest.fail(f"{why}; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(why)
