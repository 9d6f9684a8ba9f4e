"""``preheat operator``: flags, the config file, the health/metrics server, and kopf.

The config file (``--config``, the Helm chart's ConfigMap) holds cluster-wide settings::

    workerImage: preheat-worker:0.1.0
    watchNamespaces: [serving]          # [] = the whole cluster
    gpuTypes: {nvidia-h100: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
    drainGraceSeconds: 30
    preStopSleepSeconds: 5
    workerServiceMonitor: "auto"        # auto (when monitoring.coreos.com/v1 exists), true, false
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import kopf
import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.manifests import DEFAULT_GPU_TYPES, BuildOptions
from preheat.operator.autoscaling import Autoscaler
from preheat.operator.kube import Kube
from preheat.operator.metrics import AutoscalerMetrics, Metrics
from preheat.operator.options import OperatorOptions
from preheat.operator.reconciler import Reconciler
from preheat.process.logs import LOG_FORMATS, fields, setup_logging
from preheat.wire.tokens import TokenError, read_token

log = logging.getLogger("preheat.operator")

_CONFIG_KEYS = frozenset(
    {
        "workerImage",
        "watchNamespaces",
        "gpuTypes",
        "drainGraceSeconds",
        "preStopSleepSeconds",
        "workerServiceMonitor",
    }
)


class OperatorConfigError(PreheatError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.INVALID_ARGUMENT, message)


def parse_config(doc: Mapping[str, Any]) -> tuple[BuildOptions, tuple[str, ...], str]:
    """(BuildOptions, watchNamespaces, workerServiceMonitor) from the config file's mapping."""
    problems = [f"unknown key {k!r}" for k in doc if k not in _CONFIG_KEYS]
    gpu_types = doc.get("gpuTypes", DEFAULT_GPU_TYPES)
    if not isinstance(gpu_types, Mapping) or not all(
        isinstance(v, Mapping) for v in gpu_types.values()
    ):
        problems.append("gpuTypes must map a type name to a node selector (a mapping)")
        gpu_types = DEFAULT_GPU_TYPES
    namespaces = doc.get("watchNamespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        problems.append("watchNamespaces must be a list of names")
        namespaces = []
    monitor = str(doc.get("workerServiceMonitor", "auto")).lower()
    if monitor not in ("auto", "true", "false"):
        problems.append(f"workerServiceMonitor must be auto, true or false, got {monitor!r}")
    ints: dict[str, int] = {}
    for key, default in (("drainGraceSeconds", 30), ("preStopSleepSeconds", 5)):
        value = doc.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{key} must be a whole number of seconds >= 0, got {value!r}")
            value = default
        ints[key] = value
    if problems:
        raise OperatorConfigError("operator config: " + "; ".join(problems))
    build = BuildOptions(
        worker_image=str(doc.get("workerImage") or BuildOptions().worker_image),
        gpu_types={str(k): {str(a): str(b) for a, b in v.items()} for k, v in gpu_types.items()},
        service_monitor=monitor == "true",
        drain_grace_s=ints["drainGraceSeconds"],
        pre_stop_sleep_s=ints["preStopSleepSeconds"],
    )
    return build, tuple(namespaces), monitor


def load_build_options(path: str) -> BuildOptions:
    """BuildOptions from a config file ("" = the defaults)."""
    if not path:
        return BuildOptions()
    return parse_config(yaml.safe_load(Path(path).read_text()) or {})[0]


def options_from_env(env: Mapping[str, str]) -> OperatorOptions:
    """The options under ``kopf run -m preheat.operator.handlers``: the config file
    (``PREHEAT_OPERATOR_CONFIG``), the cache token (``PREHEAT_WORKER_CACHE_TOKEN_FILE`` or
    ``PREHEAT_CACHE_TOKEN``) and the rest of :meth:`OperatorOptions.with_env`."""
    return OperatorOptions(
        build=load_build_options(env.get("PREHEAT_OPERATOR_CONFIG", "")),
        cache_token=read_token(
            env.get("PREHEAT_WORKER_CACHE_TOKEN_FILE", ""), "PREHEAT_CACHE_TOKEN"
        ),
    ).with_env(env)


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
        type=int,
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


def options_from_args(args: argparse.Namespace) -> OperatorOptions:
    build, monitor = BuildOptions(), "auto"
    namespaces: tuple[str, ...] = ()
    if args.config:
        build, namespaces, monitor = parse_config(
            yaml.safe_load(Path(args.config).read_text()) or {}
        )
    build = replace(build, log_format=args.log_format)
    return OperatorOptions(
        build=build,
        namespaces=tuple(args.namespace) or namespaces,
        service_monitor=monitor,
        standalone=bool(args.standalone),
        health_port=int(args.health_port),
        kubeconfig=args.kubeconfig,
        cache_token=read_token(args.worker_cache_token_file, "PREHEAT_CACHE_TOKEN"),
    ).with_env(os.environ)


def services(
    options: OperatorOptions, kube: Kube, metrics: Metrics | None = None
) -> tuple[Reconciler, Autoscaler]:
    """The reconcile service and the autoscaler the handlers share (``memo``)."""
    reconciler = Reconciler(
        kube=kube,
        build=options.build,
        metrics=metrics or Metrics(),
        cache_token=options.cache_token,
        worker_timeout_s=options.worker_timeout_s,
    )
    autoscaler = Autoscaler(options.autoscaler, AutoscalerMetrics(reconciler.metrics.registry))
    return reconciler, autoscaler


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
) -> None:
    """Run the operator until ``stop_flag`` is set (or a signal arrives)."""
    from preheat.operator import handlers  # noqa: F401  (registers the handlers with kopf)

    metrics = metrics or Metrics()
    ready = ready_flag or asyncio.Event()
    kube = await Kube.connect(options.kubeconfig)
    build = options.build
    if options.service_monitor == "auto":
        build = replace(build, service_monitor=await kube.has_api("monitoring.coreos.com/v1"))
    options = replace(options, build=build)
    reconciler, autoscaler = services(options, kube, metrics)
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
    asyncio.run(serve(options))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="preheat operator")
    add_arguments(parser)
    return run(parser.parse_args(argv))
