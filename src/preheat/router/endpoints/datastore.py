"""The router's view of its pool: one :class:`EndpointStore` fed by a discovery source.

Per endpoint the store keeps (each in its own background task, all owned by the store's
``TaskGroup`` inside :meth:`EndpointStore.run`):

* lifecycle and load from ``WorkerControl.Status``, polled every ``refresh_interval_s``; this
  is also the health ping, and its round trip feeds the RTT EWMA;
* engine metrics from the endpoint's ``/metrics`` (when discovery gives a ``metrics_url``),
  parsed by :mod:`preheat.core.promtext` with configurable names;
* the set of cached prefix blocks from a ``WatchCache`` stream (snapshot, then deltas;
  resubscribed with backoff; ``None`` while unknown);
* this router's own accounting: requests in flight before their first token, an EWMA of
  observed TTFT, RTT samples from time-to-first-byte minus server time.

:meth:`EndpointStore.snapshot` returns the routable endpoints only: discovery says ready and
role ``active``, the last ``Status`` succeeded and said ``active``. ``metrics_at`` is when
the load figures were last refreshed, on the store's clock: when refreshes stop, it stays
old and the scheduler counts the endpoint as saturated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import grpc

from preheat.core.promtext import ModelServerMetricNames
from preheat.core.routing import calibration
from preheat.core.routing.history import PrefixHistory
from preheat.core.routing.types import Endpoint, StepClock
from preheat.core.validation import ModelLimits
from preheat.router.endpoints.cachewatch import watch_cache
from preheat.router.endpoints.discovery import DiscoveredEndpoint, DiscoverySource
from preheat.router.endpoints.entry import EndpointEntry
from preheat.router.endpoints.scraper import scrape_loop
from preheat.router.endpoints.statuspoll import status_loop
from preheat.wire.priority import STANDARD
from preheat.wire.tokens import auth_metadata

UNKNOWN_MODEL_LEN = 1 << 30  # a worker that reports no context window: the worker checks

log = logging.getLogger(__name__)

__all__ = ["EndpointInfoView", "EndpointStore", "PrefixHistoryLike"]


class PrefixHistoryLike(Protocol):
    """What the store needs of ``preheat.core.routing.history.PrefixHistory``."""

    def match(self, block_hashes: Sequence[int], now: float) -> dict[str, int]: ...

    def record(self, endpoint_id: str, block_hashes: Sequence[int], now: float) -> None: ...

    def forget(self, endpoint_id: str) -> None: ...


# gRPC's reconnect backoff grows to 120 s by default: a worker that restarts would stay
# unreachable (and unroutable) that long. Endpoints are few and close, so retry often.
_CHANNEL_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


@dataclass(frozen=True)
class EndpointInfoView:
    """Everything the store knows of one endpoint, routable or not (``/debug``, logs)."""

    id: str
    address: str
    zone: str
    region: str
    lifecycle: str  # "active", "standby", ... from the last Status; "unknown" before one
    healthy: bool  # the last Status answered
    routable: bool
    discovered_ready: bool
    role: str
    last_error: str  # "" when the last Status (and scrape, watch) succeeded
    status_at: float | None  # store clock
    scrape_at: float | None
    metrics_url: str
    in_flight: int
    rtt_ms: float | None
    rtt_injected: bool
    observed_ttft_ms: float | None
    cached_blocks: int | None  # None: unknown (no WatchCache snapshot yet)
    consecutive_failures: int


class EndpointStore:
    def __init__(
        self,
        source: DiscoverySource,
        *,
        pool: str = "",
        metric_names: ModelServerMetricNames | None = None,
        refresh_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        watch_cache: bool = True,
        rtt_alpha: float = 0.2,
        status_timeout_s: float | None = None,
        region_rtt_ms: Mapping[str, Mapping[str, float]] | None = None,
        history: PrefixHistoryLike | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        watch_token: str = "",
    ) -> None:
        if refresh_interval_s <= 0:
            raise ValueError(f"refresh_interval_s must be > 0, got {refresh_interval_s}")
        self.source = source
        self._openai_said: bool | None = None  # the workers' last word (serves_openai)
        self.pool = pool
        self.metric_names = metric_names if metric_names is not None else ModelServerMetricNames()
        self.refresh_interval_s = refresh_interval_s
        self.clock = clock
        self.watch_cache = watch_cache
        self.rtt_alpha = rtt_alpha
        self.status_timeout_s = (
            status_timeout_s if status_timeout_s is not None else max(1.0, 2 * refresh_interval_s)
        )
        self._region_rtt_ms: Mapping[str, Mapping[str, float]] = {
            a: dict(row) for a, row in (region_rtt_ms or {}).items()
        }
        self.history: PrefixHistoryLike = history if history is not None else PrefixHistory()
        self._channel_options = [*_CHANNEL_DEFAULTS, *channel_options]
        self._watch_metadata = auth_metadata(watch_token)  # the workers' cache token
        self._entries: dict[str, EndpointEntry] = {}
        self._order: tuple[str, ...] = ()
        self._snapshot: tuple[Endpoint, ...] | None = None
        self._limits: tuple[ModelLimits | None] | None = None  # cached model_limits()
        self._changed = asyncio.Event()
        self._tg: asyncio.TaskGroup | None = None
        self._http: aiohttp.ClientSession | None = None
        self._pending_rtt: dict[str, float] = {}
        # endpoint id -> its engine's step clock, from the tokens streamed from it
        # (RoutingContext.step_clocks; entries change between decisions only)
        self._clocks: dict[str, StepClock] = {}

    # --- running --------------------------------------------------------------------------
    async def run(self) -> None:
        """Runs discovery and every endpoint's refresh tasks until cancelled."""
        if self._tg is not None:
            raise RuntimeError("EndpointStore.run is already running")
        try:
            async with aiohttp.ClientSession() as http, asyncio.TaskGroup() as tg:
                self._http = http
                self._tg = tg
                async for endpoints in self.source.changes():
                    self._apply(endpoints)
                # a source that ends keeps its last set: wait to be cancelled
                await asyncio.Event().wait()
        finally:
            self._tg = None
            entries = list(self._entries.values())
            self._entries.clear()
            self._clocks.clear()
            self._order = ()
            self._invalidate()
            for entry in entries:
                entry.cancel_tasks()
            for entry in entries:
                await entry.close()
            self._http = None

    def _apply(self, endpoints: Iterable[DiscoveredEndpoint]) -> None:
        assert self._tg is not None
        wanted = {e.key: e for e in endpoints}
        for key in [k for k in self._entries if k not in wanted]:
            gone = self._entries.pop(key)
            self._clocks.pop(key, None)
            log.info("endpoint removed", extra={"pool": self.pool, "endpoint": key})
            gone.cancel_tasks()
            self._tg.create_task(gone.close())
            with contextlib.suppress(Exception):
                self.history.forget(key)
        for key, disc in wanted.items():
            entry = self._entries.get(key)
            if entry is not None and entry.discovered.address == disc.address:
                if entry.discovered != disc:
                    restart_scrape = entry.discovered.metrics_url != disc.metrics_url
                    entry.discovered = disc
                    if restart_scrape:
                        self._start_scrape(entry)
                    entry.touch()
                continue
            if entry is not None:  # same id, new address: a new endpoint
                self._clocks.pop(key, None)
                entry.cancel_tasks()
                self._tg.create_task(entry.close())
            self._add(disc)
        self._order = tuple(wanted)
        self._invalidate()

    def _add(self, disc: DiscoveredEndpoint) -> None:
        assert self._tg is not None
        channel = grpc.aio.insecure_channel(disc.address, options=self._channel_options)
        entry = EndpointEntry(disc, channel, rtt_alpha=self.rtt_alpha, on_change=self._invalidate)
        if disc.key in self._pending_rtt:
            entry.rtt.inject(self._pending_rtt[disc.key])
        self._entries[disc.key] = entry
        log.info(
            "endpoint added",
            extra={"pool": self.pool, "endpoint": disc.key, "address": disc.address},
        )
        entry.tasks["status"] = self._tg.create_task(
            status_loop(
                entry,
                interval_s=self.refresh_interval_s,
                timeout_s=self.status_timeout_s,
                clock=self.clock,
            )
        )
        if self.watch_cache:
            entry.tasks["watch"] = self._tg.create_task(
                watch_cache(entry, metadata=self._watch_metadata)
            )
        self._start_scrape(entry)

    def _start_scrape(self, entry: EndpointEntry) -> None:
        assert self._tg is not None
        assert self._http is not None
        old = entry.tasks.pop("scrape", None)
        if old is not None:
            old.cancel()
        entry.scrape = None
        if entry.discovered.metrics_url:
            entry.tasks["scrape"] = self._tg.create_task(
                scrape_loop(
                    entry,
                    self._http,
                    self.metric_names,
                    interval_s=self.refresh_interval_s,
                    timeout_s=self.status_timeout_s,
                    clock=self.clock,
                )
            )

    def _invalidate(self) -> None:
        self._snapshot = None
        self._limits = None
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_ready(self, min_endpoints: int = 1, timeout_s: float = 30.0) -> None:
        """Waits until at least ``min_endpoints`` are routable; TimeoutError says which are
        known and why they are not routable."""
        try:
            async with asyncio.timeout(timeout_s):
                while len(self.snapshot()) < min_endpoints:
                    await self._changed.wait()
        except TimeoutError:
            known = ", ".join(
                f"{v.id}({v.lifecycle}, healthy={v.healthy}"
                + (f", error={v.last_error}" if v.last_error else "")
                + ")"
                for v in self.all_endpoints()
            )
            raise TimeoutError(
                f"pool {self.pool!r}: {len(self.snapshot())} of {min_endpoints} endpoints "
                f"routable after {timeout_s:g}s; known: {known or 'none'}"
            ) from None

    async def wait_changed(self, timeout_s: float) -> None:
        """Returns when the routable set may have changed, or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self._changed.wait()

    # --- views ----------------------------------------------------------------------------
    def snapshot(self) -> tuple[Endpoint, ...]:
        """The routable endpoints, in discovery order."""
        snap = self._snapshot
        if snap is None:
            snap = tuple(
                e.endpoint(self.pool)
                for k in self._order
                if (e := self._entries.get(k)) is not None and e.routable
            )
            self._snapshot = snap
        return snap

    def model_limits(self) -> ModelLimits | None:
        """The pool's model and context window as its routable workers report them (the
        smallest window when they differ); None until one has answered Status."""
        if self._limits is None:
            self._limits = (self._model_limits(),)
        return self._limits[0]

    def _model_limits(self) -> ModelLimits | None:
        statuses = [
            e.status
            for k in self._order
            if (e := self._entries.get(k)) is not None and e.routable and e.status is not None
        ]
        named = [st for st in statuses if st.model]
        if not named:
            return None
        windows = [st.max_model_len for st in named if st.max_model_len > 0]
        return ModelLimits(
            model=named[0].model,
            max_model_len=min(windows) if windows else UNKNOWN_MODEL_LEN,
        )

    def all_endpoints(self) -> tuple[EndpointInfoView, ...]:
        out = []
        for key in self._order:
            e = self._entries.get(key)
            if e is None:
                continue
            st = e.status
            out.append(
                EndpointInfoView(
                    id=key,
                    address=e.discovered.address,
                    zone=e.zone,
                    region=e.region,
                    lifecycle=e.lifecycle,
                    healthy=e.healthy,
                    routable=e.routable,
                    discovered_ready=e.discovered.ready,
                    role=e.discovered.role,
                    last_error=e.last_error,
                    status_at=e.status_at if st is not None else None,
                    scrape_at=e.scrape_at,
                    metrics_url=e.discovered.metrics_url,
                    in_flight=e.in_flight,
                    rtt_ms=e.rtt.value_ms,
                    rtt_injected=e.rtt.injected_ms is not None,
                    observed_ttft_ms=e.observed_ttft.value,
                    cached_blocks=None if e.cached is None else len(e.cached),
                    consecutive_failures=e.consecutive_failures,
                )
            )
        return tuple(out)

    def region_rtt_ms(self) -> Mapping[str, Mapping[str, float]]:
        return self._region_rtt_ms

    def endpoint(self, endpoint_id: str) -> Endpoint | None:
        """One endpoint's current view, routable or not (None: unknown id)."""
        e = self._entries.get(endpoint_id)
        return None if e is None else e.endpoint(self.pool)

    # --- accounting from the data path ----------------------------------------------------
    def serves_openai(self) -> bool | None:
        """Whether the pool's workers serve OpenAI HTTP (``WorkerStatus.openai_port``): the
        routable ones' word, else (none routable) that of any that answered Status, else
        what they said last (a pool scaled to zero keeps its kind); None while discovered
        workers have not answered yet and none ever did; False with no worker ever known."""
        snap = self.snapshot()
        if snap:
            said: bool | None = any(e.openai_port for e in snap)
        else:
            answered = [e.status for e in self._entries.values() if e.status is not None]
            if answered:
                said = any(st.openai_port > 0 for st in answered)
            elif self._openai_said is not None or not self._entries:
                return bool(self._openai_said)
            else:
                return None
        self._openai_said = said
        return said

    def request_started(self, endpoint_id: str, priority: int = STANDARD, tokens: int = 0) -> None:
        """A request was sent to the endpoint at engine ``priority`` (lower first) with
        ``tokens`` prompt tokens to prefill there (not predicted cached): in flight until its
        first token, failure or end (pass the same priority and tokens to those)."""
        e = self._entries.get(endpoint_id)
        if e is not None:
            e.started(priority, tokens)
            e.touch()

    def first_token(
        self,
        endpoint_id: str,
        ttft_s: float,
        server_ttft_ms: float,
        priority: int = STANDARD,
        tokens: int = 0,
    ) -> None:
        """The first token arrived ``ttft_s`` after the request was sent; the worker spent
        ``server_ttft_ms`` of that (queue + prefill; 0 if unknown)."""
        e = self._entries.get(endpoint_id)
        if e is None:
            return
        e.no_longer_waiting(priority, tokens)
        e.decoding += 1
        observed_ms = ttft_s * 1000.0
        if server_ttft_ms > 0:
            e.observed_ttft.update(server_ttft_ms)
            e.rtt.sample(observed_ms - server_ttft_ms)
        else:
            e.observed_ttft.update(observed_ms)
        e.touch()

    def prediction_miss(
        self, endpoint_id: str, predicted_ms: float, observed_ms: float, half_life_s: float
    ) -> None:
        """A request sent to the endpoint with a predicted TTFT of ``predicted_ms`` got its
        first token ``observed_ms`` after it was sent: the endpoint's TTFT miss, which the
        scheduler adds to its prediction against a deadline (``core.routing.calibration``;
        ``half_life_s``: the scheduler's ``ttft_error_half_life_s``, 0: off)."""
        e = self._entries.get(endpoint_id)
        if e is None:
            return
        kept = (e.ttft_error_ms, e.ttft_error_at)
        now_kept = calibration.observe(*kept, predicted_ms, observed_ms, self.clock(), half_life_s)
        if now_kept != kept:  # off (half-life 0) keeps nothing: no view to rebuild
            e.ttft_error_ms, e.ttft_error_at = now_kept
            e.touch()

    def ttft_misses(self, half_life_s: float) -> dict[str, float]:
        """Endpoint id -> what admission adds to its predicted TTFT now (ms; the endpoints
        with a first token since they joined; ``core.routing.calibration.late_ms``)."""
        now = self.clock()
        return {
            key: calibration.late_ms(e.ttft_error_ms, e.ttft_error_at, now, half_life_s)
            for key, e in self._entries.items()
            if e.ttft_error_ms is not None
        }

    def token(self, endpoint_id: str, itl_ms: float | None = None) -> None:
        """A token frame arrived from the endpoint now; ``itl_ms``: its stream's gap to its
        previous frame per token (None: the stream's first token). Keeps the endpoint's step
        clock (:mod:`.stepclock`); touches no snapshot (a clock is not part of one)."""
        e = self._entries.get(endpoint_id)
        if e is not None and e.steps.token(self.clock(), itl_ms, e.rtt.value_ms):
            self._publish_clock(endpoint_id, e)

    def upstream_lag(self, endpoint_id: str, lag_ms: float) -> None:
        """A request's TTFT as this router saw it less the worker's own (ms): the trip to the
        engine and back that the step clock's phase is shifted by."""
        e = self._entries.get(endpoint_id)
        if e is not None and lag_ms >= 0:
            e.steps.lag_sample(lag_ms)
            self._publish_clock(endpoint_id, e)

    def step_error(self, endpoint_id: str, error_ms: float) -> None:
        """How far the endpoint's step clock missed one request's wait for the step in
        progress (the worker's ``queue_ms`` less the prediction, ms)."""
        e = self._entries.get(endpoint_id)
        if e is not None and error_ms == error_ms:  # not NaN
            e.steps.error_sample(error_ms)
            self._publish_clock(endpoint_id, e)

    def _publish_clock(self, endpoint_id: str, e: EndpointEntry) -> None:
        clock = e.steps.clock()
        if clock is not None:
            self._clocks[endpoint_id] = clock

    def step_clocks(self) -> Mapping[str, StepClock]:
        """Endpoint id -> its engine's step clock (read-only; the live map)."""
        return self._clocks

    def request_done(self, endpoint_id: str) -> None:
        """A request that had its first token ended (finished, failed or cancelled): one
        fewer decoding there (the ``decode-interference`` scorer's neighbours)."""
        e = self._entries.get(endpoint_id)
        if e is not None:
            e.decoding = max(0, e.decoding - 1)
            e.touch()

    def request_failed(self, endpoint_id: str, priority: int = STANDARD, tokens: int = 0) -> None:
        """A request failed before its first token: one fewer in flight, and the endpoint's
        Status is asked again at once (a dead endpoint drops out within one round trip)."""
        e = self._entries.get(endpoint_id)
        if e is None:
            return
        e.no_longer_waiting(priority, tokens)
        e.failures += 1
        e.kick.set()
        e.touch()

    def request_finished(self, endpoint_id: str, priority: int = STANDARD, tokens: int = 0) -> None:
        """A request ended without a first token and without an endpoint failure (a client
        cancel, a rejection by validation): one fewer in flight."""
        e = self._entries.get(endpoint_id)
        if e is not None:
            e.no_longer_waiting(priority, tokens)
            e.touch()

    def channel(self, endpoint_id: str) -> grpc.aio.Channel:
        """The endpoint's shared channel (owned by the store: do not close it). KeyError for
        an endpoint discovery no longer lists."""
        e = self._entries.get(endpoint_id)
        if e is None:
            raise KeyError(f"unknown endpoint {endpoint_id!r}")
        return e.channel

    def inject_rtt(self, endpoint_id: str, rtt_ms: float | None) -> None:
        """Fixes an endpoint's RTT (overrides measurement; None: measure again). May be called
        before discovery has found the endpoint."""
        if rtt_ms is None:
            self._pending_rtt.pop(endpoint_id, None)
        else:
            self._pending_rtt[endpoint_id] = rtt_ms
        e = self._entries.get(endpoint_id)
        if e is not None:
            e.rtt.inject(rtt_ms)
            e.touch()
