"""Direct scrape of the workers' ``/metrics`` (no Prometheus: ``preheat up``).

Each :meth:`DirectScrapeSource.scrape` keeps, per worker, the raw histogram buckets and
load gauges of that scrape in a bounded deque. A windowed percentile is
``histogram_quantile`` over the bucket *deltas* between the newest scrape and the newest
one at or before ``now - window`` (the oldest kept while the window is not yet covered),
summed over workers, exactly what PromQL's ``histogram_quantile(q, sum by (le)
(increase(..._bucket[window])))`` computes. Queue depth is the sum of
``vllm:num_requests_waiting``; KV-cache usage the fullest worker's.

A worker whose latest scrape failed, or whose newest scrape is older than ``stale_after_s``,
makes the snapshot stale (the policy then holds). :func:`compute` is the pure part.

With ``routers`` (their base URLs), the requests the routers hold while no endpoint can take
them (``preheat_router_queue_depth``) count as in flight; and a pool with no worker to
scrape (scaled to zero) but requests held answers fresh, with no latency yet, which wakes
it, as :class:`~preheat.autoscaler.prometheus.PrometheusSource` does with its router
selector.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from preheat.autoscaler.source import SignalQuery, wake_signals
from preheat.core import metric_names as mn
from preheat.core.autoscaling import Signals, SignalValue
from preheat.core.percentiles import Buckets, bucket_deltas, histogram_quantile
from preheat.core.pool import Signal
from preheat.core.promtext import histogram, model_server_stats, parse_samples

__all__ = ["DEFAULT_HISTOGRAMS", "DirectScrapeSource", "Scrape", "compute", "parse_scrape"]

DEFAULT_HISTOGRAMS: Mapping[Signal, str] = {
    Signal.TTFT: mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS,
    Signal.ITL: mn.VLLM_INTER_TOKEN_LATENCY_SECONDS,
    Signal.E2E: mn.VLLM_E2E_REQUEST_LATENCY_SECONDS,
}


@dataclass(frozen=True)
class Scrape:
    """One worker's metrics at time ``t`` (``ok`` False: the scrape failed)."""

    t: float
    ok: bool
    histograms: Mapping[Signal, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    error: str = ""


def parse_scrape(t: float, text: str, names: Mapping[Signal, str] = DEFAULT_HISTOGRAMS) -> Scrape:
    samples = parse_samples(text)
    stats = model_server_stats(samples)
    return Scrape(
        t=t,
        ok=True,
        histograms={sig: histogram(samples, name).buckets for sig, name in names.items()},
        waiting=None if stats.num_waiting is None else float(stats.num_waiting),
        running=None if stats.num_running is None else float(stats.num_running),
        kv_usage=stats.kv_cache_usage,
    )


def _baseline(ok: Sequence[Scrape], start: float) -> Scrape:
    """The newest scrape at or before ``start``; the oldest when none is that old."""
    before = [s for s in ok if s.t <= start]
    return before[-1] if before else ok[0]


def _sum_buckets(parts: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    per_le: dict[float, float] = {}
    for buckets in parts:
        for le, count in buckets:
            per_le[le] = per_le.get(le, 0.0) + count
    return sorted(per_le.items())


def windowed(
    history: Mapping[str, Sequence[Scrape]], signal: Signal, now: float, window_s: float
) -> list[tuple[float, float]]:
    """The pool's bucket deltas of ``signal`` over ``[now - window_s, newest]``."""
    parts: list[list[tuple[float, float]]] = []
    for scrapes in history.values():
        ok = [s for s in scrapes if s.ok]
        if len(ok) < 2:
            continue
        cur: Buckets = ok[-1].histograms.get(signal, ())
        prev: Buckets = _baseline(ok[:-1], now - window_s).histograms.get(signal, ())
        if cur:
            parts.append(bucket_deltas(prev, cur))
    return _sum_buckets(parts)


def compute(
    history: Mapping[str, Sequence[Scrape]],
    query: SignalQuery,
    now: float,
    stale_after_s: float,
    held: float | None = None,
) -> Signals:
    """The snapshot from the scrapes kept (pure). ``held``: requests the routers hold."""
    if not history:
        if held is not None and held > 0:
            return wake_signals(query, now, held)
        return Signals(observed_at=None, stale=True, error="no workers to scrape")
    problems: list[str] = []
    newest: list[float] = []
    for target, scrapes in history.items():
        ok = [s for s in scrapes if s.ok]
        last = scrapes[-1] if scrapes else None
        if last is not None and not last.ok:
            problems.append(f"{target}: {last.error}")
        elif len(ok) < 2:
            problems.append(f"{target}: window not covered yet")
        elif now - ok[-1].t > stale_after_s:
            problems.append(f"{target}: last scrape {now - ok[-1].t:.0f} s ago")
        if ok:
            newest.append(ok[-1].t)
    observed_at = min(newest) if len(newest) == len(history) else None
    if observed_at is None and newest:
        observed_at = min(newest)
    latest = [[s for s in sc if s.ok][-1] for sc in history.values() if any(s.ok for s in sc)]
    waiting = [s.waiting for s in latest if s.waiting is not None]
    running = [s.running for s in latest if s.running is not None]
    kv = [s.kv_usage for s in latest if s.kv_usage is not None]
    in_flight = sum(waiting) + sum(running) if (waiting or running) else None
    if held:
        in_flight = (in_flight or 0.0) + held
    requests: float | None = None
    values: list[SignalValue] = []
    stale = bool(problems)
    for obj in query.objectives:
        if obj.signal.is_latency:
            deltas = windowed(history, obj.signal, now, query.window_s)
            count = deltas[-1][1] if deltas else 0.0
            q = histogram_quantile(obj.percentile / 100.0, deltas) if deltas else None
            short: float | None = None
            if query.short_window_s > 0:
                sd = windowed(history, obj.signal, now, query.short_window_s)
                sq = histogram_quantile(obj.percentile / 100.0, sd) if sd else None
                short = None if sq is None else sq * 1000.0
            requests = count if requests is None else max(requests, count)
            values.append(
                SignalValue(
                    obj.signal,
                    obj.percentile,
                    None if q is None else q * 1000.0,
                    observed_at,
                    stale=stale,
                    short_value=short,
                    samples=count,
                )
            )
        elif obj.signal is Signal.QUEUE_DEPTH:
            v = sum(waiting) if waiting else None
            values.append(
                SignalValue(
                    obj.signal, 0.0, v, observed_at, stale or v is None, samples=len(waiting)
                )
            )
        elif obj.signal is Signal.CONCURRENCY:
            values.append(
                SignalValue(
                    obj.signal,
                    0.0,
                    in_flight,
                    observed_at,
                    stale or in_flight is None,
                    samples=len(running),
                )
            )
        else:
            v = max(kv) if kv else None
            values.append(
                SignalValue(obj.signal, 0.0, v, observed_at, stale or v is None, samples=len(kv))
            )
    return Signals(
        values=tuple(values),
        observed_at=observed_at,
        stale=stale,
        requests=requests,
        in_flight=in_flight,
        error="; ".join(problems),
    )


class DirectScrapeSource:
    """Scrapes ``targets()`` (base URLs, ``http://host:port``) on every :meth:`read`."""

    def __init__(
        self,
        targets: Callable[[], Sequence[str]],
        *,
        session: aiohttp.ClientSession | None = None,
        histograms: Mapping[Signal, str] = DEFAULT_HISTOGRAMS,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 2.0,
        stale_after_s: float = 30.0,
        max_scrapes: int = 512,
        routers: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self._targets = targets
        self._routers = routers
        self.held: float | None = None  # requests the routers held at the last scrape
        self._session = session
        self._own_session = session is None
        self._histograms = histograms
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.stale_after_s = stale_after_s
        self._max = max_scrapes
        self.history: dict[str, deque[Scrape]] = {}

    async def _one(self, session: aiohttp.ClientSession, target: str) -> Scrape:
        try:
            async with session.get(f"{target}/metrics", timeout=self._timeout) as resp:
                resp.raise_for_status()
                text = await resp.text()
            return parse_scrape(self._clock(), text, self._histograms)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return Scrape(self._clock(), ok=False, error=f"{type(exc).__name__}: {exc}".strip())

    async def scrape(self) -> None:
        """One scrape of every target; targets no longer listed are forgotten."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        targets = list(self._targets())
        results = await asyncio.gather(*(self._one(self._session, t) for t in targets))
        for gone in set(self.history) - set(targets):
            del self.history[gone]
        for target, result in zip(targets, results, strict=True):
            self.history.setdefault(target, deque(maxlen=self._max)).append(result)

    async def scrape_routers(self) -> None:
        """``preheat_router_queue_depth`` summed over the routers (None: none answered)."""
        if self._routers is None:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession()
        session = self._session

        async def one(base: str) -> float | None:
            try:
                async with session.get(f"{base}/metrics", timeout=self._timeout) as resp:
                    resp.raise_for_status()
                    samples = parse_samples(await resp.text())
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return None
            return sum(x.value for x in samples if x.name == mn.ROUTER_QUEUE_DEPTH)

        answers = await asyncio.gather(*(one(b) for b in self._routers()))
        got = [a for a in answers if a is not None]
        self.held = sum(got) if got else None

    def snapshot(self, query: SignalQuery, now: float | None = None) -> Signals:
        t = self._clock() if now is None else now
        return compute(self.history, query, t, self.stale_after_s, held=self.held)

    async def read(self, query: SignalQuery) -> Signals:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        await asyncio.gather(self.scrape(), self.scrape_routers())
        return self.snapshot(query)

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = None
