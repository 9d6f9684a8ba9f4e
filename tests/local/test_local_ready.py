"""`preheat up`'s ``ready`` (in ``up.json``) means what a script that waits for it needs:
the workers serve **and** the router answers at the address ``up.json`` gives.

The router loads its tokenizer before it binds (seconds for an ``hf:`` one on a loaded
machine), so a pool's sim workers can be warm first. Here the router is made slow to bind
on purpose (its process sleeps 3 s, then becomes the real router: same pid), and every
time ``up.json`` says ready, the router's port must answer. At most a router and two sim
workers run, on 127.0.0.1; time limits are hang guards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from localkit import NullView
from upkit import up_state

from preheat.api.poolfile import parse_pool
from preheat.local.fleet import LocalFleet, SharedRouter, pool_out
from preheat.local.listening import RouterProbe
from preheat.local.runtime import LocalPool, UpOptions
from preheat.process import children

POOL = """\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {name: ready}
spec:
  model: {name: sim-8b}
  engine:
    kind: sim
    args: {loadTime: 100ms, warmupTime: 100ms}
  replicas: {min: 1, max: 1}
"""

BIND_DELAY_S = 3.0
# sleeps, then becomes argv[2:] (execv keeps the pid: the same child to `preheat up`)
SLOW_START = (
    "import os, sys, time; time.sleep(float(sys.argv[1])); os.execv(sys.argv[2], sys.argv[2:])"
)


async def _answers(http: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with http.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def _slow_router(monkeypatch: Any, module: str) -> None:
    """``module``'s spawn starts the router slow to bind (:data:`SLOW_START`)."""
    real_spawn = children.spawn

    async def spawn(name: str, argv: Sequence[str], *args: Any, **kw: Any) -> children.Child:
        if name == "router":
            argv = [sys.executable, "-c", SLOW_START, str(BIND_DELAY_S), *argv]
        return await real_spawn(name, argv, *args, **kw)

    monkeypatch.setattr(f"{module}.spawn", spawn)


async def _reads_serving_not_ready(
    out: Path, run: asyncio.Task[int], serving: Callable[[], bool]
) -> int:
    """Reads ``out/up.json`` every 0.1 s until it says ready (60 s at most), then checks that
    the router answers at the address it gives. Returns how many reads found the workers
    ``serving()`` but ``ready`` false."""
    count = 0
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            state = up_state(out)
            if state.get("ready") is True:
                assert await _answers(http, state["router"]["http"]), state
                return count
            if serving():
                count += 1
            assert not run.done(), state
            await asyncio.sleep(0.1)
    raise AssertionError(f"never ready: {up_state(out)}")


async def test_ready_waits_for_the_router_to_listen(tmp_path: Path, monkeypatch: Any) -> None:
    lp = LocalPool(
        parse_pool(yaml.safe_load(POOL), "ready.yaml"), UpOptions(out=tmp_path / "run"), NullView()
    )
    _slow_router(monkeypatch, "preheat.local.runtime")

    def serving() -> bool:
        return int((up_state(lp.out).get("counts") or {}).get("active", 0)) >= 1

    run = asyncio.create_task(lp.run())
    try:
        waited = await _reads_serving_not_ready(lp.out, run, serving)
    finally:
        lp.stop()
        code = await asyncio.wait_for(run, 60)
    assert code == 0
    # the worker was serving before the router listened, and `ready` waited for it
    assert waited > 0


async def test_several_pools_are_ready_once_their_shared_router_listens(
    tmp_path: Path, monkeypatch: Any
) -> None:
    options = UpOptions(out=tmp_path / "run")
    files = [
        parse_pool(
            yaml.safe_load(POOL.replace("ready", name).replace("sim-8b", model)), f"{name}.yaml"
        )
        for name, model in (("chat", "sim-chat"), ("code", "sim-code"))
    ]
    host = SharedRouter(files, options)
    pools = [
        LocalPool(
            f, dataclasses.replace(options, out=pool_out(options.out, f)), NullView(), host=host
        )
        for f in files
    ]
    fleet = LocalFleet(pools, host)
    _slow_router(monkeypatch, "preheat.local.fleet")
    run = asyncio.create_task(fleet.run())
    try:
        waited = await _reads_serving_not_ready(
            options.out, run, lambda: all(p.ready() for p in pools)
        )
    finally:
        fleet.stop()
        code = await asyncio.wait_for(run, 60)
    assert code == 0
    assert waited > 0


async def test_the_probe_asks_each_router_process_until_it_answers(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    server = (
        "import http.server, sys, time, pathlib\n"
        "time.sleep(float(sys.argv[1]))\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200 if self.path == '/healthz' else 404); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
        "pathlib.Path(sys.argv[2]).write_text(str(s.server_port))\n"
        "s.serve_forever()\n"
    )
    async with aiohttp.ClientSession() as http:
        # a child that never listens: not answered, and asked again each time
        sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
        silent = await children.spawn("router", sleeper, None, now=0.0)
        # a port that is bound but not listening: connections to it are refused
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            probe = RouterProbe(closed.getsockname()[1])
            try:
                assert not await probe.check(http, silent)
                assert not await probe.check(http, silent)  # asked again: still not
                assert not probe.answered(silent)
            finally:
                await silent.stop(5)
        assert not await probe.check(http, None)

        child = await children.spawn(
            "router", [sys.executable, "-c", server, "0.5", str(port_file)], None, now=0.0
        )
        try:
            for _ in range(100):
                if port_file.exists() and port_file.read_text():
                    break
                await asyncio.sleep(0.1)
            probe = RouterProbe(int(port_file.read_text()))
            assert await probe.check(http, child)
            assert probe.answered(child)
        finally:
            await child.stop(5)
        # the same pid is gone: no longer answered, whatever it said before
        assert not probe.answered(child)
        assert not await probe.check(http, child)
