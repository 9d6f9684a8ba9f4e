"""The pool's signals from Prometheus (PromQL through prometheus-api-client).

The same meanings as :class:`~preheat.autoscaler.scrape.DirectScrapeSource`, computed by
Prometheus from the workers' series that ``selector`` picks (the inside of a PromQL label
matcher, e.g. ``job="preheat-workers",namespace="serving"``; ``""``: every series):

====================  ======================================================================
latency objective     ``histogram_quantile(q, sum by (le) (rate(<hist>_bucket{sel}[w])))``
                      in ms; ``NaN`` (no request finished in the window) -> ``None``
  samples / requests  ``sum(increase(<hist>_count{sel}[w]))``
queueDepth            ``sum(vllm:num_requests_waiting{sel})``
concurrency           in flight (below)
kvCacheUsage          ``max(vllm:kv_cache_usage_perc{sel})`` (the fullest worker)
in flight             ``sum(vllm:num_requests_running{sel})`` + waiting
freshness             ``timestamp(vllm:num_requests_waiting{sel})`` (per worker) and
                      ``up{sel} == 0`` (a target Prometheus cannot scrape)
held at the router    ``sum(preheat_router_queue_depth{router_sel})`` when ``router_selector``
                      is given: added to in flight, and the only signal at zero replicas
request mix           ``sum(increase(<counter>_total{sel}[w]))`` of ``vllm:request_success``,
                      ``vllm:prompt_tokens``, ``vllm:prefix_cache_hits`` and
                      ``vllm:generation_tokens``: per finished request, the capacity
                      estimate's mix (none finished, or no series: no mix)
demand (routers)      ``sum(rate(preheat_router_arrivals_total{router_sel}[w]))`` less
                      ``sum(rate(preheat_router_rate_limited_total{router_sel}[w]))``
                      (over a tenant's quota: no pool size serves them), and
                      ``sum by (reason) (rate(preheat_router_refused_total{router_sel}[w]))``
                      when ``router_selector`` is given: refused demand is demand to the
                      policy (no series: no demand figures, as without a router selector);
                      and the arrivals' dispersion, ``sum(increase(
                      preheat_router_arrival_burst_total[w])) / (2 * sum(increase(
                      preheat_router_arrivals_total[w])))`` (``core.traffic.arrivals``)
====================  ======================================================================

Scale from zero: a pool at zero replicas has no worker series, so without
``router_selector`` the source can only answer stale (and the policy holds at zero). With
it, requests the router holds while no worker exists make a fresh answer with no latency
yet and ``in_flight`` = the held requests, which wakes the pool.

Every query of one :meth:`PrometheusSource.read` is evaluated at the same instant (the
``time`` parameter). The answer is stale, with the reason in ``Signals.error``, when
Prometheus cannot be reached or answers an error, when the selector matches no worker,
when a target is down, when the newest sample is older than ``stale_after_s``, or when a
latency histogram has no series over the window yet (Prometheus keeps fewer than two
samples of it). The client is blocking (requests): every call runs in a thread.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from urllib3.util.retry import Retry

from preheat.autoscaler.scrape import DEFAULT_HISTOGRAMS
from preheat.autoscaler.source import SignalQuery, snapshot, wake_signals, wakes
from preheat.core import metric_names as mn
from preheat.core.autoscaling import Demand, Mix, Signals, SignalValue
from preheat.core.percentiles import bucket_floor
from preheat.core.pool import Signal

__all__ = ["PrometheusSource", "Queries", "queries"]


def _range(seconds: float) -> str:
    """A PromQL range (``60s``, ``1500ms``)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True)
class Queries:
    """The PromQL of one read, by what it answers (``latency``: (objective index,
    window) -> query)."""

    latency: Mapping[tuple[int, float], str]
    count: Mapping[tuple[int, float], str]
    waiting: str
    running: str
    kv: str
    freshness: str
    down: str
    router_queue: str = ""  # "" when no router selector is configured
    arrivals: str = ""  # the routers' arrival rate over the window ("": no router selector)
    refused: str = ""  # their refusal rate by reason
    dispersion: str = ""  # the arrivals' index of dispersion over the window
    # the request mix: finished requests, prompt, cached and output tokens over the window
    served: tuple[str, ...] = ()


