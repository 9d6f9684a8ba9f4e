"""replay() with an in-process fake client: open-loop timing, the concurrency cap, stop and
drain, and joining a run folder another producer records into. No network."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from preheat.load.main import LOAD_KEY, open_writer
from preheat.load.replay import LoadOptions, LoadSummary, replay
from preheat.report.record import (
    EVENTS_FILE,
    REPLICAS_FILE,
    RequestOutcome,
    Run,
    RunMeta,
    RunWriter,
    ScaleEvent,
    read_meta,
    read_run,
)
from preheat.workload.traces import TraceRequest

HANG_S = 60.0  # only catches a replay that would not end; every test here ends in ~1 s


class FakeClient:
    """Answers after ``service_s`` (``math.inf``: never, only a cancel ends it); request ids
    in ``reject`` are rejected, those in ``explode`` raise (a client bug). ``on_send`` is
    called with each request id as it goes out."""

    def __init__(
        self,
        service_s: float = 0.0,
        reject: frozenset[str] = frozenset(),
        explode: frozenset[str] = frozenset(),
        on_send: Callable[[str], None] | None = None,
    ) -> None:
        self.service_s = service_s
        self.reject = reject
        self.explode = explode
        self.on_send = on_send
        self.sent: list[tuple[str, float]] = []

    async def send(self, req: TraceRequest, request_id: str, t_s: float) -> RequestOutcome:
        self.sent.append((request_id, time.monotonic()))
        if self.on_send is not None:
            self.on_send(request_id)
        if math.isinf(self.service_s):
            await asyncio.Event().wait()
        await asyncio.sleep(self.service_s)
        if request_id in self.explode:
            raise ValueError("bad frame")
        if request_id in self.reject:
            return RequestOutcome(request_id, t_s, "rejected", error="RESOURCE_EXHAUSTED: full")
        return RequestOutcome(request_id, t_s, "ok", ttft_ms=1.0, e2e_ms=self.service_s * 1e3)


def _trace(arrivals: list[float]) -> list[TraceRequest]:
    return [
        TraceRequest(arrival_s=a, input_tokens=4, output_tokens=2, index=i, session_id="s")
        for i, a in enumerate(arrivals)
    ]


async def _replay(
    tmp_path: Path,
    client: FakeClient,
    reqs: list[TraceRequest],
    *,
    stop: asyncio.Event | None = None,
    abort: asyncio.Event | None = None,
    **kw: Any,
) -> tuple[LoadSummary, Run]:
    with RunWriter(tmp_path, RunMeta(name="t")) as w:
        summary = await replay(
            "fake:0", reqs, LoadOptions(**kw), w, client=client, stop=stop, abort=abort
        )
    return summary, read_run(tmp_path)


async def test_requests_go_out_at_their_arrival_times(tmp_path: Path) -> None:
    client = FakeClient()
    t0 = time.monotonic()
    summary, run = await _replay(tmp_path, client, _trace([0.0, 0.2, 0.4]))
    offsets = [t - t0 for _, t in client.sent]
    assert offsets[1] >= 0.2
    assert offsets[2] >= 0.4
    assert [r.request_id for r in run.requests] == ["r0", "r1", "r2"]
    assert [r.t_s >= a for r, a in zip(run.requests, (0.0, 0.2, 0.4), strict=True)] == [True] * 3
    assert (summary.sent, summary.ok, summary.recorded) == (3, 3, 3)


async def test_outcomes_are_counted_by_kind(tmp_path: Path) -> None:
    client = FakeClient(reject=frozenset({"r1"}))
    summary, run = await _replay(tmp_path, client, _trace([0.0, 0.0, 0.0]))
    assert (summary.ok, summary.rejected, summary.error) == (2, 1, 0)
    assert sorted(r.outcome for r in run.requests) == ["ok", "ok", "rejected"]


async def test_a_client_exception_is_recorded_as_an_error(tmp_path: Path) -> None:
    client = FakeClient(explode=frozenset({"r0"}))
    summary, run = await _replay(tmp_path, client, _trace([0.0, 0.0]))
    assert (summary.ok, summary.error) == (1, 1)
    (bad,) = [r for r in run.requests if r.outcome == "error"]
    assert bad.error == "client: ValueError: bad frame"


async def test_requests_beyond_the_concurrency_cap_are_dropped_and_recorded(
    tmp_path: Path,
) -> None:
    client = FakeClient(service_s=0.3)
    summary, run = await _replay(tmp_path, client, _trace([0.0, 0.0, 0.0, 0.5]), concurrency=1)
    # r0 holds the only slot until 0.3 s: r1 and r2 are dropped, r3 (at 0.5 s) goes out
    assert [rid for rid, _ in client.sent] == ["r0", "r3"]
    assert (summary.sent, summary.dropped, summary.ok) == (2, 2, 2)
    dropped = [r for r in run.requests if r.error.startswith("dropped")]
    assert sorted(r.request_id for r in dropped) == ["r1", "r2"]
    assert all(r.outcome == "error" for r in dropped)
    assert "--concurrency 1" in dropped[0].error
    assert summary.recorded == len(run.requests) == 4


async def test_stop_ends_sending_and_cancels_what_outlives_the_drain(tmp_path: Path) -> None:
    # Requests that never finish, and the next arrivals an hour away: a replay that waited
    # for either would not end; the bound only catches that.
    stop = asyncio.Event()
    client = FakeClient(service_s=math.inf, on_send=lambda rid: rid == "r1" and stop.set())
    summary, run = await asyncio.wait_for(
        _replay(tmp_path, client, _trace([0.0, 0.1, 3600.0, 7200.0]), stop=stop, drain_s=0.2),
        HANG_S,
    )
    assert summary.stopped
    assert (summary.sent, summary.not_sent, summary.cancelled) == (2, 2, 2)
    assert [r.error.split(":")[0] for r in run.requests] == ["cancelled", "cancelled"]
    assert summary.recorded == len(run.requests) == 2


async def test_abort_cuts_the_drain_short(tmp_path: Path) -> None:
    # A request that never finishes and a drain of an hour: only the abort ends the replay
    # (the bound only catches a replay that would not end).
    stop, abort = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def stop_then_abort(rid: str) -> None:
        stop.set()
        loop.call_later(0.2, abort.set)  # after the replay has begun to drain

    client = FakeClient(service_s=math.inf, on_send=stop_then_abort)
    summary, run = await asyncio.wait_for(
        _replay(tmp_path, client, _trace([0.0, 3600.0]), stop=stop, abort=abort, drain_s=3600.0),
        HANG_S,
    )
    assert stop.is_set()
    assert abort.is_set()
    assert (summary.sent, summary.cancelled, summary.not_sent) == (1, 1, 1)
    assert [r.error.split(":")[0] for r in run.requests] == ["cancelled"]


async def test_in_flight_requests_finish_within_the_drain(tmp_path: Path) -> None:
    client = FakeClient(service_s=0.3)
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, stop.set)
    summary, run = await _replay(tmp_path, client, _trace([0.0, 5.0]), stop=stop, drain_s=5.0)
    assert (summary.ok, summary.cancelled, summary.not_sent) == (1, 0, 1)
    assert [r.outcome for r in run.requests] == ["ok"]


async def test_t0_puts_requests_on_another_producers_time_axis(tmp_path: Path) -> None:
    client = FakeClient()
    _, run = await _replay(tmp_path, client, _trace([0.0]), t0_unix=time.time() - 100.0)
    assert run.requests[0].t_s == pytest.approx(100.0, abs=1.0)


def test_bad_options_are_refused_with_every_problem() -> None:
    with pytest.raises(ValueError, match="concurrency") as err:
        LoadOptions(concurrency=0, drain_s=-1, api="smoke")  # type: ignore[arg-type]
    text = str(err.value)
    assert "concurrency must be >= 1" in text
    assert "drain_s must be >= 0" in text
    assert "api must be one of" in text


def test_joining_a_run_folder_keeps_the_other_producers_files(tmp_path: Path) -> None:
    up_meta = RunMeta(
        name="pool", pool="examples/pool.yaml", command="preheat up", t0_unix=time.time() - 10
    )
    with RunWriter(tmp_path, up_meta, parts=(EVENTS_FILE, REPLICAS_FILE)) as up:
        up.event(ScaleEvent(1.0, "scale_up", "burst", from_replicas=1, to_replicas=2))
        writer, t0, joined = open_writer(
            tmp_path,
            RunMeta(name="load", target="grpc x:1", ttft_objective_ms=300, command="preheat load"),
        )
        assert joined
        assert t0 == up_meta.t0_unix
        writer.request(RequestOutcome("r0", 10.0, "ok"))
        writer.meta.extra[LOAD_KEY] = {"sent": 1}
        writer.close()
        up.meta = read_meta(tmp_path) or up.meta  # as preheat up does before it closes
    run = read_run(tmp_path)
    assert [e.kind for e in run.events] == ["scale_up"]
    assert [r.request_id for r in run.requests] == ["r0"]
    assert run.meta.pool == "examples/pool.yaml"
    assert run.meta.command == "preheat up"
    assert run.meta.target == "grpc x:1"
    assert run.meta.ttft_objective_ms == 300
    assert run.meta.extra[LOAD_KEY] == {"sent": 1}


def test_an_earlier_load_run_is_not_joined(tmp_path: Path) -> None:
    old = RunMeta(name="old", t0_unix=time.time() - 1000, extra={LOAD_KEY: {"sent": 3}})
    RunWriter(tmp_path, old).close()
    writer, t0, joined = open_writer(tmp_path, replace(old, extra={}))
    writer.close()
    assert not joined
    assert t0 > old.t0_unix
