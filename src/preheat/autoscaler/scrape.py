"""Direct scrape of the workers' ``/metrics`` (no Prometheus: ``preheat up``).

Each :meth:`DirectScrapeSource.scrape` keeps, per worker, the raw histogram buckets and
load gauges of that scrape in a bounded deque. A windowed percentile is
``histogram_quantile`` over the bucket *deltas* between the newest scrape and the newest
one at or before ``now - window`` (the oldest kept while the window is not yet covered),
summed over workers, exactly what PromQL's ``histogram_quantile(q, sum by (le)
(increase(..._bucket[window])))`` computes. Queue depth is the sum of
``vllm:num_requests_waiting``; KV-cache usage the fullest worker's.

A worker whose latest scrape failed, or whose newest scrape is older than ``stale_after_s``,
makes the snapshot stale (the policy then holds). A worker scraped only once (just warm) has
no increase yet: it is left out of the windowed figures, as PromQL's ``increase`` leaves out
a series with one sample, and makes the snapshot stale only when no worker has been scraped
twice. :func:`compute` is the pure part.

With ``routers`` (their base URLs), the requests the routers hold while no endpoint can take
them (``preheat_router_queue_depth``) count as in flight; and a pool with no worker to
scrape (scaled to zero) but requests held answers fresh, with no latency yet, which wakes
it, as :class:`~preheat.autoscaler.prometheus.PrometheusSource` does with its router
selector. The routers' demand counters (``preheat_router_arrivals_total``,
``preheat_router_refused_total`` by reason) are kept per router like the workers' scrapes,
and their increase over the window, per second, is the snapshot's
:class:`~preheat.core.autoscaling.Demand` (:func:`router_demand`, pure): refused demand is
demand to the policy.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import aiohttp

from preheat.autoscaler.source import SignalQuery, snapshot, wake_signals, wakes
from preheat.core import metric_names as mn
from preheat.core.autoscaling import Demand, Mix, Signals, SignalValue
from preheat.core.percentiles import Buckets, bucket_deltas, bucket_floor, histogram_quantile
from preheat.core.pool import Signal
from preheat.core.promtext import Sample, histogram, model_server_stats, parse_samples
from preheat.core.traffic.arrivals import dispersion as arrival_dispersion

__all__ = [
    "DEFAULT_HISTOGRAMS",
    "DirectScrapeSource",
    "RouterScrape",
    "Scrape",
    "Served",
    "compute",
    "parse_router",
    "parse_scrape",
    "router_demand",
    "served_mix",
]

DEFAULT_HISTOGRAMS: Mapping[Signal, str] = {
    Signal.TTFT: mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS,
    Signal.ITL: mn.VLLM_INTER_TOKEN_LATENCY_SECONDS,
    Signal.E2E: mn.VLLM_E2E_REQUEST_LATENCY_SECONDS,
}


@dataclass(frozen=True)
class Served:
    """One worker's cumulative request counters (``vllm:request_success_total``,
    ``vllm:prompt_tokens_total``, ``vllm:prefix_cache_hits_total``,
    ``vllm:generation_tokens_total``): their increase over the window is the request mix
    (:class:`~preheat.core.autoscaling.Mix`)."""

    requests: float
    prompt_tokens: float
    cached_tokens: float
    output_tokens: float


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
    served: Served | None = None  # None: the worker exports no request counters


def _served(samples: Sequence[Sample]) -> Served | None:
    sums: dict[str, float] = {}
    for smp in samples:
        if smp.name in _SERVED_NAMES and math.isfinite(smp.value):
            sums[smp.name] = sums.get(smp.name, 0.0) + smp.value
    if _SERVED_NAMES[0] not in sums or _SERVED_NAMES[1] not in sums:
        return None
    return Served(*(sums.get(n, 0.0) for n in _SERVED_NAMES))


_SERVED_NAMES = (
    f"{mn.VLLM_REQUEST_SUCCESS}_total",
    f"{mn.VLLM_PROMPT_TOKENS}_total",
    f"{mn.VLLM_PREFIX_CACHE_HITS}_total",
    f"{mn.VLLM_GENERATION_TOKENS}_total",
)


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
        served=_served(samples),
    )


@dataclass(frozen=True)
class RouterScrape:
    """One router's demand counters at time ``t`` (cumulative; ``ok`` False: the scrape
    failed; ``counted`` False: the router exports no demand counters)."""

    t: float
    ok: bool
    arrivals: float = 0.0
    refused: Mapping[str, float] = field(default_factory=dict)  # reason -> count
    held: float = 0.0  # preheat_router_queue_depth now
    counted: bool = False
    # preheat_router_arrival_burst_total and the arrivals it counts (before the quota's
    # refusals are taken off ``arrivals``); None: the router exports no burst counter
    burst: float | None = None
    burst_arrivals: float = 0.0


def parse_router(t: float, text: str, pool: str | None = None) -> RouterScrape:
    """A router's ``/metrics``: its demand counters (for ``pool`` only when given) and the
    requests it holds. Arrivals are less the requests refused for a tenant's quota
    (``preheat_router_rate_limited_total``): a bigger pool would refuse them too."""
    arrivals_name = mn.ROUTER_ARRIVALS + "_total"
    refused_name = mn.ROUTER_REFUSED + "_total"
    limited_name = mn.ROUTER_RATE_LIMITED + "_total"
    burst_name = mn.ROUTER_ARRIVAL_BURST + "_total"
    samples = parse_samples(
        text,
        only=(arrivals_name, refused_name, limited_name, burst_name, mn.ROUTER_QUEUE_DEPTH),
    )
    arrivals = 0.0
    refused: dict[str, float] = {}
    held = 0.0
    counted = False
    burst: float | None = None
    raw = 0.0  # the arrivals counter as exported (the burst counter's base)
    for x in samples:
        if x.name == mn.ROUTER_QUEUE_DEPTH:
            # a router of several pools labels what each holds (an older one: no label)
            if pool is None or x.labels.get(mn.LABEL_POOL, pool) == pool:
                held += x.value
            continue
        if pool is not None and x.labels.get(mn.LABEL_POOL, "") != pool:
            continue
        if x.name == arrivals_name:
            arrivals += x.value
            raw += x.value
            counted = True
        elif x.name == burst_name:
            burst = (burst or 0.0) + x.value
        elif x.name == limited_name:
            # over a tenant's quota: no pool size serves it, so it is not demand
            arrivals -= x.value
        else:
            reason = x.labels.get(mn.LABEL_REASON, "")
            refused[reason] = refused.get(reason, 0.0) + x.value
    return RouterScrape(t, True, arrivals, refused, held, counted, burst, raw)


class _Timed(Protocol):
    @property
    def t(self) -> float: ...


_T = TypeVar("_T", bound=_Timed)


def _baseline(ok: Sequence[_T], start: float) -> _T:
    """The newest scrape at or before ``start``; the oldest when none is that old."""
    before = [s for s in ok if s.t <= start]
    return before[-1] if before else ok[0]


def _increase(prev: float, cur: float) -> float:
    """A counter's increase (a reset, the router restarted: what it counted since)."""
    return cur - prev if cur >= prev else cur


