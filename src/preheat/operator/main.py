"""``preheat operator``: flags, the health/metrics server, and kopf.

The config file (``--config``, the Helm chart's ConfigMap) and the environment are read by
:mod:`preheat.operator.options` into one :class:`~preheat.operator.options.OperatorOptions`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import kopf
import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from preheat.core.manifests import BuildOptions
from preheat.operator.kube import Kube
from preheat.operator.metrics import Metrics
from preheat.operator.options import (
    OperatorConfigError,
    OperatorOptions,
    autoscaler_env,
    parse_config,
)
from preheat.operator.services import services
from preheat.process import yamlfile
from preheat.process.kubeconfig import KubeConfigError
from preheat.process.logs import LOG_FORMATS, fields, setup_logging
from preheat.process.ports import port_number
from preheat.process.tracing import Tracing, add_tracing_flag, setup_tracing
from preheat.wire.tokens import TokenError, read_token

log = logging.getLogger("preheat.operator")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch this namespace (repeatable); none = watchNamespaces from --config, "
        "else the whole cluster",
    )
    parser.add_argument(
        "--config",
        default=os.environ.get("PREHEAT_OPERATOR_CONFIG", ""),
        help="operator config YAML (worker image, GPU types, drain; env PREHEAT_OPERATOR_CONFIG)",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="no peering with other operator replicas (kopf's --standalone)",
    )
    parser.add_argument(
        "--health-port",
        type=port_number,
        default=8080,
        help="port of /healthz and /metrics (default 8080; 0 = none)",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster)")
    parser.add_argument(
        "--worker-cache-token-file",
        default=os.environ.get("PREHEAT_WORKER_CACHE_TOKEN_FILE", ""),
        help="file holding the workers' cache token: every pool's workers then require it "
        "on WatchCache (give the routers the same one); env PREHEAT_WORKER_CACHE_TOKEN_FILE, "
        "or the token itself in PREHEAT_CACHE_TOKEN; default: none (WatchCache open)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=os.environ.get("PREHEAT_LOG_FORMAT", "json"),
        help="kv (key=value) or json (env PREHEAT_LOG_FORMAT)",
    )
    parser.add_argument("--log-level", default="INFO")
    add_tracing_flag(parser)


def options_from_args(args: argparse.Namespace) -> OperatorOptions:
    build, monitor = BuildOptions(), "auto"
    namespaces: tuple[str, ...] = ()
    doc: dict[str, Any] = {}
    if args.config:
        doc = yamlfile.load(Path(args.config).read_text()) or {}
        build, namespaces, monitor = parse_config(doc)
    build = replace(build, log_format=args.log_format)
    return OperatorOptions(
        build=build,
        namespaces=tuple(args.namespace) or namespaces,
        service_monitor=monitor,
        standalone=bool(args.standalone),
        health_port=int(args.health_port),
        kubeconfig=args.kubeconfig,
        cache_token=read_token(args.worker_cache_token_file, "PREHEAT_CACHE_TOKEN"),
    ).with_env({**os.environ, **autoscaler_env(doc)})


async def _health_app(metrics: Metrics, ready: asyncio.Event, port: int) -> web.AppRunner | None:
    if port <= 0:
        return None

    async def healthz(_: web.Request) -> web.Response:
        if ready.is_set():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="starting\n")

    async def metrics_view(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_view)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def serve(
    options: OperatorOptions,
    *,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or a signal arrives); ``tracing``: the
    reconcile and autoscaling spans' tracer (``--tracing``)."""
    from preheat.operator import handlers  # noqa: F401  (registers the handlers with kopf)

    metrics = metrics or Metrics()
    ready = ready_flag or asyncio.Event()
    kube = await Kube.connect(options.kubeconfig)
    build = options.build
    if options.service_monitor == "auto":
        build = replace(build, service_monitor=await kube.has_api("monitoring.coreos.com/v1"))
    options = replace(options, build=build)
    reconciler, autoscaler = services(options, kube, metrics)
    reconciler.tracing = autoscaler.tracing = tracing
    site = await _health_app(metrics, ready, options.health_port)
    log.info(
        "operator_starting",
        extra=fields(
            namespaces=",".join(options.namespaces) or "*",
            service_monitor=build.service_monitor,
            health_port=options.health_port,
        ),
    )
    try:
        await kopf.operator(
            standalone=options.standalone,
            namespaces=list(options.namespaces),
            clusterwide=not options.namespaces,
            memo=kopf.Memo(options=options, reconciler=reconciler, autoscaler=autoscaler),
            stop_flag=stop_flag,
            ready_flag=ready,
        )
    finally:
        if site is not None:
            await site.cleanup()


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, level=args.log_level.upper(), component="operator")
    try:
        options = options_from_args(args)
    except (OperatorConfigError, OSError, yaml.YAMLError, TokenError, ValueError) as e:
        log.error("bad_configuration", extra=fields(error=str(e)))
        return 2
    tracing = setup_tracing(args.tracing, "preheat-operator")
    try:
        asyncio.run(serve(options, tracing=tracing))
    except KubeConfigError as e:  # a traceback before
        log.error("no_cluster", extra=fields(error=str(e)))
        return 2
    finally:
        if tracing is not None:
            tracing.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="preheat operator")
    add_arguments(parser)
    return run(parser.parse_args(argv))
