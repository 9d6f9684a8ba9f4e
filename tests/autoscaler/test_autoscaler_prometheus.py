"""PrometheusSource against a real Prometheus (Debian's package) scraping live sim workers
on loopback every second: the decisions ``decide()`` makes from the PromQL answers as load
goes up and down, agreement with DirectScrapeSource, and stale answers (Prometheus stopped,
a selector that matches nothing, a worker down).

The server is started here (``scripts/prometheus.sh`` installs it). Without the binary the
Prometheus tests skip, unless ``CI=true``: then they fail, so CI cannot skip them silently.
Prometheus shows the first scrape only ~6 s after it starts (its discovery manager sends
targets at most every 5 s), so each server costs that much once.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import shutil
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from test_autoscaler_scrape import generate, sim_workers

from preheat.autoscaler.prometheus import PrometheusSource, queries
from preheat.autoscaler.scrape import DirectScrapeSource
from preheat.autoscaler.source import SignalQuery
from preheat.core.autoscaling import (
    Cause,
    Context,
    Decision,
    Direction,
    PolicyState,
    PolicyTuning,
    ReplicaCounts,
    Signals,
    decide,
)
from preheat.core.pool import (
    AutoscalingConfig,
    Objective,
    PanicConfig,
    ReplicasConfig,
    ScaleRule,
    Signal,
)
from preheat.engine.simmetrics import TIME_TO_FIRST_TOKEN_BUCKETS
from preheat.process.ports import ReservedPort

JOB = "preheat-sim"
SELECTOR = f'job="{JOB}"'
TTFT95 = Objective(Signal.TTFT, 95.0, 50.0)
QUEUE = Objective(Signal.QUEUE_DEPTH, 0.0, 50.0)
KV = Objective(Signal.KV_CACHE_USAGE, 0.0, 0.9)
CONCURRENCY = Objective(Signal.CONCURRENCY, 0.0, 48.0)
WINDOW_S = 5.0
STABILIZE_DOWN_S = 3.0
AUTOSCALING = AutoscalingConfig(
    objectives=(TTFT95, QUEUE),
    window_s=WINDOW_S,
    scale_up=ScaleRule(stabilization_s=0.0, cooldown_s=60.0, max_step=2),
    scale_down=ScaleRule(stabilization_s=STABILIZE_DOWN_S, cooldown_s=1.0, max_step=1),
    tolerance=0.1,
    panic=PanicConfig(enabled=False, threshold=3.0, window_s=2.0),
)
QUERY = SignalQuery(AUTOSCALING.objectives, window_s=WINDOW_S)
TUNING = PolicyTuning(stale_after_s=10.0, scale_to_zero_delay_s=300.0)


# --- the Prometheus server -------------------------------------------------------------


def prometheus_binary() -> str:
    """The server binary; skips (fails under CI=true) when it is not installed."""
    path = shutil.which("prometheus")
    if path is None:
        why = "no prometheus binary on PATH (scripts/prometheus.sh installs Debian's package)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI=true, so this fails instead of skipping")
        pytest.skip(why)
    return path


@dataclass
class Prometheus:
    url: str
    process: asyncio.subprocess.Process
    log: Path
    first_scrape_s: float = 0.0  # from the process start to every target `up`

    async def stop(self) -> None:
        """Terminate, then kill: never leaves the server behind."""
        if self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await asyncio.wait_for(self.process.wait(), 5)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-2000:]
        return ""


async def instant(session: aiohttp.ClientSession, url: str, promql: str) -> list[dict[str, object]]:
    async with session.get(f"{url}/api/v1/query", params={"query": promql}) as resp:
        resp.raise_for_status()
        body = await resp.json()
    result: list[dict[str, object]] = body["data"]["result"]
    return result


@contextlib.asynccontextmanager
async def prometheus(tmp: Path, targets: Sequence[str]) -> AsyncIterator[Prometheus]:
    """A Prometheus on 127.0.0.1 scraping ``targets`` (host:port) every second; returns
    once every target is ``up``; always stopped at the end."""
    binary = prometheus_binary()
    reserved = ReservedPort()  # held until the server is gone: nothing else can take it
    port = reserved.port
    config = tmp / "prometheus.yml"
    listed = ", ".join(f'"{t}"' for t in targets)
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: {JOB}\n"
        f"    static_configs:\n"
        f"      - targets: [{listed}]\n"
    )
    log = tmp / "prometheus.log"
    started = time.monotonic()
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            async with asyncio.timeout(30):
                while True:
                    if process.returncode is not None:
                        pytest.fail(f"prometheus exited {process.returncode}:\n{server.log_tail()}")
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with session.get(f"{server.url}/-/ready") as resp:
                            if resp.status == 200:
                                break
                    await asyncio.sleep(0.1)
                while True:
                    up = await instant(session, server.url, f"up{{{SELECTOR}}} == 1")
                    if len(up) == len(targets):
                        break
                    await asyncio.sleep(0.2)
        server.first_scrape_s = time.monotonic() - started
        yield server
    finally:
        await server.stop()
        reserved.release()


# --- load and the loop ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def load(addresses: Sequence[str], concurrency: int) -> AsyncIterator[None]:
    """``concurrency`` requests in flight on each worker until the block ends (cancelled)."""

    async def client(address: str, i: int) -> None:
        n = 0
        while True:
            n += 1
            with contextlib.suppress(Exception):
                await generate(address, f"user {i} turn {n} " + "lorem ipsum " * 200, 24)

    tasks = [asyncio.create_task(client(a, i)) for a in addresses for i in range(concurrency)]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class Tick:
    now: float
    signals: Signals
    direct: Signals
    decision: Decision


@dataclass
class Loop:
    """The operator's loop in miniature: read, decide, and pretend the pool follows."""

    source: PrometheusSource
    direct: DirectScrapeSource
    desired: int = 2
    state: PolicyState = field(default_factory=PolicyState)
    ticks: list[Tick] = field(default_factory=list)

    async def tick(self) -> Tick:
        now = asyncio.get_running_loop().time()
        signals, direct = await asyncio.gather(self.source.read(QUERY), self.direct.read(QUERY))
        ctx = Context(
            now=now,
            autoscaling=AUTOSCALING,
            replicas=ReplicasConfig(min=2, max=4, warm_standby=0, desired=self.desired),
            counts=ReplicaCounts(active=self.desired),
            signals=signals,
            state=self.state,
            tuning=TUNING,
        )
        decision, self.state = decide(ctx)
        self.desired = decision.active
        tick = Tick(now, signals, direct, decision)
        self.ticks.append(tick)
        return tick

    async def until(
        self, check: Callable[[Tick], bool], timeout_s: float, period_s: float = 1.0
    ) -> Tick:
        """Tick every ``period_s`` (the scrape interval) until ``check(tick)``; that tick."""
        async with asyncio.timeout(timeout_s):
            while True:
                if self.ticks:
                    wait = self.ticks[-1].now + period_s - asyncio.get_running_loop().time()
                    await asyncio.sleep(max(0.0, wait))
                tick = await self.tick()
                if check(tick):
                    return tick


