"""``preheat router``: flags and the process entry point.

Once both ports are bound it prints one JSON line to stdout that tests and tools parse::

    {"event": "router_ready", "grpc_port": 50050, "http_port": 8000}

(ready to accept connections; ``/ready`` turns 200 once an endpoint is routable). SIGTERM or
SIGINT drains it: every request not yet routed is answered at once (HTTP 503 with
``Retry-After``, gRPC UNAVAILABLE), ``/ready`` and health turn off, requests in flight get
``--drain-grace-s``; then gRPC ``stop(grace)``, HTTP, discovery. A second signal stops it at
once. Exit status 2: bad flags or config.

The routing config file (``--routing-config``) is the scheduler's YAML
(``preheat.api.routing``) plus router keys: ``traffic`` (SLO classes with priorities,
the default class and tenant quotas: ``preheat.api.traffic``, the shape of an
InferencePool's ``spec.traffic``), ``sloClasses`` (its older shorthand: SLO class -> TTFT
budget in ms, used by admission), ``defaultTtftTargetMs`` (the TTFT target of requests that name no
deadline or class: the pool's TTFT objective; ``preheat up`` writes it from the pool file;
default 2000, 0: none) and ``maxInFlight`` (a hard ceiling of requests in flight for the
pool; default 0: the endpoints' ``max_num_seqs`` sum). A flag overrides the file::

    policy: preheat
    hotspotMarginMs: 150
    sloClasses: {interactive: 1000, standard: 5000}
    defaultTtftTargetMs: 1000
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from preheat.core.routing.admission import AdmissionConfig
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.scheduler import POLICIES
from preheat.core.traffic.classes import Traffic
from preheat.process import aio, yamlfile
from preheat.process.logs import LOG_FORMATS, fields, setup_logging
from preheat.process.ports import port_number
from preheat.process.tracing import add_tracing_flag, setup_tracing
from preheat.router.app import RouterConfig, RouterServer, describe
from preheat.router.endpoints import DiscoverySource, StaticDiscovery, StaticDiscoveryError
from preheat.router.endpoints.static import decode as decode_pools_file
from preheat.router.endpoints.static import parse_endpoints
from preheat.router.frontend.auth import CredentialFileError, KeySet
from preheat.router.frontend.http import HttpLimits
from preheat.router.frontend.tokenizer import TokenizerLoadError, build_tokenizer
from preheat.router.pools import PoolSource, PoolSpec, StaticPools, is_multi_pool
from preheat.router.pools.static import parse_pools
from preheat.router.settings import (
    DEFAULT_TARGET_KEY,
    MAX_IN_FLIGHT_KEY,
    RoutingBase,
    parse_routing,
)
from preheat.wire.coalesce import CoalesceConfig
from preheat.wire.tokens import TokenError, read_token

log = logging.getLogger("preheat.router")


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("router")
    g.add_argument(
        "--discovery",
        default=_env("PREHEAT_DISCOVERY"),
        help="static:FILE (YAML/JSON: one pool's endpoints, or the multi-pool form; re-read "
        "on change) or kubernetes:NAMESPACE/SELECTOR (one pool's pods); default: every "
        "InferencePool of --namespaces and its worker pods, from the Kubernetes API "
        "(env PREHEAT_DISCOVERY)",
    )
    g.add_argument(
        "--namespaces",
        default=_env("PREHEAT_WATCH_NAMESPACES"),
        help="without --discovery: the namespaces whose InferencePools are served, "
        "comma-separated; empty: every namespace (env PREHEAT_WATCH_NAMESPACES)",
    )
    g.add_argument("--pool", default=_env("PREHEAT_POOL"), help="pool name (env PREHEAT_POOL)")
    g.add_argument(
        "--model",
        default=_env("PREHEAT_MODEL"),
        help="served model name for /v1/models and request checks (env PREHEAT_MODEL)",
    )
    g.add_argument(
        "--routing-config",
        default=_env("PREHEAT_ROUTING_CONFIG") or None,
        help="scheduler config YAML (see router/example-routing.yaml)",
    )
    g.add_argument(
        "--policy",
        choices=POLICIES,
        default=None,
        help="routing policy; overrides the config file's (default preheat)",
    )
    g.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    g.add_argument("--grpc-port", type=port_number, default=50050, help="gRPC port; 0 = ephemeral")
    g.add_argument("--http-port", type=port_number, default=8000, help="HTTP port; 0 = ephemeral")
    g.add_argument("--region", default=_env("PREHEAT_REGION"), help="router's region")
    g.add_argument("--zone", default=_env("PREHEAT_ZONE"), help="router's zone")
    g.add_argument(
        "--tokenizer",
        default=_env("PREHEAT_TOKENIZER", "sim"),
        help="sim, sim:VOCAB or hf:PATH (must match the workers' for prefix matching)",
    )
    g.add_argument(
        "--coalesce-tokens",
        type=int,
        default=1,
        help="proxy: flush every N tokens (1 = no coalescing, the default)",
    )
    g.add_argument(
        "--coalesce-ms",
        type=float,
        default=5.0,
        help="proxy: flush buffered tokens after T ms at the latest (default 5)",
    )
    g.add_argument(
        "--coalesce-at",
        choices=("worker", "router"),
        default="worker",
        help="where tokens are merged: worker (the router asks each worker, so both hops "
        "carry fewer messages; the default) or router (the front ends merge what arrives)",
    )
    g.add_argument(
        "--no-forward-token-ids",
        dest="forward_token_ids",
        action="store_false",
        help="always send workers the prompt text (by default a worker whose tokenizer has "
        "the router's tokenizer's name gets the router's token ids: tokenized once)",
    )
    g.add_argument(
        "--max-queue",
        type=int,
        default=256,
        help="requests that may wait for a routable endpoint; beyond: rejected at once",
    )
    g.add_argument(
        "--queue-timeout-s",
        type=float,
        default=10.0,
        help="how long a request may wait for a routable endpoint (default 10)",
    )
    g.add_argument(
        "--max-retries",
        type=int,
        default=2,
        help="re-routes of a request whose worker failed before the first token",
    )
    g.add_argument(
        "--default-ttft-target-ms",
        type=float,
        default=None,
        help="TTFT target (ms) of requests that name no deadline or SLO class: admission "
        "rejects what no endpoint is predicted to start within it, and the bound on requests "
        "in flight adapts to it (default: the config file's defaultTtftTargetMs, else 2000; "
        "0: none)",
    )
    g.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="hard ceiling of the pool's requests in flight at this router; beyond: 429 "
        "with Retry-After (default: config maxInFlight, else 0 = the endpoints' max_num_seqs)",
    )
    g.add_argument(
        "--first-token-timeout-s",
        type=float,
        default=10.0,
        help="a worker that sends no token this long is given up on; the request is re-routed "
        "when nothing was sent to the client yet (default 10; 0: none)",
    )
    g.add_argument(
        "--request-timeout-s",
        type=float,
        default=600.0,
        help="HTTP: a request's time from receipt to its last chunk (default 600; 0: none)",
    )
    g.add_argument(
        "--header-timeout-s",
        type=float,
        default=10.0,
        help="HTTP: a connection whose request headers do not arrive within this is closed "
        "(also the idle keep-alive timeout; default 10)",
    )
    g.add_argument(
        "--body-timeout-s",
        type=float,
        default=30.0,
        help="HTTP: a request body that does not arrive within this is answered 408 (default 30)",
    )
    g.add_argument(
        "--max-body-bytes",
        type=int,
        default=HttpLimits().max_body_bytes,
        help="HTTP: larger request bodies are refused with 413 before they are read "
        f"(default {HttpLimits().max_body_bytes})",
    )
    g.add_argument(
        "--drain-grace-s",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, how long requests in flight may take; new ones get 503 / "
        "UNAVAILABLE at once (default 30)",
    )
    g.add_argument(
        "--refresh-interval-s",
        type=float,
        default=1.0,
        help="endpoint Status poll and /metrics scrape interval (default 1)",
    )
    g.add_argument(
        "--api-keys-file",
        default=_env("PREHEAT_API_KEYS_FILE"),
        help="require 'Authorization: Bearer KEY' on the HTTP API with a key from this file "
        "(one 'KEY [TENANT]' a line; /healthz, /ready, /metrics stay open); default: open "
        "(env PREHEAT_API_KEYS_FILE)",
    )
    g.add_argument(
        "--pick-token-file",
        default=_env("PREHEAT_PICK_TOKEN_FILE"),
        help="require metadata 'authorization: Bearer TOKEN' on Router.Pick/PickBatch/"
        "PickStream with a token from this file (one a line); default: open "
        "(env PREHEAT_PICK_TOKEN_FILE)",
    )
    g.add_argument(
        "--tenant-header",
        default=_env("PREHEAT_TENANT_HEADER"),
        help="header / gRPC metadata in which a trusted gateway names the tenant (e.g. "
        "x-tenant); it salts prefix-cache hashes per tenant. An API key's tenant wins. "
        "Default: none (env PREHEAT_TENANT_HEADER)",
    )
    g.add_argument(
        "--worker-cache-token-file",
        default=_env("PREHEAT_WORKER_CACHE_TOKEN_FILE"),
        help="file holding the workers' cache token, sent on WorkerControl.WatchCache to "
        "workers started with --cache-token-file (env PREHEAT_WORKER_CACHE_TOKEN_FILE, or "
        "the token itself in PREHEAT_CACHE_TOKEN); default: none",
    )
    g.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=_env("PREHEAT_LOG_FORMAT", "kv"),
        help="kv (key=value) or json (env PREHEAT_LOG_FORMAT)",
    )
    g.add_argument("--log-level", default="INFO")
    add_tracing_flag(g)


def load_config_file(text: str) -> tuple[SchedulerConfig, dict[str, float]]:
    """The scheduler config and the SLO-class deadlines (a view of its traffic classes)
    from one YAML text; every problem at once (``ValueError``)."""
    sched, traffic, _ = load_config_file_full(text)
    return sched, traffic.deadlines_ms


def load_config_file_full(
    text: str,
) -> tuple[SchedulerConfig, Traffic, dict[str, float]]:
    """:func:`load_config_file` plus the admission keys given (``defaultTtftTargetMs``,
    ``maxInFlight``), by key."""
    data: Any = yamlfile.load(text) if text.strip() else {}
    return parse_routing(data)


def build_discovery(spec: str) -> DiscoverySource:
    kind, _, arg = spec.partition(":")
    if kind == "static" and arg:
        return StaticDiscovery(Path(arg))
    if kind == "kubernetes" and arg:
        namespace, _, selector = arg.partition("/")
        if not namespace or not selector:
            raise ValueError(
                f"--discovery kubernetes:NAMESPACE/SELECTOR needs both parts, got {arg!r}"
            )
        from preheat.router.endpoints import KubernetesDiscovery

        return KubernetesDiscovery(namespace, selector)
    raise ValueError(f"--discovery must be static:FILE or kubernetes:NAMESPACE/SELECTOR: {spec!r}")


def parse_namespaces(text: str) -> tuple[str, ...]:
    """``--namespaces``: comma-separated names ("" = every namespace)."""
    return tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def build_sources(
    spec: str, pool: str = "", model: str = "", namespaces: tuple[str, ...] = ()
) -> tuple[DiscoverySource | None, PoolSource | None]:
    """What ``--discovery`` names: one pool's endpoints (``kubernetes:NS/SELECTOR``, a
    single-pool static file) or a source of pools (a multi-pool static file; nothing: the
    InferencePools of ``namespaces`` from the Kubernetes API). ValueError for a spec (or a
    static file) that is not right."""
    if not spec:
        from preheat.router.pools.kubernetes import KubernetesPools

        return None, KubernetesPools(namespaces)
    kind, _, arg = spec.partition(":")
    if kind == "static" and arg:
        path = Path(arg)
        default = PoolSpec(name=pool, model=model)
        try:
            data = decode_pools_file(path, path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ValueError(f"--discovery {spec}: cannot read: {e}") from None
        except StaticDiscoveryError as e:
            raise ValueError(str(e)) from None
        try:
            # every problem of the file before the router listens: checked only by the
            # watcher, a bad address or a duplicate id ended the started router with
            # "unhandled errors in a TaskGroup" and a traceback in the log
            if is_multi_pool(data):
                parse_pools(data, origin=str(path), default=default)
            else:
                parse_endpoints(data, origin=str(path))
        except StaticDiscoveryError as e:
            raise ValueError(f"--discovery: {e}") from None
        if is_multi_pool(data):
            return None, StaticPools(path, default)
    return build_discovery(spec), None


def build_config(args: argparse.Namespace) -> RouterConfig:
    """RouterConfig from flags; ValueError naming every problem."""
    problems: list[str] = []
    sched = SchedulerConfig()
    traffic = Traffic()
    extra: dict[str, float] = {}
    raw: Any = {}
    if args.routing_config:
        try:
            text = Path(args.routing_config).read_text()
            sched, traffic, extra = load_config_file_full(text)
            raw = yamlfile.load(text) if text.strip() else {}
        except OSError as e:
            problems.append(f"--routing-config {args.routing_config}: cannot read: {e}")
        except (ValueError, yaml.YAMLError) as e:
            problems.append(f"--routing-config {args.routing_config}: {e}")
    if args.policy:
        sched = dataclasses.replace(sched, policy=args.policy)
    if args.pool and not sched.pool:
        sched = dataclasses.replace(sched, pool=args.pool)
    try:
        build_tokenizer(args.tokenizer)
    except ValueError as e:
        problems.append(str(e))
    coalesce = CoalesceConfig()
    try:
        coalesce = CoalesceConfig(args.coalesce_tokens, args.coalesce_ms / 1e3)
    except ValueError as e:
        problems.append(str(e))
    for flag, v in (("--max-queue", args.max_queue), ("--max-retries", args.max_retries)):
        if v < 0:
            problems.append(f"{flag} must be >= 0, got {v}")
    for flag, v, positive in (  # NaN passed a plain `< 0` and the router ran with it
        ("--queue-timeout-s", args.queue_timeout_s, False),
        ("--drain-grace-s", args.drain_grace_s, False),
        ("--refresh-interval-s", args.refresh_interval_s, True),
        ("--first-token-timeout-s", args.first_token_timeout_s, False),
    ):
        if not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
            problems.append(f"{flag} must be {'> 0' if positive else '>= 0'} and finite, got {v}")
    keys: dict[str, KeySet | None] = {}
    for flag, path in (
        ("--api-keys-file", args.api_keys_file),
        ("--pick-token-file", args.pick_token_file),
    ):
        try:
            keys[flag] = KeySet.from_file(path) if path else None
        except CredentialFileError as e:
            problems.append(f"{flag} {e}")
    cache_token = ""
    try:
        cache_token = read_token(args.worker_cache_token_file, "PREHEAT_CACHE_TOKEN")
    except TokenError as e:
        problems.append(f"--worker-cache-token-file: {e}")
    target = args.default_ttft_target_ms
    if target is None:
        target = extra.get(DEFAULT_TARGET_KEY, AdmissionConfig().default_ttft_target_ms)
    max_in_flight = args.max_in_flight
    if max_in_flight is None:
        max_in_flight = int(extra.get(MAX_IN_FLIGHT_KEY, 0))
    adm = AdmissionConfig()
    try:
        adm = AdmissionConfig(default_ttft_target_ms=target, max_in_flight=max_in_flight)
    except ValueError as e:
        problems.append(f"--default-ttft-target-ms/--max-in-flight: {e}")
    http = HttpLimits()
    try:
        http = HttpLimits(
            max_body_bytes=args.max_body_bytes,
            header_timeout_s=args.header_timeout_s,
            body_timeout_s=args.body_timeout_s,
            request_timeout_s=args.request_timeout_s,
        )
    except ValueError as e:
        problems.append(f"HTTP limits: {e}")
    if problems:
        raise ValueError("; ".join(problems))
    return RouterConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        pool=args.pool,
        model=args.model,
        region=args.region,
        zone=args.zone,
        scheduler=sched,
        tokenizer=args.tokenizer,
        coalesce=coalesce,
        coalesce_at=args.coalesce_at,
        forward_token_ids=args.forward_token_ids,
        max_retries=args.max_retries,
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout_s,
        traffic=traffic,
        refresh_interval_s=args.refresh_interval_s,
        api_keys=keys["--api-keys-file"],
        pick_tokens=keys["--pick-token-file"],
        tenant_header=args.tenant_header.strip().lower(),
        worker_cache_token=cache_token,
        admission=adm,
        first_token_timeout_s=args.first_token_timeout_s,
        http=http,
        drain_grace_s=args.drain_grace_s,
        routing_base=RoutingBase(
            raw=dict(raw) if isinstance(raw, Mapping) else {},
            policy=args.policy,
            default_ttft_target_ms=args.default_ttft_target_ms,
            max_in_flight=args.max_in_flight,
        ),
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, level=args.log_level.upper(), component="router")
    try:
        config = build_config(args)
        discovery, pool_source = build_sources(
            args.discovery, args.pool, args.model, parse_namespaces(args.namespaces)
        )
    except ValueError as e:
        log.error("bad_configuration", extra=fields(error=str(e)))
        print(f"preheat router: {e}", file=sys.stderr)
        return 2
    tracing = setup_tracing(args.tracing, "preheat-router")
    config = dataclasses.replace(config, tracing=tracing)
    try:
        return aio.run(serve(discovery, config, pool_source=pool_source))
    finally:
        if tracing is not None:
            tracing.shutdown()


async def serve(
    discovery: DiscoverySource | None,
    config: RouterConfig,
    *,
    pool_source: PoolSource | None = None,
) -> int:
    """Runs the router until SIGTERM/SIGINT; returns the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    now = asyncio.Event()  # a second signal: no more draining

    def on_signal(signum: int) -> None:
        log.info("signal_received", extra=fields(signal=signal.Signals(signum).name))
        if stop.is_set():
            now.set()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    server = RouterServer(discovery, config, pool_source=pool_source)
    status = 0
    try:
        try:
            ports = await server.start()
        except TokenizerLoadError as e:
            log.error("tokenizer_failed", extra=fields(error=str(e)))
            print(f"preheat router: cannot load the tokenizer: {e}", file=sys.stderr, flush=True)
            return 2
        print(json.dumps(describe(ports)), flush=True)
        stopper = asyncio.ensure_future(stop.wait())
        assert server.store_task is not None
        try:
            await asyncio.wait({stopper, server.store_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if server.store_task.done() and not server.store_task.cancelled():
            err = server.store_task.exception()
            log.error("discovery_failed", extra=fields(error=str(err)))
            status = 2
        else:
            drain = asyncio.ensure_future(server.drain(config.drain_grace_s))
            hurry = asyncio.ensure_future(now.wait())
            try:
                await asyncio.wait({drain, hurry}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                drain.cancel()
                hurry.cancel()
    finally:
        await server.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return status


if __name__ == "__main__":
    from preheat.cli import main

    sys.exit(main(["router", *sys.argv[1:]]))
