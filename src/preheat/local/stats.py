"""What the live view shows about traffic, from the router's and workers' ``/metrics``.

:class:`LiveStats` keeps a short history of scrapes per target; :meth:`LiveStats.view`
computes, over a window, the client-facing TTFT percentiles (the router's
``preheat_router_ttft_seconds`` histogram, from bucket deltas), the request rate and
outcomes (``preheat_router_requests``) and the prefix-cache hit rate (the workers'
``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``). Pure but for
:func:`scrape_text`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from preheat.core import metric_names as mn
from preheat.core.percentiles import bucket_deltas, histogram_quantile
from preheat.core.promtext import PromTextError, Sample, histogram, parse_samples

QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Point:
    """The counters of one scrape of one target that the view uses."""

    t: float
    ttft: tuple[tuple[float, float], ...] = ()  # router: cumulative buckets (seconds)
    requests: Mapping[str, float] = field(default_factory=dict)  # router: by outcome
    cache_hits: float = 0.0  # worker: prompt tokens served from the prefix cache
    cache_queries: float = 0.0  # worker: prompt tokens looked up


def _counter(samples: Iterable[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name in (name, f"{name}_total")]


def parse_point(t: float, text: str, pool: str | None = None) -> Point:
    """One scrape's counters; with ``pool``, a series labelled with another pool (a router
    in front of several) is left out."""
    samples = parse_samples(text)
    if pool is not None:
        samples = [s for s in samples if s.labels.get(mn.LABEL_POOL, pool) == pool]
    requests: dict[str, float] = {}
    for s in _counter(samples, mn.ROUTER_REQUESTS):
        key = s.labels.get(mn.LABEL_OUTCOME, "")
        requests[key] = requests.get(key, 0.0) + s.value
    return Point(
        t=t,
        ttft=tuple(histogram(samples, mn.ROUTER_TTFT_SECONDS).buckets),
        requests=requests,
        cache_hits=sum(s.value for s in _counter(samples, mn.VLLM_PREFIX_CACHE_HITS)),
        cache_queries=sum(s.value for s in _counter(samples, mn.VLLM_PREFIX_CACHE_QUERIES)),
    )


@dataclass(frozen=True)
class TrafficView:
    window_s: float
    ttft_ms: tuple[float | None, float | None, float | None]  # p50, p95, p99
    requests: float  # finished over the window (router)
    rate: float  # requests/s over the window
    outcomes: Mapping[str, float]  # over the window
    cache_hit_rate: float | None  # 0..1 over the window; None: no prompt tokens looked up


def _base(points: Sequence[Point], start: float) -> Point:
    before = [p for p in points if p.t <= start]
    return before[-1] if before else points[0]


def _delta(cur: float, prev: float) -> float:
    return cur if cur < prev else cur - prev  # a reset (restarted worker) counts from 0


class LiveStats:
    """Scrape history per target (``router`` and worker names), bounded."""

    def __init__(self, window_s: float, keep: int = 256) -> None:
        self.window_s = window_s
        self.keep = keep
        self.history: dict[str, deque[Point]] = {}

    def add(self, target: str, point: Point) -> None:
        self.history.setdefault(target, deque(maxlen=self.keep)).append(point)

    def forget(self, keep: Iterable[str]) -> None:
        for gone in set(self.history) - set(keep):
            del self.history[gone]

    def view(self, now: float) -> TrafficView:
        start = now - self.window_s
        ttft: list[tuple[float, float]] = []
        outcomes: dict[str, float] = {}
        hits = queries = 0.0
        span = 0.0
        for target, points in self.history.items():
            if len(points) < 2:
                continue
            cur, base = points[-1], _base(list(points)[:-1], start)
            if target == "router":
                if cur.ttft:
                    ttft = bucket_deltas(base.ttft, cur.ttft)
                for k, v in cur.requests.items():
                    outcomes[k] = _delta(v, base.requests.get(k, 0.0))
                span = max(span, cur.t - base.t)
            else:
                hits += _delta(cur.cache_hits, base.cache_hits)
                queries += _delta(cur.cache_queries, base.cache_queries)
        qs = tuple(None if not ttft else _ms(histogram_quantile(q, ttft)) for q in QUANTILES)
        total = sum(outcomes.values())
        return TrafficView(
            window_s=self.window_s,
            ttft_ms=(qs[0], qs[1], qs[2]),
            requests=total,
            rate=total / span if span > 0 else 0.0,
            outcomes=outcomes,
            cache_hit_rate=hits / queries if queries > 0 else None,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


async def scrape_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str | None:
    """The text at ``url``, or None when it cannot be read (the view skips it)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, TimeoutError, asyncio.CancelledError) as e:
        if isinstance(e, asyncio.CancelledError):
            raise
        return None


async def scrape_into(
    stats: LiveStats,
    session: aiohttp.ClientSession,
    targets: Mapping[str, str],
    now: float,
    timeout_s: float = 1.0,
    pool: str | None = None,
) -> None:
    """One scrape of every ``{target: metrics URL}``; targets not listed are forgotten.
    ``pool``: only that pool's series (:func:`parse_point`)."""
    names = sorted(targets)
    texts = await asyncio.gather(*(scrape_text(session, targets[n], timeout_s) for n in names))
    for name, text in zip(names, texts, strict=True):
        if text is None:
            continue
        try:
            stats.add(name, parse_point(now, text, pool))
        except PromTextError:
            continue
    stats.forget(names)


__all__ = ["LiveStats", "Point", "TrafficView", "parse_point", "scrape_into"]
