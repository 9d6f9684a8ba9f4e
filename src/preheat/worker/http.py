"""The worker's HTTP side (aiohttp): ``/metrics``, ``/healthz`` (liveness), ``/ready``.

``/metrics`` is the engine's registry (vLLM-named metrics) followed by the worker's own
``preheat_worker_*`` registry. ``/ready`` is 200 only while the worker is warm (standby or
active) and 503 otherwise, with the state in the body either way, so a Kubernetes readiness
probe keeps a loading, warming or draining pod out of the Service.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from preheat.core.lifecycle import WARM_STATES
from preheat.process.httpserve import serve

if TYPE_CHECKING:
    from preheat.worker.server import WorkerServer

WORKER_KEY: web.AppKey[WorkerServer] = web.AppKey("worker")


async def _metrics(request: web.Request) -> web.Response:
    w = request.app[WORKER_KEY]
    body = generate_latest(w.engine.registry) + generate_latest(w.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _ready(request: web.Request) -> web.Response:
    w = request.app[WORKER_KEY]
    state = w.state
    body = json.dumps({"state": state.value, "worker_id": w.worker_id}) + "\n"
    status = 200 if state in WARM_STATES else 503
    return web.Response(status=status, text=body, content_type="application/json")


async def _background(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the worker's background tasks end (cancelled, awaited) with the app."""
    yield
    await app[WORKER_KEY]._cancel_tasks()


def build_app(worker: WorkerServer) -> web.Application:
    app = web.Application()
    app[WORKER_KEY] = worker
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/ready", _ready)
    app.cleanup_ctx.append(_background)
    return app


async def start_http(worker: WorkerServer, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Starts the app on ``host:port`` (0: ephemeral); returns the runner and the bound port."""
    runner = web.AppRunner(build_app(worker), access_log=None, handle_signals=False)
    return runner, await serve(runner, host, port)
