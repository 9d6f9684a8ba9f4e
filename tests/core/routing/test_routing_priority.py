"""The queue term counts only the waiting work at the request's priority and above.

Lower value = higher priority (vLLM's convention: 0 interactive, 1 standard, 2 batch). An
engine under ``--scheduling-policy priority`` schedules its waiting queue by priority, so a
batch flood waiting on an endpoint is behind an interactive request sent there; running work
counts whatever its priority (vLLM 0.32 preempts running requests only under KV pressure).

Cost: 0.1 ms per uncached prompt token; a queued request counts as one typical (1024-token)
prefill, 102.4 ms.
"""

from __future__ import annotations

import pytest
from routingkit import COST, make_ctx, make_endpoint, make_request, picked

from preheat.core.routing.plugins.queue import queue_wait_ms, requests_ahead
from preheat.core.routing.scheduler import (
    SchedulerConfig,
    SchedulerState,
    predict_ttft_ms,
    schedule,
)
from preheat.core.routing.types import Endpoint, RouteDecision, RoutingContext

CFG = SchedulerConfig()
INTERACTIVE, STANDARD, BATCH = 0, 1, 2


def run(ctx: RoutingContext) -> RouteDecision:
    return schedule(ctx, CFG, COST, SchedulerState())[0]


def waiting_at(eid: str, n: int, priority: int, by_engine: bool) -> Endpoint:
    """``n`` requests this router sent at ``priority`` waiting on endpoint ``eid``; the
    engine says so by priority (``by_engine``), or (vLLM) only this router's record does."""
    return make_endpoint(
        eid,
        queue=n,
        in_flight=n,
        waiting_by_priority={priority: n} if by_engine else None,
        in_flight_by_priority={priority: n},
    )


def flooded_and_busy(by_priority: bool = True) -> tuple[Endpoint, Endpoint]:
    """A: 20 batch requests waiting; B: 3 interactive ones waiting."""
    return waiting_at("A", 20, BATCH, by_priority), waiting_at("B", 3, INTERACTIVE, by_priority)


@pytest.mark.parametrize("by_priority", [True, False], ids=["engine-reports", "router-record"])
def test_a_batch_flood_does_not_push_an_interactive_request_to_a_worse_endpoint(
    by_priority: bool,
) -> None:
    a, b = flooded_and_busy(by_priority=by_priority)
    interactive = make_request(request_id="chat", priority=INTERACTIVE)
    d = run(make_ctx([a, b], interactive))
    assert picked(d) == "A"
    queue = {c.endpoint.id: c.terms["queue"] for c in d.candidates}
    assert queue["A"] == 0.0  # nothing ahead of it on A: the flood is scheduled after it
    assert queue["B"] > 0.0


@pytest.mark.parametrize("by_priority", [True, False], ids=["engine-reports", "router-record"])
def test_a_batch_flood_does_push_a_batch_request(by_priority: bool) -> None:
    a, b = flooded_and_busy(by_priority=by_priority)
    batch = make_request(request_id="job", priority=BATCH)
    d = run(make_ctx([a, b], batch))
    assert picked(d) == "B"  # 20 of its own class ahead on A, 3 (higher ones) on B
    queue = {c.endpoint.id: c.terms["queue"] for c in d.candidates}
    assert queue["A"] > queue["B"] > 0.0


def test_without_classes_every_waiting_request_counts() -> None:
    """Every request at the same priority: the FCFS formula, unchanged."""
    a = make_endpoint("A", queue=20, waiting_by_priority={STANDARD: 20})
    b = make_endpoint("B", queue=3, waiting_by_priority={STANDARD: 3})
    d = run(make_ctx([a, b], make_request(priority=STANDARD)))
    assert picked(d) == "B"
    assert requests_ahead(a, STANDARD) == requests_ahead(a, None) == 20


@pytest.mark.parametrize(
    ("waiting", "in_flight", "expected"),
    [
        ({INTERACTIVE: 2, STANDARD: 4, BATCH: 7}, {}, {INTERACTIVE: 2, STANDARD: 6, BATCH: 13}),
        # the router's own record is fresher than the engine's counts
        ({BATCH: 7}, {INTERACTIVE: 3}, {INTERACTIVE: 3, STANDARD: 3, BATCH: 7}),
    ],
)
def test_requests_ahead_counts_its_own_priority_and_above(
    waiting: dict[int, int], in_flight: dict[int, int], expected: dict[int, int]
) -> None:
    e = make_endpoint(
        queue=sum(waiting.values()),
        in_flight=sum(in_flight.values()),
        waiting_by_priority=waiting,
        in_flight_by_priority=in_flight,
    )
    assert {p: requests_ahead(e, p) for p in expected} == expected


def test_without_engine_counts_only_the_routers_lower_priority_requests_are_behind() -> None:
    """vLLM reports no per-priority counts: of its 10 waiting requests, the 6 batch ones this
    router sent (and has no first token of) are behind an interactive request; the other 4
    (another router's, say) are not known to be, so they count."""
    e = make_endpoint(queue=10, in_flight=6, in_flight_by_priority={BATCH: 6})
    assert requests_ahead(e, INTERACTIVE) == 4
    assert requests_ahead(e, BATCH) == 10


def test_requests_in_flight_without_a_recorded_priority_count_as_ahead() -> None:
    e = make_endpoint(in_flight=5, in_flight_by_priority={BATCH: 2})
    assert requests_ahead(e, INTERACTIVE) == 3


def test_running_work_counts_whatever_its_priority() -> None:
    """Running requests are not preempted for a waiting higher-priority one: the running
    term stays, and slots full of batch work still make an interactive request wait."""
    full = make_endpoint("A", running=4, max_num_seqs=4, queue=2, waiting_by_priority={BATCH: 2})
    t = queue_wait_ms(full, COST, CFG, priority=INTERACTIVE)
    # nothing waiting ahead of it, but every slot taken: one slot wait, plus the running term
    assert t == pytest.approx(CFG.slot_wait_ms + 4 * CFG.running_seq_ms)
    assert t > 0.0


def test_predicted_ttft_uses_the_requests_priority() -> None:
    a, _ = flooded_and_busy()
    ctx_chat = make_ctx([a], make_request(priority=INTERACTIVE))
    ctx_job = make_ctx([a], make_request(priority=BATCH))
    chat = predict_ttft_ms(a, ctx_chat, COST, CFG)
    job = predict_ttft_ms(a, ctx_job, COST, CFG)
    assert job - chat == pytest.approx(20 * COST.prefill_ms(CFG.typical_prompt_tokens, 0))
    assert run(ctx_chat).predicted_ttft_ms == pytest.approx(chat)


def test_the_fresher_total_wins_and_only_the_known_lower_priority_work_is_taken_off() -> None:
    """``num_waiting`` may come from a scrape fresher than the Status that counted by
    priority: what is known to be behind comes off the total; without classes (one
    priority) the total stands as it is, exactly the FCFS term."""
    e = make_endpoint(queue=8, waiting_by_priority={BATCH: 5})
    assert requests_ahead(e, INTERACTIVE) == 3
    assert requests_ahead(e, BATCH) == 8
    classless = make_endpoint(queue=8, waiting_by_priority={STANDARD: 3})
    assert requests_ahead(classless, STANDARD) == requests_ahead(classless, None) == 8