async def poll(
    source: PrometheusSource, check: Callable[[Signals], bool], timeout_s: float = 10.0
) -> Signals:
    async with asyncio.timeout(timeout_s):
        while not check(signals := await source.read(QUERY)):  # noqa: ASYNC110 (polls a server)
            await asyncio.sleep(0.5)
    return signals


def bucket_index(seconds: float) -> int:
    return bisect.bisect_left(TIME_TO_FIRST_TOKEN_BUCKETS, seconds)


def trace(ticks: Sequence[Tick], since: float) -> str:
    return "\n".join(
        f"{t.now - since:6.1f}s {t.decision.direction.value:4} {t.decision.cause.value:16} "
        f"{t.decision.reason}" + (f" [stale: {t.signals.error}]" if t.signals.stale else "")
        for t in ticks
    )


# --- tests ---------------------------------------------------------------------------------


def test_promql_of_a_query() -> None:
    q = queries(SignalQuery((TTFT95, QUEUE, KV), window_s=60.0, short_window_s=1.5), 'job="w"')
    assert q.latency == {
        (0, 60.0): "histogram_quantile(0.95, sum by (le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{job="w"}[60s])))',
        (0, 1.5): "histogram_quantile(0.95, sum by (le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{job="w"}[1500ms])))',
    }
    assert (
        q.count[(0, 60.0)] == 'sum(increase(vllm:time_to_first_token_seconds_count{job="w"}[60s]))'
    )
    assert q.waiting == 'sum(vllm:num_requests_waiting{job="w"})'
    assert q.running == 'sum(vllm:num_requests_running{job="w"})'
    assert q.kv == 'max(vllm:kv_cache_usage_perc{job="w"})'
    assert q.freshness == 'timestamp(vllm:num_requests_waiting{job="w"})'
    assert q.down == 'up{job="w"} == 0'