def queries(
    query: SignalQuery,
    selector: str,
    histograms: Mapping[Signal, str] = DEFAULT_HISTOGRAMS,
    router_selector: str | None = None,
) -> Queries:
    """The PromQL for ``query`` over the series ``selector`` matches (pure)."""
    sel = "{" + selector + "}"
    latency: dict[tuple[int, float], str] = {}
    count: dict[tuple[int, float], str] = {}
    for i, obj in enumerate(query.objectives):
        if not obj.signal.is_latency:
            continue
        hist = histograms[obj.signal]
        windows = [query.window_s]
        if query.short_window_s > 0:
            windows.append(query.short_window_s)
        for w in windows:
            q = obj.percentile / 100.0
            latency[(i, w)] = (
                f"histogram_quantile({q:g}, sum by (le) (rate({hist}_bucket{sel}[{_range(w)}])))"
            )
            count[(i, w)] = f"sum(increase({hist}_count{sel}[{_range(w)}]))"
    served = tuple(
        f"sum(increase({name}_total{sel}[{_range(query.window_s)}]))"
        for name in (
            mn.VLLM_REQUEST_SUCCESS,
            mn.VLLM_PROMPT_TOKENS,
            mn.VLLM_PREFIX_CACHE_HITS,
            mn.VLLM_GENERATION_TOKENS,
        )
    )
    return Queries(
        served=served,
        latency=latency,
        count=count,
        waiting=f"sum({mn.VLLM_NUM_REQUESTS_WAITING}{sel})",
        running=f"sum({mn.VLLM_NUM_REQUESTS_RUNNING}{sel})",
        kv=f"max({mn.VLLM_KV_CACHE_USAGE_PERC}{sel})",
        freshness=f"timestamp({mn.VLLM_NUM_REQUESTS_WAITING}{sel})",
        down=f"up{sel} == 0",
        router_queue=""
        if router_selector is None
        else f"sum({mn.ROUTER_QUEUE_DEPTH}{{{router_selector}}})",
        arrivals=""
        if router_selector is None
        else (
            f"sum(rate({mn.ROUTER_ARRIVALS}_total{{{router_selector}}}[{_range(query.window_s)}]))"
            # a tenant's requests over its quota are not demand: no pool size serves them
            f" - (sum(rate({mn.ROUTER_RATE_LIMITED}_total{{{router_selector}}}"
            f"[{_range(query.window_s)}])) or vector(0))"
        ),
        refused=""
        if router_selector is None
        else (
            f"sum by ({mn.LABEL_REASON}) "
            f"(rate({mn.ROUTER_REFUSED}_total{{{router_selector}}}[{_range(query.window_s)}]))"
        ),
        dispersion=""
        if router_selector is None
        # core.traffic.arrivals: increase(burst) / (2 increase(arrivals)), over the
        # routers that export the burst counter (an older router's arrivals left out)
        else (
            f"sum(increase({mn.ROUTER_ARRIVAL_BURST}_total{{{router_selector}}}"
            f"[{_range(query.window_s)}])) / (2 * sum(increase({mn.ROUTER_ARRIVALS}_total"
            f"{{{router_selector}}}[{_range(query.window_s)}]) and "
            f"{mn.ROUTER_ARRIVAL_BURST}_total{{{router_selector}}}))"
        ),
    )


class _Failed(Exception):
    """A query Prometheus could not answer (unreachable, an HTTP error, a bad answer)."""


def _brief(exc: BaseException) -> str:
    """``ConnectionError: [Errno 111] Connection refused``, not requests' whole chain."""
    inner = exc.args[0] if exc.args else None
    reason = getattr(inner, "reason", None)  # urllib3's MaxRetryError inside requests'
    text = str(reason if reason is not None else exc)
    errno = re.search(r"\[Errno -?\d+\][^\"')]*", text)
    if errno is not None:
        text = errno.group(0).strip()
    return f"{type(exc).__name__}: {text}".strip()[:300]


def _scalar(result: Any) -> float | None:
    """The value of a one-series answer; None for an empty answer (no series matched)."""
    if not result:
        return None
    return float(result[0]["value"][1])  # "NaN" -> nan


def _instance(series: Mapping[str, Any]) -> str:
    labels = series.get("metric", {})
    return str(labels.get("instance") or labels or "?")