def router_demand(
    history: Mapping[str, Sequence[RouterScrape]], now: float, window_s: float
) -> Demand | None:
    """The routers' arrivals and refusals per second over ``[now - window_s, newest]``,
    summed over routers (None: no router with two scrapes of its counters). Pure."""
    arrivals = 0.0
    refused: dict[str, float] = {}
    span = 0.0
    burst = counted = 0.0  # the burst counters' increase, and the arrivals they count
    for scrapes in history.values():
        ok = [s for s in scrapes if s.ok and s.counted]
        if len(ok) < 2:
            continue
        cur = ok[-1]
        prev = _baseline(ok[:-1], now - window_s)
        dt = cur.t - prev.t
        if dt <= 0:
            continue
        span = max(span, dt)
        arrivals += _increase(prev.arrivals, cur.arrivals) / dt
        if cur.burst is not None and prev.burst is not None:
            burst += _increase(prev.burst, cur.burst)
            counted += _increase(prev.burst_arrivals, cur.burst_arrivals)
        for reason, count in cur.refused.items():
            rate = _increase(prev.refused.get(reason, 0.0), count) / dt
            refused[reason] = refused.get(reason, 0.0) + rate
    if span <= 0:
        return None
    return Demand(
        arrival_rate=arrivals,
        refused_rate=sum(refused.values()),
        window_s=span,
        by_reason=tuple(sorted((r, v) for r, v in refused.items() if v > 0)),
        arrival_dispersion=arrival_dispersion(burst, counted),
    )


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


