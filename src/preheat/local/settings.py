"""The settings a ``preheat up`` run records in its run folder (``settings.json``), so that
``preheat simulate --from-run RUN_DIR`` models the same control plane and worker start-up.

Only what decides how fast the pool reacts: the autoscaler's evaluation period, the router's
refresh period, and the sim workers' start-up phases (the pool's engine args, overridden by
``--worker-arg`` flags, as the workers get them). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from preheat.core.pool import PoolConfig
from preheat.report.record import RunSettings

ROUTER_REFRESH_DEFAULT_S = 1.0  # `preheat router --refresh-interval-s` default (RouterConfig)


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` in ``argv`` (``--flag=V`` or ``--flag V``), else None."""
    value: str | None = None
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def _number(argv: Sequence[str], flag: str, fallback: float | None) -> float | None:
    raw = flag_value(argv, flag)
    if raw is None:
        return fallback
    try:
        return float(raw)
    except ValueError:
        return fallback  # the worker or router refuses it, and up stops with its error


def up_settings(
    config: PoolConfig,
    *,
    pool_file: str,
    engine: str,
    autoscale_interval_s: float,
    worker_args: Sequence[str],
    router_args: Sequence[str],
) -> RunSettings:
    """What ``preheat up`` runs ``config`` (already the local config) with."""
    args = dict(config.engine.args)

    def arg(key: str) -> float | None:
        v = args.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return RunSettings(
        pool_file=pool_file,
        engine=engine,
        autoscale_interval_s=autoscale_interval_s,
        router_refresh_interval_s=_number(
            router_args, "--refresh-interval-s", ROUTER_REFRESH_DEFAULT_S
        )
        or ROUTER_REFRESH_DEFAULT_S,
        image_pull_s=0.0,
        worker_load_s=_number(worker_args, "--sim-load-s", arg("loadTime")),
        worker_warmup_s=_number(worker_args, "--sim-warmup-s", arg("warmupTime")),
        worker_time_scale=_number(worker_args, "--sim-time-scale", arg("timeScale")),
        worker_args=list(worker_args),
        router_args=list(router_args),
    )


__all__ = ["flag_value", "up_settings"]