class PrometheusSource:
    """Reads a pool's signals from the Prometheus at ``url``.

    ``clock`` is the caller's clock (``observed_at`` is on it, like the policy's ``now``);
    ``wall`` is the Unix clock that Prometheus' timestamps are on (the query instant).
    """

    def __init__(
        self,
        url: str,
        *,
        selector: str = "",
        histograms: Mapping[Signal, str] = DEFAULT_HISTOGRAMS,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        timeout_s: float = 2.0,
        stale_after_s: float = 30.0,
        client: PrometheusConnect | None = None,
        parallel: int = 4,
        router_selector: str | None = None,
    ) -> None:
        self.url = url
        self.selector = selector
        self.router_selector = router_selector
        self._histograms = histograms
        self._clock = clock
        self._wall = wall
        self._timeout = timeout_s
        self.stale_after_s = stale_after_s
        self.parallel = max(1, parallel)
        # No retries: a read that fails answers stale now; the next tick asks again.
        self._client = client or PrometheusConnect(url=url, retry=Retry(total=0))
        self._last_observed: float | None = None

    def _query(self, promql: str, at: float) -> Any:
        """One instant query (blocking: called in a thread)."""
        try:
            return self._client.custom_query(
                promql,
                params={"time": f"{at:.3f}"},
                timeout=self._timeout,  # type: ignore[arg-type]  # requests takes a float
            )
        except (OSError, PrometheusApiClientException, ValueError, KeyError) as exc:
            # requests' exceptions are OSErrors; a non-200 answer is the client's own.
            raise _Failed(_brief(exc)) from exc

    async def _ask(self, named: Mapping[str, str], at: float) -> dict[str, Any]:
        # A few at a time: the session's connection pool (10) and the loop's default
        # executor are shared.
        gate = asyncio.Semaphore(self.parallel)

        async def one(promql: str) -> Any:
            async with gate:
                return await asyncio.to_thread(self._query, promql, at)

        keys = list(named)
        results = await asyncio.gather(*(one(named[k]) for k in keys), return_exceptions=True)
        out: dict[str, Any] = {}
        for k, r in zip(keys, results, strict=True):
            if isinstance(r, BaseException):
                if isinstance(r, _Failed):
                    raise r
                raise _Failed(_brief(r)) from r
            out[k] = r
        return out

    def _stale(self, error: str) -> Signals:
        return Signals(observed_at=self._last_observed, stale=True, error=error)

    async def read(self, query: SignalQuery) -> Signals:
        qs = queries(query, self.selector, self._histograms, self.router_selector)
        named: dict[str, str] = {
            "waiting": qs.waiting,
            "running": qs.running,
            "kv": qs.kv,
            "freshness": qs.freshness,
            "down": qs.down,
        }
        if qs.router_queue:
            named["router_queue"] = qs.router_queue
            named["arrivals"] = qs.arrivals
            named["refused"] = qs.refused
            named["dispersion"] = qs.dispersion
        for k, promql in enumerate(qs.served):
            named[f"served:{k}"] = promql
        for (i, w), promql in qs.latency.items():
            named[f"lat:{i}:{w}"] = promql
        for (i, w), promql in qs.count.items():
            named[f"cnt:{i}:{w}"] = promql
        now, at = self._clock(), self._wall()
        try:
            answers = await self._ask(named, at)
        except _Failed as exc:
            return self._stale(f"prometheus {self.url}: {exc}")
        try:
            return self._signals(query, answers, now, at)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            return self._stale(f"prometheus {self.url}: unexpected answer: {exc!r}")

    def _signals(
        self, query: SignalQuery, answers: Mapping[str, Any], now: float, at: float
    ) -> Signals:
        problems: list[str] = []
        held = _scalar(answers.get("router_queue"))
        demand = _demand(answers, query.window_s)
        stamps = answers["freshness"] or []
        if not stamps:
            if wakes(held, demand):
                self._last_observed = now
                return wake_signals(query, now, held or 0.0, demand)
            sel = "{" + self.selector + "}"
            return self._stale(f"no worker series match {mn.VLLM_NUM_REQUESTS_WAITING}{sel}")
        oldest = min(stamps, key=lambda s: float(s["value"][1]))
        age = max(0.0, at - float(oldest["value"][1]))
        observed_at = now - age
        self._last_observed = observed_at
        if age > self.stale_after_s:
            problems.append(f"newest sample of {_instance(oldest)} is {age:.0f} s old")
        down = answers["down"] or []
        if down:
            problems.append("targets down: " + ", ".join(sorted(_instance(s) for s in down)))

        waiting = _scalar(answers["waiting"])
        running = _scalar(answers["running"])
        kv = _scalar(answers["kv"])
        in_flight = None
        if waiting is not None or running is not None or held is not None:
            in_flight = (waiting or 0.0) + (running or 0.0) + (held or 0.0)
        reporting = float(len(stamps))
        requests: float | None = None
        values: list[SignalValue] = []
        for i, obj in enumerate(query.objectives):
            if obj.signal.is_latency:
                lat = answers[f"lat:{i}:{query.window_s}"]
                if not lat:
                    hist = self._histograms[obj.signal]
                    problems.append(f"no {hist} series over {query.window_s:g} s yet")
                    values.append(SignalValue(obj.signal, obj.percentile, None, None, stale=True))
                    continue
                value = _ms(_scalar(lat))
                count = _scalar(answers[f"cnt:{i}:{query.window_s}"]) or 0.0
                if math.isnan(count):
                    count = 0.0
                short: float | None = None
                if query.short_window_s > 0:
                    short = _ms(_scalar(answers[f"lat:{i}:{query.short_window_s}"]))
                requests = count if requests is None else max(requests, count)
                values.append(
                    SignalValue(
                        obj.signal,
                        obj.percentile,
                        value,
                        observed_at,
                        stale=False,
                        short_value=short,
                        samples=count,
                        floor=_floor_ms(self._histograms[obj.signal], value),
                    )
                )
            elif obj.signal is Signal.QUEUE_DEPTH:
                values.append(
                    SignalValue(
                        obj.signal, 0.0, waiting, observed_at, waiting is None, samples=reporting
                    )
                )
            elif obj.signal is Signal.CONCURRENCY:
                values.append(
                    SignalValue(
                        obj.signal,
                        0.0,
                        in_flight,
                        observed_at,
                        in_flight is None,
                        samples=reporting,
                    )
                )
            else:
                values.append(
                    SignalValue(obj.signal, 0.0, kv, observed_at, kv is None, samples=reporting)
                )
        stale = bool(problems)
        if stale:
            values = [replace(v, stale=True) for v in values]
        return snapshot(
            values,
            observed_at=observed_at,
            stale=stale,
            requests=requests,
            in_flight=in_flight,
            problems=problems,
            demand=demand,
            mix=_mix(answers),
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)


