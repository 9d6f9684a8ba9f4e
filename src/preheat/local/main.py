"""``preheat up -f POOL.yaml``: run an InferencePool on this machine.

``-f`` more than once runs every pool given behind one router (:mod:`preheat.local.fleet`):
each in its own folder of the run folder; two pools serving the same model are refused.

Exit status: 0 after a clean drain (Ctrl-C / SIGTERM; a second one kills the children at
once), 2 for a bad pool file or flags, or pools that do not fit this machine together (one
message listing every problem; nothing is started).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import shlex
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

from preheat.api.poolfile import PoolFile, PoolFileError, load_pool
from preheat.local import capacity
from preheat.local.fleet import LocalFleet, SharedRouter, model_clashes, pool_out
from preheat.local.runtime import LocalPool, UpOptions, local_config
from preheat.local.settings import up_settings
from preheat.local.view import LiveView, LogView
from preheat.process.logs import LOG_FORMATS, fields, setup_logging
from preheat.process.ports import port_number
from preheat.report.record import write_settings

log = logging.getLogger("preheat.local")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--file",
        required=True,
        action="append",
        metavar="POOL.yaml",
        help="the InferencePool file; again for more pools behind one router (each its own "
        "model; their run records in RUN_DIR/POOL/)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="RUN_DIR",
        help="run folder: events and replicas for `preheat report`, logs, endpoints "
        "(default runs/up-<time>)",
    )
    parser.add_argument(
        "--engine",
        choices=("sim", "vllm"),
        default="sim",
        help="the workers' engine (default sim, whatever the pool says)",
    )
    parser.add_argument("--router-grpc-port", type=port_number, default=0, help="0: a free port")
    parser.add_argument("--router-http-port", type=port_number, default=0, help="0: a free port")
    parser.add_argument(
        "--interval-s", type=float, default=2.0, help="autoscaler evaluation period (default 2)"
    )
    parser.add_argument(
        "--drain-grace-s",
        type=float,
        default=10.0,
        help="a draining worker's in-flight requests get this long (default 10)",
    )
    parser.add_argument(
        "--startup-timeout-s",
        type=float,
        default=0.0,
        help="a worker not warm this long after its start is killed and restarted "
        "(default: the operator's startup budget, 300 s for sim, 1800 s for vllm)",
    )
    parser.add_argument(
        "--max-starting",
        type=int,
        default=2,
        metavar="K",
        help="workers starting (not warm yet) at once; more wait their turn (default 2)",
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        default=0,
        metavar="N",
        help="the most worker processes this machine runs at once (default: from its CPUs: "
        f"{capacity.SIM_WORKERS_PER_CPU} sim workers per CPU, one vLLM worker per "
        f"{capacity.CPUS_PER_VLLM_WORKER} CPUs, at most {capacity.MAX_WORKERS})",
    )
    parser.add_argument(
        "--worker-memory",
        default="",
        metavar="SIZE",
        help="one worker's memory, e.g. 2Gi (default: the pool's resources.memory, else an "
        "estimate: 150 MiB per sim worker; a vLLM worker's runtime + weights + KV cache)",
    )
    parser.add_argument(
        "--allow-oversubscribe",
        action="store_true",
        help="run a pool that does not fit this machine's CPUs or memory anyway",
    )
    parser.add_argument(
        "--prometheus",
        default="",
        metavar="URL",
        help="read signals from this Prometheus (it scrapes the workers listed in "
        "RUN_DIR/prometheus-targets.json); unreachable: direct scrape",
    )
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra `preheat worker` flag for every worker, e.g. --worker-arg=--sim-time-scale=2",
    )
    parser.add_argument(
        "--router-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra `preheat router` flag, e.g. --router-arg=--policy=p2c",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="the router and every worker export OpenTelemetry traces (OTLP/gRPC), configured "
        "by the standard OTEL_* variables they inherit (OTEL_EXPORTER_OTLP_ENDPOINT, ...)",
    )
    parser.add_argument(
        "--no-ui",
        action="store_true",
        help="structured logs instead of the live view (the default when not a terminal)",
    )
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, default="kv", help="with --no-ui: kv or json lines"
    )


def _problems(args: argparse.Namespace) -> list[str]:
    out = []
    # NaN passed the `<= 0` / `< 0` forms of these; an infinite wait is not a setting either
    if not 0 < args.interval_s < math.inf:
        out.append(f"--interval-s must be > 0 and finite (got {args.interval_s:g})")
    if not 0 <= args.startup_timeout_s < math.inf:
        out.append(f"--startup-timeout-s must be >= 0 and finite (got {args.startup_timeout_s:g})")
    if not 0 <= args.drain_grace_s < math.inf:
        out.append(f"--drain-grace-s must be >= 0 and finite (got {args.drain_grace_s:g})")
    if args.max_starting < 1:
        out.append(f"--max-starting must be >= 1 (got {args.max_starting})")
    if args.max_workers < 0:
        out.append(f"--max-workers must be >= 0 (got {args.max_workers})")
    if args.worker_memory:
        try:
            capacity.parse_bytes(args.worker_memory)
        except ValueError as e:
            out.append(f"--worker-memory: {e}")
    if args.prometheus and not args.prometheus.startswith(("http://", "https://")):
        # "unknown url type", then a warning and the direct scrape: a typo is not an outage
        out.append(f"--prometheus must be an http:// or https:// URL (got {args.prometheus!r})")
    return out  # the router's ports: checked by argparse (process.ports.port_number)


def _prometheus_ok(url: str) -> str:
    """ "" when ``url`` answers /-/ready, else why not."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/-/ready", timeout=2.0) as resp:
            return "" if resp.status == 200 else f"status {resp.status}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return str(getattr(e, "reason", e))


