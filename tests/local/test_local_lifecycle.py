"""Start bounds, how a worker's exit is recorded, and demote order (issue 12, E).

Pure tables for :func:`preheat.local.workers.starts_allowed` and
:func:`preheat.local.workers.exit_kind`; the runtime's reconcile with fake processes and a
recorded role RPC for the demote order and the bounded start burst.
"""

from __future__ import annotations

import signal

import pytest

from preheat.local import workers as local_workers


@pytest.mark.parametrize(
    ("want", "starting", "alive", "max_starting", "max_workers", "allowed"),
    [
        (1000, 0, 0, 2, 0, 2),  # the burst: two at a time
        (1000, 2, 2, 2, 0, 0),  # two still starting: none more
        (1000, 1, 5, 2, 0, 1),
        (3, 0, 0, 0, 0, 3),  # no bounds
        (5, 0, 6, 4, 8, 2),  # the process cap
        (5, 0, 9, 4, 8, 0),  # over the cap already (draining ones): none
        (0, 0, 0, 2, 8, 0),
    ],
)
def test_starts_allowed(want, starting, alive, max_starting, max_workers, allowed):
    got = local_workers.starts_allowed(
        want, starting=starting, alive=alive, max_starting=max_starting, max_workers=max_workers
    )
    assert got == allowed


@pytest.mark.parametrize(
    ("code", "told", "killed_because", "kind"),
    [
        (0, False, "", local_workers.STOP),  # an outside SIGTERM or Drain RPC: drained, exit 0
        (-signal.SIGTERM, False, "", local_workers.STOP),  # SIGTERM before its handler was set
        (-signal.SIGINT, False, "", local_workers.STOP),
        (-signal.SIGKILL, False, "", local_workers.CRASH),  # OOM killer, kill -9
        (-signal.SIGSEGV, False, "", local_workers.CRASH),
        (1, False, "", local_workers.CRASH),
        (-signal.SIGKILL, False, "not warm 2 s after start", local_workers.CRASH),
        (0, True, "", local_workers.STOP),
        (1, True, "", local_workers.STOP),  # told to drain: its exit is the stop asked for
    ],
)
def test_exit_kind(code, told, killed_because, kind):
    assert local_workers.exit_kind(code, told_to_stop=told, killed_because=killed_because) == kind
