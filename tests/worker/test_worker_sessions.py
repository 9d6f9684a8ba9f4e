"""What a worker says it would cost to lose: the sessions and cached blocks in its Status
(scale-down picks its victims by them; operator issue, item 4)."""

from __future__ import annotations

import pytest
from workerkit import gen_request, make_sim_engine, running_worker

from preheat.proto.preheat.v1 import worker_pb2
from preheat.worker.sessions import SessionLedger


def test_a_session_counts_while_its_last_request_is_within_the_window() -> None:
    ledger = SessionLedger(window_s=60.0)
    ledger.seen("a", now=100.0)
    ledger.seen("b", now=130.0)
    ledger.seen("", now=130.0)  # no session: not counted
    assert ledger.count(now=150.0) == 2
    ledger.seen("a", now=155.0)  # a's new request keeps it bound
    assert ledger.count(now=185.0) == 2
    assert ledger.count(now=195.0) == 1  # b's last request is 65 s old
    assert ledger.count(now=216.0) == 0


def test_the_ledger_forgets_the_oldest_session_past_its_bound() -> None:
    ledger = SessionLedger(window_s=60.0, max_tracked=3)
    for i, name in enumerate("abcd"):
        ledger.seen(name, now=float(i))
    assert ledger.count(now=4.0) == 3


@pytest.mark.parametrize(("window", "bound"), [(0.0, 1), (10.0, 0)])
def test_the_ledger_refuses_a_window_or_bound_that_is_not_positive(
    window: float, bound: int
) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        SessionLedger(window_s=window, max_tracked=bound)


async def test_status_reports_the_workers_sessions_and_cached_blocks() -> None:
    async with running_worker(make_sim_engine()) as c:
        before = await c.control.Status(worker_pb2.StatusRequest())
        assert before.sessions == 0  # the warm-up request names no session
        for session in ("s1", "s2", "s1", ""):
            call = c.inference.Generate(
                gen_request(prompt="a prompt long enough for blocks " * 4, session_id=session)
            )
            async for _ in call:
                pass
        after = await c.control.Status(worker_pb2.StatusRequest())
        assert after.sessions == 2
        assert after.cached_blocks > before.cached_blocks  # the prompts' blocks