def _rate(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else max(0.0, value)


def _demand(answers: Mapping[str, Any], window_s: float) -> Demand | None:
    """The routers' arrival and refusal rates (None: no router series over the window)."""
    arrivals = _rate(_scalar(answers.get("arrivals")))
    if arrivals is None:
        return None
    by_reason: list[tuple[str, float]] = []
    for series in answers.get("refused") or []:
        rate = _rate(float(series["value"][1]))
        if rate:
            by_reason.append((str(series.get("metric", {}).get(mn.LABEL_REASON, "")), rate))
    dispersion = _scalar(answers.get("dispersion"))
    return Demand(
        arrival_rate=arrivals,
        refused_rate=sum(r for _, r in by_reason),
        window_s=window_s,
        by_reason=tuple(sorted(by_reason)),
        arrival_dispersion=None
        if dispersion is None or not math.isfinite(dispersion)
        else max(0.0, dispersion),
    )


def _mix(answers: Mapping[str, Any]) -> Mix | None:
    """The window's request mix from the counters' increases (None: no series, or no
    request finished)."""
    got = [_rate(_scalar(answers.get(f"served:{k}"))) for k in range(4)]
    n, prompt, cached, out = got
    if n is None or prompt is None or n <= 0:
        return None
    return Mix(n, prompt / n, min(cached or 0.0, prompt) / n, (out or 0.0) / n)


def _ms(seconds: float | None) -> float | None:
    """Seconds to ms; NaN (no request in the window) and no answer to None."""
    if seconds is None or math.isnan(seconds):
        return None
    return seconds * 1000.0


def _floor_ms(histogram: str, value_ms: float | None) -> float | None:
    """The lower edge (ms) of the bucket of ``histogram`` that a percentile read off it lies
    in, from vLLM's known buckets (None: another histogram, or no value)."""
    if value_ms is None:
        return None
    floor = bucket_floor(value_ms / 1000.0, mn.VLLM_LATENCY_BUCKETS.get(histogram, ()))
    return None if floor is None else floor * 1000.0