def _load(files: list[str]) -> tuple[list[PoolFile], list[str]]:
    """Every pool file, and every problem of every file (and of the pools together)."""
    pools: list[PoolFile] = []
    errors: list[str] = []
    for f in files:
        try:
            pools.append(load_pool(f))
        except PoolFileError as e:
            errors.append(e.describe())
    if not errors and len(pools) > 1:
        errors += model_clashes(pools)
    return pools, errors


def run(args: argparse.Namespace) -> int:
    ui = not args.no_ui and sys.stdout.isatty()
    if ui:
        logging.basicConfig(level=logging.WARNING)  # the view shows what matters
    else:
        setup_logging(args.log_format, level=logging.INFO)
    problems = _problems(args)
    files: list[str] = args.file
    if len(files) > 1 and args.prometheus:
        problems.append(
            "--prometheus takes one pool (its file_sd targets); with several -f each pool "
            "scrapes its workers and the router directly"
        )
    if len(files) == 1:
        try:
            pool = load_pool(files[0])
        except PoolFileError as e:
            print(f"preheat up: {e.describe('nothing was started')}", file=sys.stderr)
            if problems:
                print("  and the flags: " + "; ".join(problems), file=sys.stderr)
            return 2
        pools = [pool]
    else:
        pools, errors = _load(files)
        if errors:
            print(
                "preheat up: the pools cannot run together; nothing was started:\n  "
                + "\n  ".join(errors),
                file=sys.stderr,
            )
            if problems:
                print("  and the flags: " + "; ".join(problems), file=sys.stderr)
            return 2
    if problems:
        print("preheat up: " + "; ".join(problems) + "; nothing was started", file=sys.stderr)
        return 2
    limits = capacity.Limits(
        max_workers=args.max_workers, allow_oversubscribe=args.allow_oversubscribe
    )
    declared = capacity.parse_bytes(args.worker_memory) if args.worker_memory else 0
    if len(pools) == 1:
        verdict = capacity.check(
            local_config(pool.config, args.engine), limits, declared_bytes=declared
        )
        fits, reason, caps = verdict.fits, verdict.reason, [verdict.worker_limit]
        where = f"{files[0]}: the pool does not fit"
    else:
        together = capacity.check_pools(
            [(p.name, local_config(p.config, args.engine)) for p in pools],
            limits,
            declared_bytes=declared,
        )
        fits, reason, caps = together.fits, together.reason, list(together.worker_limits)
        where = f"{', '.join(files)}: the pools do not fit together on"
    if not fits:
        print(
            f"preheat up: {where} this machine: {reason}; "
            "nothing was started. Lower replicas.max (or warmStandby), or pass --max-workers "
            "N, --worker-memory SIZE or --allow-oversubscribe to run it anyway.",
            file=sys.stderr,
        )
        return 2
    log.log(
        logging.WARNING if reason.startswith("oversubscribed") else logging.INFO,
        "capacity_checked",
        extra=fields(pool=",".join(p.name for p in pools), verdict=reason),
    )
    prometheus = args.prometheus
    if prometheus:
        why = _prometheus_ok(prometheus)
        if why:
            log.warning(
                "prometheus_unreachable",
                extra=fields(url=prometheus, error=why, using="direct scrape"),
            )
            prometheus = ""
    out = Path(args.out or f"runs/up-{time.strftime('%Y%m%d-%H%M%S')}")
    options = UpOptions(
        out=out,
        engine=args.engine,
        router_grpc_port=args.router_grpc_port,
        router_http_port=args.router_http_port,
        interval_s=args.interval_s,
        drain_grace_s=args.drain_grace_s,
        startup_budget_s=args.startup_timeout_s,
        worker_args=(*args.worker_arg, *(["--tracing"] if args.tracing else [])),
        router_args=(*args.router_arg, *(["--tracing"] if args.tracing else [])),
        prometheus_url=prometheus,
        command=shlex.join(["preheat", "up", *sys.argv[2:]]),
        max_starting=args.max_starting,
        max_workers=caps[0],
    )
    view: LiveView | LogView = LiveView() if ui else LogView()
    try:
        if len(pools) == 1:
            single = LocalPool(pool, options, view)
            _write_settings(pool.path, single, options)
            runtime: LocalPool | LocalFleet = single
        else:
            host = SharedRouter(pools, options)
            members = []
            for p, cap in zip(pools, caps, strict=True):
                own = replace(options, out=pool_out(out, p), max_workers=cap)
                members.append(LocalPool(p, own, view, host=host))
                _write_settings(p.path, members[-1], own)
            runtime = LocalFleet(members, host)
    except OSError as e:
        print(f"preheat up: cannot write the run folder {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    with view:
        return asyncio.run(_serve(runtime, prometheus))


def _write_settings(path: str, runtime: LocalPool, options: UpOptions) -> None:
    """For `preheat simulate --from-run` (the same settings, simulated)."""
    write_settings(
        options.out,
        up_settings(
            runtime.config,
            pool_file=str(Path(path).resolve()),
            engine=options.engine,
            autoscale_interval_s=options.interval_s,
            worker_args=options.worker_args,
            router_args=options.router_args,
        ),
    )


async def _serve(runtime: LocalPool | LocalFleet, prometheus: str) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, runtime.stop)
    log.info(
        "up_started",
        extra=fields(pool=_names(runtime), router=runtime.router_address, out=str(runtime.out)),
    )
    try:
        code = await runtime.run()
        if runtime.fatal:
            print(f"preheat up: {runtime.fatal}", file=sys.stderr)
        return code
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        log.info("up_stopped", extra=fields(pool=_names(runtime), out=str(runtime.out)))


def _names(runtime: LocalPool | LocalFleet) -> str:
    if isinstance(runtime, LocalPool):
        return runtime.pool.name
    return ",".join(p.pool.name for p in runtime.pools)
