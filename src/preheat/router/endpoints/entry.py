"""One endpoint's mutable state inside the store (the store's tasks write it; views read)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import grpc

from preheat.core.promtext import ModelServerStats
from preheat.core.routing.types import Endpoint
from preheat.proto.preheat.v1 import worker_pb2
from preheat.router.endpoints.discovery import DiscoveredEndpoint
from preheat.router.endpoints.rtt import Ewma, RttEstimator
from preheat.router.endpoints.stepclock import StepClockEstimator

ACTIVE = worker_pb2.LIFECYCLE_STATE_ACTIVE


def lifecycle_name(state: int) -> str:
    try:
        name: str = worker_pb2.LifecycleState.Name(state)
    except ValueError:
        return f"state-{state}"
    return name.removeprefix("LIFECYCLE_STATE_").lower()


class EndpointEntry:
    def __init__(
        self,
        discovered: DiscoveredEndpoint,
        channel: grpc.aio.Channel,
        *,
        rtt_alpha: float,
        on_change: Callable[[], None],
    ) -> None:
        self.discovered = discovered
        self.channel = channel
        self.rtt = RttEstimator(rtt_alpha)
        self.observed_ttft = Ewma(rtt_alpha)
        # how much later than predicted its first tokens came (core/routing/calibration.py):
        # the EWMA (ms) and when it last changed (store clock); None: not measured
        self.ttft_error_ms: float | None = None
        self.ttft_error_at: float | None = None
        self.steps = StepClockEstimator(rtt_alpha)  # its engine's step rhythm, from tokens
        self.in_flight = 0
        # in_flight by the requests' engine priority (the queue term's "behind us")
        self.in_flight_by_priority: dict[int, int] = {}
        # their prompt tokens not predicted cached here (the queue term prices them)
        self.in_flight_tokens = 0
        self.decoding = 0  # requests streaming from it past their first token
        self.failures = 0  # request failures reported by the data path
        self.consecutive_failures = 0  # Status calls failed in a row
        self.kick = asyncio.Event()  # set: poll Status now
        self.tasks: dict[str, asyncio.Task[None]] = {}
        # from Status
        self.status: worker_pb2.WorkerStatus | None = None
        self.status_at: float | None = None
        self.healthy = False
        self.status_error = ""
        # from /metrics
        self.scrape: ModelServerStats | None = None
        self.scrape_at: float | None = None
        self.scrape_error = ""
        # from WatchCache
        self.cached: set[int] | None = None
        self.watch_error = ""
        self._on_change = on_change
        self._endpoint: Endpoint | None = None
        self._endpoint_pool = ""

    @property
    def key(self) -> str:
        return self.discovered.key

    def touch(self) -> None:
        self._endpoint = None
        self._on_change()

    def cache_changed(self) -> None:
        self.touch()

    @property
    def lifecycle(self) -> str:
        return "unknown" if self.status is None else lifecycle_name(self.status.state)

    @property
    def zone(self) -> str:
        return self.discovered.zone or (self.status.zone if self.status is not None else "")

    @property
    def region(self) -> str:
        return self.discovered.region or (self.status.region if self.status is not None else "")

    @property
    def routable(self) -> bool:
        return (
            self.discovered.routable
            and self.healthy
            and self.status is not None
            and self.status.state == ACTIVE
        )

    @property
    def last_error(self) -> str:
        return "; ".join(e for e in (self.status_error, self.scrape_error, self.watch_error) if e)

    def endpoint(self, pool: str) -> Endpoint:
        ep = self._endpoint
        if ep is not None and self._endpoint_pool == pool:
            return ep
        st = self.status
        num_running = st.num_running if st is not None else 0
        num_waiting = st.num_waiting if st is not None else 0
        kv = st.kv_cache_usage if st is not None else 0.0
        metrics_at = self.status_at if st is not None else None
        sc = self.scrape
        if sc is not None and self.scrape_at is not None and not self.scrape_error:
            # while scraping works its gauges win (the engine's own figures); a gauge it lacks
            # comes from Status. When scraping fails, Status's figures (and time) are used.
            num_running = sc.num_running if sc.num_running is not None else num_running
            num_waiting = sc.num_waiting if sc.num_waiting is not None else num_waiting
            kv = sc.kv_cache_usage if sc.kv_cache_usage is not None else kv
            metrics_at = self.scrape_at
        ep = Endpoint(
            id=self.key,
            address=self.discovered.address,
            pool=pool,
            zone=self.zone,
            region=self.region,
            num_running=num_running,
            num_waiting=num_waiting,
            kv_cache_usage=kv,
            max_num_seqs=st.max_num_seqs if st is not None and st.max_num_seqs else 256,
            block_size=st.block_size if st is not None and st.block_size else 16,
            in_flight=self.in_flight,
            in_flight_by_priority=tuple(sorted(self.in_flight_by_priority.items())),
            in_flight_tokens=self.in_flight_tokens,
            waiting_by_priority=_waiting_by_priority(st),
            decoding=self.decoding,
            rtt_ms=self.rtt.value_ms,
            metrics_at=metrics_at,
            cached_blocks=self.cached,  # the live set, read-only to the scheduler
            observed_ttft_ms=self.observed_ttft.value,
            ttft_error_ms=self.ttft_error_ms,
            ttft_error_at=self.ttft_error_at,
            tokenizer=st.tokenizer if st is not None else "",
            openai_port=st.openai_port if st is not None else 0,
        )
        self._endpoint, self._endpoint_pool = ep, pool
        return ep

    def started(self, priority: int, tokens: int = 0) -> None:
        """One more request sent here at ``priority`` without a first token yet, with
        ``tokens`` prompt tokens to prefill (not predicted cached here)."""
        self.in_flight += 1
        self.in_flight_tokens += max(0, tokens)
        self.in_flight_by_priority[priority] = self.in_flight_by_priority.get(priority, 0) + 1

    def no_longer_waiting(self, priority: int, tokens: int = 0) -> None:
        """A request sent at ``priority`` with ``tokens`` (as :meth:`started`) got its first
        token, failed or ended."""
        self.in_flight = max(0, self.in_flight - 1)
        self.in_flight_tokens = (
            max(0, self.in_flight_tokens - max(0, tokens)) if self.in_flight else 0
        )
        left = self.in_flight_by_priority.get(priority, 0) - 1
        if left > 0:
            self.in_flight_by_priority[priority] = left
        else:
            self.in_flight_by_priority.pop(priority, None)

    def cancel_tasks(self) -> None:
        for task in self.tasks.values():
            task.cancel()

    async def close(self) -> None:
        """Waits for the endpoint's tasks to end (after :meth:`cancel_tasks`), then closes
        its channel."""
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.channel.close()


def _waiting_by_priority(
    st: worker_pb2.WorkerStatus | None,
) -> tuple[tuple[int, int], ...] | None:
    """The engine's waiting requests by priority from Status (None: it says none: an older
    worker, or an engine that does not count them, as vLLM)."""
    if st is None or not st.waiting_by_priority:
        return None
    return tuple(sorted((int(p), int(n)) for p, n in st.waiting_by_priority.items()))
