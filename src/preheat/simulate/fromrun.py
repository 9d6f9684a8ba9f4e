"""What a simulation assumes, said at the top of its report, and ``--from-run RUN_DIR``: the
settings of a ``preheat up`` run, so that a simulation of the same pool and trace slice is
compared with that live run like for like.

By default ``preheat simulate`` models a production start-up: the operator evaluates every
15 s, and a new worker pulls its image (30 s, assumed), loads (engine init and weights from
the H100 cost model, 15.7 s) and warms up (10 s) before it takes traffic. ``preheat up`` on
this machine evaluates every 2 s and its workers are local processes that start in seconds,
so the two can differ by much more than the simulator's error: the report names each
assumption and where it came from (a default, a flag, or the run folder).

From a run folder (``settings.json``, written by ``preheat up``; ``events.jsonl``):

- the autoscaler's evaluation period and the router's refresh period, as the run had them;
- no image pull (local processes);
- worker start-up **as measured in the run**: the median time from a worker's ``start``
  event to its ``ready`` event (process start, imports, the sim's load and warm-up), split
  into warm-up (the sim workers' setting) and load (the rest); without such events, the
  sim workers' own ``loadTime`` / ``warmupTime`` (times their time scale);
- the sim workers' time scale.

Flags given on the command line win over the run's values.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from preheat.engine.costmodel import WARMUP_S, CostModel
from preheat.report.record import (
    RunFormatError,
    RunSettings,
    ScaleEvent,
    read_events,
    read_settings,
)
from preheat.simulate.options import SimInputError, SimOptions, Startup

# keys of the origins map: what each assumption is, for the report
AUTOSCALE, REFRESH, IMAGE_PULL, LOAD, WARMUP, PROMOTE = (
    "autoscale",
    "refresh",
    "image_pull",
    "load",
    "warmup",
    "promote",
)
DEFAULT_ORIGINS: Mapping[str, str] = {
    AUTOSCALE: "default: the operator's",
    REFRESH: "default: the router's",
    IMAGE_PULL: "assumed",
    LOAD: "H100 cost model: engine init + weights, measured",
    WARMUP: "assumed, the cost model's",
    PROMOTE: "assumed",
}


@dataclass(frozen=True)
class RunBasis:
    """A live run's settings and measured worker start-ups."""

    folder: Path
    settings: RunSettings
    startups_s: tuple[float, ...]  # start -> ready of each worker start, in the run


def startups(events: Sequence[ScaleEvent]) -> tuple[float, ...]:
    """Seconds from each worker's ``start`` to its next ``ready`` (restarts counted anew)."""
    started: dict[str, float] = {}
    out: list[float] = []
    for e in sorted(events, key=lambda e: e.t_s):
        if not e.worker:
            continue
        if e.kind == "start":
            started[e.worker] = e.t_s
        elif e.kind == "ready" and e.worker in started:
            out.append(e.t_s - started.pop(e.worker))
    return tuple(out)


def read_basis(folder: Path | str) -> RunBasis:
    """The run's ``settings.json`` and worker start-ups; :class:`SimInputError` saying what
    is wrong when the folder is not a ``preheat up`` run."""
    root = Path(folder)
    try:
        settings = read_settings(root)
        events = read_events(root)
    except RunFormatError as e:
        raise SimInputError(f"--from-run {root}: {e}") from None
    return RunBasis(root, settings, startups(events))


def options_from_run(
    basis: RunBasis, options: SimOptions, explicit: Mapping[str, bool]
) -> tuple[SimOptions, dict[str, str]]:
    """``options`` with the run's settings (but where ``explicit[key]``: a flag set it), and
    where each assumption comes from."""
    s = basis.settings
    where = f"from {basis.folder}"
    origins = dict(DEFAULT_ORIGINS)
    out = options
    if not explicit.get(AUTOSCALE):
        out = replace(out, autoscale_interval_s=s.autoscale_interval_s)
        origins[AUTOSCALE] = where
    if not explicit.get(REFRESH):
        out = replace(out, refresh_interval_s=s.router_refresh_interval_s)
        origins[REFRESH] = where
    startup = out.startup
    if not explicit.get(IMAGE_PULL):
        startup = replace(startup, image_pull_s=s.image_pull_s)
        origins[IMAGE_PULL] = f"{where}: local processes"
    scale = s.worker_time_scale if s.worker_time_scale is not None else 1.0
    warmup = scale * (s.worker_warmup_s if s.worker_warmup_s is not None else WARMUP_S)
    if basis.startups_s:
        total = statistics.median(basis.startups_s)
        n = len(basis.startups_s)
        load = max(0.0, total - warmup)
        warmup = min(warmup, total)
        origins[LOAD] = (
            f"measured {where}: median start -> ready {total:.2f} s over {n} worker "
            f"start{'s' if n != 1 else ''}, less the warm-up"
        )
        origins[WARMUP] = f"{where}: the sim workers' setting"
        startup = replace(startup, load_s=load, warmup_s=warmup)
    else:
        nominal = s.worker_load_s
        if nominal is not None:
            startup = replace(startup, load_s=scale * nominal)
            origins[LOAD] = f"{where}: the sim workers' setting"
        startup = replace(startup, warmup_s=warmup)
        origins[WARMUP] = f"{where}: the sim workers' setting"
    out = replace(out, startup=startup)
    if s.worker_time_scale is not None and "time_scale" not in out.engine_options:
        out = replace(out, engine_options={**out.engine_options, "time_scale": scale})
    return out, origins


def _s(x: float) -> str:
    return f"{x:.3g} s" if x < 10 else f"{x:.1f} s"


def describe_assumptions(
    cost: CostModel, options: SimOptions, origins: Mapping[str, str] = DEFAULT_ORIGINS
) -> list[str]:
    """The start-up and interval assumptions of a simulation, one line each, with where each
    came from; printed at the top of the report and kept in ``meta.extra["assumptions"]``.
    ``cost`` is the simulated replica's cost model (``world.engine_config(pool, options)``)."""
    su: Startup = options.startup
    load = su.load_s
    if load is None:
        load = replace(cost, page_cache=su.page_cache).loading_s()
    warmup = su.warmup_s if su.warmup_s is not None else cost.warming_s()
    total = su.image_pull_s + load + warmup
    o = {**DEFAULT_ORIGINS, **origins}
    route = options.network
    return [
        f"autoscaler: evaluates every {_s(options.autoscale_interval_s)} ({o[AUTOSCALE]})",
        f"new worker: ready {_s(total)} after it is started = image pull "
        f"{_s(su.image_pull_s)} ({o[IMAGE_PULL]}) + load {_s(load)} ({o[LOAD]}) + warm-up "
        f"{_s(warmup)} ({o[WARMUP]})",
        f"standby -> active: {_s(su.promote_s)} ({o[PROMOTE]})",
        f"router: refreshes endpoints every {_s(options.refresh_interval_s)} ({o[REFRESH]}); "
        f"{route.router_overhead_ms:g} ms overhead per request; {options.max_retries} retries; "
        f"holds requests up to {_s(options.queue_timeout_s)} with no endpoint",
        f"pods at t=0: {'cold (starting)' if options.cold_start else 'warm'}; engine time "
        f"scale {cost.scale:g} (1 = a calibrated H100)",
    ]


__all__ = [
    "DEFAULT_ORIGINS",
    "RunBasis",
    "describe_assumptions",
    "options_from_run",
    "read_basis",
    "startups",
]