async def test_prometheus_unreachable_is_stale_at_once() -> None:
    with ReservedPort() as nothing:  # held, never listening: connections are refused
        source = PrometheusSource(f"http://{nothing.address}", timeout_s=1.0)
        try:
            signals = await source.read(QUERY)
        finally:
            await source.close()
    assert signals.stale
    assert signals.observed_at is None
    assert "ConnectionError" in signals.error
    assert "Connection refused" in signals.error


async def test_a_failed_query_is_not_retried() -> None:
    """A Prometheus that hangs up on every query: each query is asked once (a retry, with or
    without backoff, would ask again), and the read answers stale."""
    asked: list[str] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        asked.append(request_line.decode().split(" ")[1])
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    source = PrometheusSource(f"http://127.0.0.1:{port}", timeout_s=10.0)
    try:
        signals = await source.read(QUERY)
    finally:
        await source.close()
        server.close()
        await server.wait_closed()
    assert signals.stale
    assert "ConnectionError" in signals.error
    paths = [urllib.parse.urlsplit(a) for a in asked]
    assert {p.path for p in paths} == {"/api/v1/query"}
    promql = [urllib.parse.parse_qs(p.query)["query"][0] for p in paths]
    assert len(promql) >= 5  # waiting, running, kv, freshness, down, and the windows
    assert sorted(promql) == sorted(set(promql)), "a query was asked twice"