def served_mix(history: Mapping[str, Sequence[Scrape]], now: float, window_s: float) -> Mix | None:
    """The window's request mix from the workers' counters (None: no worker exports them,
    or none finished a request over the window)."""
    total = [0.0, 0.0, 0.0, 0.0]
    seen = False
    for scrapes in history.values():
        ok = [s for s in scrapes if s.ok and s.served is not None]
        if len(ok) < 2:
            continue
        cur, prev = ok[-1].served, _baseline(ok[:-1], now - window_s).served
        assert cur is not None
        assert prev is not None
        pairs = zip(
            (prev.requests, prev.prompt_tokens, prev.cached_tokens, prev.output_tokens),
            (cur.requests, cur.prompt_tokens, cur.cached_tokens, cur.output_tokens),
            strict=True,
        )
        for i, (a, b) in enumerate(pairs):
            total[i] += _increase(a, b)
        seen = True
    n = total[0]
    if not seen or n <= 0:
        return None
    return Mix(n, total[1] / n, min(total[2], total[1]) / n, total[3] / n)


def compute(
    history: Mapping[str, Sequence[Scrape]],
    query: SignalQuery,
    now: float,
    stale_after_s: float,
    held: float | None = None,
    demand: Demand | None = None,
) -> Signals:
    """The snapshot from the scrapes kept (pure). ``held``: requests the routers hold;
    ``demand``: what they saw arrive and refused over the window."""
    if not history:
        if wakes(held, demand):
            return wake_signals(query, now, held or 0.0, demand)
        return Signals(observed_at=None, stale=True, error="no workers to scrape")
    problems: list[str] = []
    newest: list[float] = []
    # A worker scraped once (just warm) has no increase yet and is left out of the window's
    # figures, as PromQL's increase() leaves out a series with one sample; only a pool where
    # no worker has two scrapes has no window at all.
    oks = {target: [s for s in scrapes if s.ok] for target, scrapes in history.items()}
    covered = any(len(ok) >= 2 for ok in oks.values())
    for target, scrapes in history.items():
        ok = oks[target]
        last = scrapes[-1] if scrapes else None
        if last is not None and not last.ok:
            problems.append(f"{target}: {last.error}")
        elif len(ok) < 2 and not covered:
            problems.append(f"{target}: window not covered yet")
        elif now - ok[-1].t > stale_after_s:
            problems.append(f"{target}: last scrape {now - ok[-1].t:.0f} s ago")
        if ok:
            newest.append(ok[-1].t)
    observed_at = min(newest) if len(newest) == len(history) else None
    if observed_at is None and newest:
        observed_at = min(newest)
    latest = [ok[-1] for ok in oks.values() if ok]
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
            floor = None if q is None else bucket_floor(q, [le for le, _ in deltas])
            values.append(
                SignalValue(
                    obj.signal,
                    obj.percentile,
                    None if q is None else q * 1000.0,
                    observed_at,
                    stale=stale,
                    short_value=short,
                    samples=count,
                    floor=None if floor is None else floor * 1000.0,
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
    return snapshot(
        values,
        observed_at=observed_at,
        stale=stale,
        requests=requests,
        in_flight=in_flight,
        problems=problems,
        demand=demand,
        mix=served_mix(history, now, query.window_s),
    )


class DirectScrapeSource:
    """Scrapes ``targets()`` (base URLs, ``http://host:port``) on every :meth:`read`, and
    ``routers()`` for what they hold and their demand counters (``pool``: that pool's
    series only; None: every pool the routers serve)."""

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
        pool: str | None = None,
    ) -> None:
        self._targets = targets
        self._routers = routers
        self._pool = pool
        self.held: float | None = None  # requests the routers held at the last scrape
        self.router_history: dict[str, deque[RouterScrape]] = {}
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
        """``preheat_router_queue_depth`` summed over the routers (None: none answered),
        and each router's demand counters into ``router_history``."""
        if self._routers is None:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession()
        session = self._session

        async def one(base: str) -> RouterScrape:
            try:
                async with session.get(f"{base}/metrics", timeout=self._timeout) as resp:
                    resp.raise_for_status()
                    return parse_router(self._clock(), await resp.text(), self._pool)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return RouterScrape(self._clock(), ok=False)

        bases = list(self._routers())
        answers = await asyncio.gather(*(one(b) for b in bases))
        for gone in set(self.router_history) - set(bases):
            del self.router_history[gone]
        for base, answer in zip(bases, answers, strict=True):
            self.router_history.setdefault(base, deque(maxlen=self._max)).append(answer)
        got = [a.held for a in answers if a.ok]
        self.held = sum(got) if got else None

    def snapshot(self, query: SignalQuery, now: float | None = None) -> Signals:
        t = self._clock() if now is None else now
        demand = router_demand(self.router_history, t, query.window_s)
        return compute(self.history, query, t, self.stale_after_s, held=self.held, demand=demand)

    async def read(self, query: SignalQuery) -> Signals:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        await asyncio.gather(self.scrape(), self.scrape_routers())
        return self.snapshot(query)

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = None
