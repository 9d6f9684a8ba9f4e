"""Open-loop trace replay: send each request at its (scaled) arrival time, whatever the
server is doing, and record every outcome into a run folder.

Open loop means a slow server does not slow the sender: requests pile up in flight, as real
users' would. ``LoadOptions.concurrency`` bounds how many may be in flight at once (the
client's own memory and sockets); a request due while the cap is reached is *dropped* and
recorded as an ``error`` whose message starts with ``dropped``, so the report counts it as
a miss and the summary says how many. A request sent more than ``late_ms`` after its
scheduled time (the sender's event loop fell behind) is sent anyway and counted as *late*.

Every request sent gets one :class:`~preheat.report.record.RequestOutcome`: ``ok``,
``rejected`` (gRPC ``RESOURCE_EXHAUSTED`` / HTTP 429: admission said no) or ``error``. A
``stop`` event (Ctrl-C) ends sending; requests in flight get ``drain_s`` to finish and are
then cancelled (recorded as errors ``cancelled``). Requests never sent are not recorded;
the summary counts them as ``not_sent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from preheat.load.clients import Client, make_client
from preheat.report.record import RequestOutcome, RunWriter
from preheat.workload.traces import TraceRequest

Api = Literal["grpc", "openai"]
APIS: tuple[str, ...] = ("grpc", "openai")


@dataclass(frozen=True)
class LoadOptions:
    """How to send. ``max_output_tokens`` clips each request's ``max_tokens`` (None: the
    trace's); ``ttft_deadline_ms`` is sent with every request for the server's admission
    (0: none); ``t0_unix`` is the wall-clock time of ``t_s = 0`` in the run folder (None: the
    moment the replay starts), so requests line up with another producer's events."""

    api: Api = "grpc"
    concurrency: int = 1024
    max_output_tokens: int | None = None
    request_timeout_s: float = 300.0
    drain_s: float = 10.0
    late_ms: float = 100.0
    model: str = ""
    ttft_deadline_ms: int = 0
    id_prefix: str = "r"
    t0_unix: float | None = None

    def __post_init__(self) -> None:
        errors: list[str] = []
        if self.api not in APIS:
            errors.append(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        if self.concurrency < 1:
            errors.append(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            errors.append(f"max_output_tokens must be >= 1, got {self.max_output_tokens}")
        if not self.request_timeout_s > 0:
            errors.append(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if not self.drain_s >= 0:  # NaN too
            errors.append(f"drain_s must be >= 0, got {self.drain_s}")
        if not self.late_ms >= 0:
            errors.append(f"late_ms must be >= 0, got {self.late_ms}")
        if self.ttft_deadline_ms < 0:
            errors.append(f"ttft_deadline_ms must be >= 0, got {self.ttft_deadline_ms}")
        if errors:
            raise ValueError("; ".join(errors))


@dataclass
class LoadSummary:
    """What the replay did. ``scheduled`` = ``sent + dropped + not_sent``; every sent or
    dropped request has a line in the run folder, so ``recorded = sent + dropped``."""

    scheduled: int = 0
    sent: int = 0
    ok: int = 0
    rejected: int = 0
    error: int = 0  # errors among the sent requests (cancelled included)
    cancelled: int = 0
    dropped: int = 0  # due while `concurrency` requests were in flight: not sent
    late: int = 0  # sent more than late_ms after their scheduled time
    not_sent: int = 0  # still to come when the replay was stopped
    max_lag_ms: float = 0.0
    wall_s: float = 0.0
    stopped: bool = False
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def recorded(self) -> int:
        return self.ok + self.rejected + self.error + self.dropped

    def line(self) -> str:
        """One line for a terminal."""
        text = (
            f"{self.scheduled} scheduled: {self.sent} sent ({self.ok} ok, {self.rejected} "
            f"rejected, {self.error} error), {self.dropped} dropped at the concurrency cap, "
            f"{self.late} late (max lag {self.max_lag_ms:.0f} ms)"
        )
        if self.not_sent:
            text += f", {self.not_sent} not sent (stopped)"
        return text + f"; {self.wall_s:.1f} s"


def _error_kind(message: str) -> str:
    return message.split(":", 1)[0].strip() or "unknown"


async def replay(
    target: str,
    requests: Sequence[TraceRequest],
    options: LoadOptions,
    writer: RunWriter,
    *,
    stop: asyncio.Event | None = None,
    abort: asyncio.Event | None = None,
    on_result: Callable[[RequestOutcome], None] | None = None,
    client: Client | None = None,
) -> LoadSummary:
    """Replays ``requests`` (sorted by ``arrival_s``) against ``target`` (``HOST:PORT`` for
    gRPC, ``http://HOST:PORT`` for the OpenAI API) and writes one line per request into
    ``writer``. Returns when every sent request has finished, or after a ``stop`` and at most
    ``drain_s`` more (``abort`` cuts the drain short: what is still in flight is cancelled
    and recorded at once). ``on_result`` sees every recorded outcome (a progress bar)."""
    stop = stop or asyncio.Event()
    summary = LoadSummary(scheduled=len(requests))
    loop = asyncio.get_running_loop()
    wall0 = time.time()
    offset = 0.0 if options.t0_unix is None else wall0 - options.t0_unix
    start = loop.time()
    in_flight: set[asyncio.Task[None]] = set()

    def record(outcome: RequestOutcome) -> None:
        writer.request(outcome)
        writer.flush()
        if outcome.outcome == "error":
            kind = _error_kind(outcome.error)
            summary.errors[kind] = summary.errors.get(kind, 0) + 1
        if on_result is not None:
            on_result(outcome)

    async def one(c: Client, req: TraceRequest, rid: str, t_s: float) -> None:
        sent_at = loop.time()
        try:
            outcome = await c.send(req, rid, t_s)
        except asyncio.CancelledError:
            summary.error += 1
            summary.cancelled += 1
            record(
                RequestOutcome(
                    request_id=rid,
                    t_s=t_s,
                    outcome="error",
                    e2e_ms=(loop.time() - sent_at) * 1e3,
                    session_id=req.session_id,
                    slo_class=req.slo_class,
                    error="cancelled: the load generator stopped before the request finished",
                )
            )
            raise
        except Exception as err:  # a client bug must not lose the request: record it
            outcome = RequestOutcome(
                request_id=rid,
                t_s=t_s,
                outcome="error",
                e2e_ms=(loop.time() - sent_at) * 1e3,
                session_id=req.session_id,
                slo_class=req.slo_class,
                error=f"client: {type(err).__name__}: {err}",
            )
        if outcome.outcome == "ok":
            summary.ok += 1
        elif outcome.outcome == "rejected":
            summary.rejected += 1
        else:
            summary.error += 1
        record(outcome)

    async with contextlib.AsyncExitStack() as stack:
        c: Client = (
            client
            if client is not None
            else await stack.enter_async_context(make_client(target, options))
        )
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            for i, req in enumerate(requests):
                due = start + req.arrival_s
                delay = due - loop.time()
                if delay > 0 and not stop.is_set():
                    await asyncio.wait({stop_wait}, timeout=delay)
                if stop.is_set():
                    summary.not_sent = len(requests) - i
                    summary.stopped = True
                    break
                lag_ms = (loop.time() - due) * 1e3
                summary.max_lag_ms = max(summary.max_lag_ms, lag_ms)
                if lag_ms > options.late_ms:
                    summary.late += 1
                rid = f"{options.id_prefix}{req.index}"
                t_s = offset + loop.time() - start
                if len(in_flight) >= options.concurrency:
                    summary.dropped += 1
                    record(
                        RequestOutcome(
                            request_id=rid,
                            t_s=t_s,
                            outcome="error",
                            session_id=req.session_id,
                            slo_class=req.slo_class,
                            error=f"dropped: {len(in_flight)} requests in flight, the load "
                            f"generator's concurrency cap (--concurrency {options.concurrency})",
                        )
                    )
                    continue
                summary.sent += 1
                task = asyncio.create_task(one(c, req, rid, t_s))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            while in_flight and not stop.is_set():
                await asyncio.wait({*in_flight, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if in_flight:
                summary.stopped = True
                abort_wait = asyncio.ensure_future((abort or asyncio.Event()).wait())
                deadline = loop.time() + options.drain_s
                try:
                    while in_flight and not abort_wait.done():
                        left = deadline - loop.time()
                        if left <= 0:
                            break
                        await asyncio.wait(
                            {*in_flight, abort_wait},
                            timeout=left,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                finally:
                    abort_wait.cancel()
        finally:
            stop_wait.cancel()
            pending = set(in_flight)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
    summary.wall_s = time.time() - wall0
    return summary