async def test_decisions_from_promql_follow_load_up_and_down(tmp_path: Path) -> None:
    # Slow sims (time_scale 4, two sequences at a time): 8 clients per worker queue up and
    # TTFT p95 goes to hundreds of ms, far past the 50 ms target: +2 (max step) to the max.
    async with (
        sim_workers(2, max_num_seqs=2, time_scale=4.0) as ws,
        prometheus(tmp_path, [u.removeprefix("http://") for _, _, u in ws]) as prom,
    ):
        urls = [u for _, _, u in ws]
        source = PrometheusSource(prom.url, selector=SELECTOR, stale_after_s=5.0)
        direct = DirectScrapeSource(lambda: urls, stale_after_s=5.0)
        loop = Loop(source, direct)
        t0 = asyncio.get_running_loop().time()
        print(f"prometheus: every target up {prom.first_scrape_s:.1f} s after start")
        try:
            # Idle: fresh once the window holds two scrapes; no traffic, at min: hold.
            idle = await loop.until(lambda t: not t.signals.stale, timeout_s=10)
            assert idle.decision.direction is Direction.HOLD
            ttft = idle.signals.find(TTFT95)
            assert ttft is not None
            assert ttft.value is None  # no request in the window (NaN from PromQL)
            assert idle.signals.requests == 0.0  # idle, as scale-to-zero reads it
            assert idle.signals.in_flight == 0.0

            async with load([a for _, a, _ in ws], concurrency=8):
                up = await loop.until(
                    lambda t: t.decision.direction is not Direction.HOLD, timeout_s=20
                )
                t_up = up.now
                # keep the load a little: the up cooldown holds further growth
                held = await loop.until(lambda t: True, timeout_s=5)
                waiting = [t.signals.find(QUEUE) for t in loop.ticks]
                loaded_queue = max((w.value or 0.0) for w in waiting if w is not None)
                busy = await source.read(SignalQuery((CONCURRENCY,), window_s=WINDOW_S))
            print(trace(loop.ticks, t0))
            assert up.decision.direction is Direction.UP, up.decision.reason
            assert up.decision.cause is Cause.SCALE_UP
            assert up.decision.reason.startswith("ttft p95 "), up.decision.reason
            assert f"> 50 ms over {WINDOW_S:g} s" in up.decision.reason
            assert (up.decision.previous, up.decision.active) == (2, 4)
            assert held.decision.direction is Direction.HOLD
            assert loaded_queue > 0  # sum(vllm:num_requests_waiting) saw the queue
            conc = busy.find(CONCURRENCY)
            assert conc is not None
            assert not conc.stale
            assert conc.value == busy.in_flight  # running + waiting, as PromQL sums them
            assert (conc.value or 0.0) > 0
            # The same load through both sources: p95 over everything since the start.
            whole = SignalQuery((TTFT95,), window_s=120.0)
            p_sig, d_sig = await asyncio.gather(source.read(whole), direct.read(whole))
            p, d = p_sig.find(TTFT95), d_sig.find(TTFT95)
            assert p is not None
            assert d is not None
            assert p.value is not None
            assert d.value is not None
            print(f"ttft p95 since start: prometheus {p.value:.0f} ms, direct {d.value:.0f} ms")
            assert abs(bucket_index(p.value / 1000) - bucket_index(d.value / 1000)) <= 1
            # and the bucket each read it in: Prometheus' from vLLM's bucket list, the direct
            # scrape's from the deltas themselves (the policy's "shown late", proposal 0017)
            assert p.floor is not None
            assert d.floor is not None
            assert p.floor < p.value
            assert d.floor < d.value
            if bucket_index(p.value / 1000) == bucket_index(d.value / 1000):
                assert p.floor == d.floor

            # Load gone: the ttft window empties, then scale-down waits out its window.
            stop = len(loop.ticks)
            down = await loop.until(
                lambda t: t.decision.direction is not Direction.HOLD, timeout_s=25
            )
            after = loop.ticks[stop:]
            print(trace(after, t0))
            assert down.decision.direction is Direction.DOWN, down.decision.reason
            assert down.decision.cause is Cause.SCALE_DOWN
            assert (down.decision.previous, down.decision.active) == (4, 3)
            high = [t.now for t in loop.ticks if (t.decision.recommendation or 0) >= 4]
            assert down.now - max(high) > STABILIZE_DOWN_S
            assert any("stabilizing (down)" in t.decision.reason for t in after)
            assert down.now > t_up

            # Prometheus stopped: stale; hold at 3 (the objectives would ask for 2).
            await prom.stop()
            gone = [await loop.until(lambda t: True, timeout_s=5) for _ in range(3)]
            print(trace(gone, t0))
            for t in gone:
                assert t.signals.stale
                assert prom.url in t.signals.error
                assert t.decision.cause is Cause.STALE, t.decision.reason
                assert t.decision.active == 3
                assert "holding 3" in t.decision.reason
        finally:
            await source.close()
            await direct.close()


async def test_no_matching_series_and_a_dead_worker_are_stale(tmp_path: Path) -> None:
    async with (
        sim_workers(2) as ws,
        prometheus(tmp_path, [u.removeprefix("http://") for _, _, u in ws]) as prom,
    ):
        nothing = PrometheusSource(prom.url, selector='job="no-such-pool"')
        pool = PrometheusSource(prom.url, selector=SELECTOR, stale_after_s=5.0)
        try:
            empty = await nothing.read(QUERY)
            assert empty.stale
            assert 'no worker series match vllm:num_requests_waiting{job="no-such-pool"}' in (
                empty.error
            )
            fresh = await poll(pool, lambda s: not s.stale)
            queue = fresh.find(QUEUE)
            assert queue is not None
            assert queue.value == 0.0
            assert queue.samples == 2  # both workers report

            await asyncio.wait_for(ws[1][0].stop(), 20)
            dead = ws[1][2].removeprefix("http://")
            after = await poll(pool, lambda s: s.stale)
            assert f"targets down: {dead}" in after.error
            assert all(v.stale for v in after.values)
        finally:
            await nothing.close()
            await pool.close()
