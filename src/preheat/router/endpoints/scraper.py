"""Scrapes an endpoint's Prometheus ``/metrics`` for the engine's load gauges."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from preheat.core.promtext import ModelServerMetricNames, PromTextError, parse_model_server_stats
from preheat.router.endpoints.entry import EndpointEntry


async def scrape_once(
    entry: EndpointEntry,
    http: aiohttp.ClientSession,
    names: ModelServerMetricNames,
    *,
    timeout_s: float,
    clock: Callable[[], float],
) -> bool:
    url = entry.discovered.metrics_url
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise aiohttp.ClientError(f"HTTP {resp.status}")
            text = await resp.text()
        stats = parse_model_server_stats(text, names)
    except (aiohttp.ClientError, TimeoutError, PromTextError, UnicodeDecodeError) as e:
        entry.scrape_error = f"scrape {url}: {type(e).__name__}: {e}"
        entry.touch()
        return False
    entry.scrape = stats
    entry.scrape_at = clock()
    entry.scrape_error = ""
    entry.touch()
    return True


async def scrape_loop(
    entry: EndpointEntry,
    http: aiohttp.ClientSession,
    names: ModelServerMetricNames,
    *,
    interval_s: float,
    timeout_s: float,
    clock: Callable[[], float],
) -> None:
    while True:
        await scrape_once(entry, http, names, timeout_s=timeout_s, clock=clock)
        await asyncio.sleep(interval_s)
