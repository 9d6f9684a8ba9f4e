"""The router's queue term counts only the waiting work at a request's priority and above.

Two sim workers schedule by priority (vLLM's ``--scheduling-policy priority``, as a pool with
classes runs them). A is flooded with batch work, B with interactive work, both sent
straight to the workers (not through the router), so the router knows them only from the
workers' Status (``WorkerStatus.waiting_by_priority``). An interactive request is routed to
A, whose waiting flood is scheduled after it; a batch request to B.
"""

from __future__ import annotations

from frontendkit import Router, eventually, flooded, gen, router, words, workers

from preheat.core.routing.types import Endpoint
from preheat.proto.preheat.v1 import inference_pb2, router_pb2

# two slots, real-time steps: the floods below keep their queues for many seconds
PRIORITY_ENGINE = {
    "engine": {"max_num_seqs": 2, "scheduling_policy": "priority", "time_scale": 1.0}
}
INTERACTIVE, BATCH = inference_pb2.PRIORITY_INTERACTIVE, inference_pb2.PRIORITY_BATCH


def endpoint(r: Router, wid: str) -> Endpoint | None:
    """The router's view of worker ``wid`` (None: not in its store)."""
    return next((e for e in r.server.store.snapshot() if e.id == wid), None)


def waiting_by_priority(r: Router, wid: str) -> dict[int, int]:
    e = endpoint(r, wid)
    return {} if e is None else dict(e.waiting_by_priority or ())


def counts(r: Router, wid: str) -> tuple[int, int]:
    """(waiting, running) as the router holds them: the queue term's totals, which may come
    from another read than ``waiting_by_priority`` and lag it."""
    e = endpoint(r, wid)
    return (0, 0) if e is None else (e.num_waiting, e.num_running)


async def pick(r: Router, prompt: str, priority: int) -> router_pb2.PickResponse:
    req = router_pb2.PickRequest(request=gen(prompt, 4, priority=priority))
    answer: router_pb2.PickResponse = await r.router.Pick(req, timeout=10)
    return answer


async def test_a_batch_flood_on_one_worker_does_not_push_interactive_requests_away() -> None:
    async with (
        workers([{"id": "A", **PRIORITY_ENGINE}, {"id": "B", **PRIORITY_ENGINE}]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        a, b = ws
        async with flooded(a, 12, 2000, BATCH), flooded(b, 6, 2000, INTERACTIVE):
            # the workers report their waiting requests by engine priority (0 interactive,
            # 2 batch): A's batch requests wait (7 of 12 once the worker's bounds took
            # theirs), B's interactive ones (4 of 6); and the router's total of each has
            # caught up with them (a CI run once picked while A's total still said 3)
            await eventually(
                lambda: (
                    waiting_by_priority(r, "A").get(2, 0) >= 5
                    and waiting_by_priority(r, "B").get(0, 0) >= 3
                    and counts(r, "A")[0] > counts(r, "B")[0] >= 3
                    and counts(r, "A")[1] == counts(r, "B")[1] == 2
                ),
                10,
            )
            chat = await pick(r, words(24, "chat"), INTERACTIVE)
            job = await pick(r, words(24, "job"), BATCH)
        assert chat.endpoint.worker_id == "A", chat.explanation
        assert job.endpoint.worker_id == "B", job.explanation
        # the batch request sees the flood ahead of it on A: its alternate is predicted later
        assert [e.worker_id for e in job.alternates] == ["A"]
        assert job.alternates[0].predicted_ttft_ms > job.endpoint.predicted_ttft_ms
