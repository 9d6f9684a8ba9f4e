"""``preheat simulate``: replay a trace against a pool in virtual time.

    preheat simulate --pool pool.yaml --trace FILE [--routing CONFIG] [--network FILE]
        [--set KEY=VALUE ...] [--sweep KEY=V1,V2,...] [--out RUN_DIR]
    preheat simulate --from-run RUNS/UP_RUN --trace FILE ...   (a `preheat up` run's settings)

The report starts with the start-up and interval assumptions the simulation used, and where
each came from (:mod:`preheat.simulate.fromrun`). One run: the run folder (``meta.json``
marked simulated, requests, events, replicas), the same table and plots as ``preheat
report``. A sweep: one run folder per value under
``--out`` and the trade-off table (SLO attainment, goodput, GPU-hours, cache hit rate, TTFT
and ITL p50/p95/p99 per setting; ``--sweep engine.args.quantization=none,fp8`` compares
engine levers). Exit codes: 0 done; 2 bad input, with one message saying what.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from preheat.api.poolfile import PoolDocument
from preheat.api.routing import load_routing_config
from preheat.core.errors import PreheatError
from preheat.core.pool import PoolConfig
from preheat.core.routing.config import SchedulerConfig
from preheat.engine.sim import SimConfig
from preheat.report.record import Run, write_run
from preheat.report.summary import RunSummary
from preheat.simulate import compare, fromrun
from preheat.simulate.options import (
    Network,
    SimInputError,
    SimOptions,
    Startup,
    apply_overrides,
    load_network,
    parse_assignment,
    parse_sweep,
    pool_config,
    read_pool,
)
from preheat.simulate.pareto import Point, next_fixed_probe
from preheat.simulate.world import SimStats, engine_config, simulate
from preheat.workload.superpose import superpose
from preheat.workload.traceargs import add_trace_arguments, read_requests, trace_options
from preheat.workload.traces import TraceError, TraceRequest

TARGET_ATTAINMENT = 0.99  # --compare reads each policy's cost at this attainment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("what to simulate")
    p.add_argument(
        "--pool",
        type=Path,
        default=None,
        help="InferencePool YAML file (default with --from-run: the pool file that run ran)",
    )
    p.add_argument(
        "--from-run",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="take the settings of a `preheat up` run (its run folder): autoscaler and router "
        "intervals, no image pull, the worker start-up measured in the run; flags win",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a pool spec field, e.g. autoscaling.scaleDown.stabilization=600s "
        "(repeatable; values are YAML: 3, 0.5, true, [a, b])",
    )
    p.add_argument(
        "--sweep",
        default=None,
        metavar="KEY=V1,V2,...",
        help="run once per value of one pool spec field and print the trade-off table",
    )
    p.add_argument(
        "--compare",
        default=None,
        metavar="P1,P2,...",
        help="compare policies on the trace, each swept over its knob: preheat (the pool's "
        "own), hpa, keda, kpa, fixed, or all; writes the attainment/GPU-hours table and the "
        "Pareto plot (compare.md, pareto.png) to --out",
    )
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="POLICY=V1,V2,...",
        help="--compare: the values to sweep a policy's knob over (repeatable; see README)",
    )
    p.add_argument(
        "--schedule",
        type=Path,
        default=None,
        metavar="FILE",
        help="--compare scheduled: a reference day's rates (JSON, as `preheat bench traces` "
        "writes), from which each hour's size is set",
    )
    p.add_argument(
        "--forecast-history",
        type=Path,
        default=None,
        metavar="FILE",
        help="the pool's arrival rates before the trace (JSON as --schedule; the last window "
        "ends where the trace starts): the autoscaler's forecast starts having learned them, "
        "as a pool that ran the day before (its forecast is kept in status.policyHistory)",
    )
    p.add_argument(
        "--target-attainment",
        type=float,
        default=None,
        help=f"--compare: the attainment the costs are read at (default {TARGET_ATTAINMENT:g})",
    )
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="--compare: run only the fixed sizes given, not also the sizes skipped under "
        "the hindsight-best one (a long trace's extra runs; the summary then says CAUTION "
        "where the size under the reference was not run)",
    )
    p.add_argument("--routing", type=Path, default=None, help="routing config YAML (router's)")
    p.add_argument("--network", type=Path, default=None, help="RTT matrix YAML (see README)")
    p.add_argument(
        "--client-regions",
        default="",
        metavar="R1=SHARE,R2=SHARE",
        help="where clients are (default: all in the first zone's region)",
    )
    t = parser.add_argument_group("trace")
    add_trace_arguments(t)
    t.add_argument(
        "--copies",
        type=int,
        default=1,
        help="superpose N shifted copies of the trace (N times the rate, own prefixes)",
    )
    s = parser.add_argument_group("control plane and start-up")
    s.add_argument("--seed", type=int, default=0, help="seed (same seed: same report)")
    s.add_argument("--ttft-deadline-ms", type=float, default=None, help="admission deadline")
    s.add_argument(
        "--ttft-objective-ms",
        type=float,
        default=0.0,
        help="TTFT SLO for attainment (default: the pool's TTFT objective, if any)",
    )
    s.add_argument(
        "--default-ttft-target-ms",
        type=float,
        default=None,
        help="the router admits a request that names no deadline against this TTFT, as live "
        "(default: the SLO, as preheat up sets the router's from the pool's TTFT objective; "
        "0: no default target)",
    )
    s.add_argument(
        "--max-in-flight",
        type=int,
        default=0,
        help="the router's ceiling of requests in flight (default 0: the endpoints' "
        "max_num_seqs, as live)",
    )
    s.add_argument(
        "--refresh-interval-s",
        type=float,
        default=None,
        help=f"router scrape period (default {DEFAULT.refresh_interval_s:g})",
    )
    s.add_argument(
        "--autoscale-interval-s",
        type=float,
        default=None,
        help=f"autoscaler evaluation period (default {DEFAULT.autoscale_interval_s:g}, "
        "the operator's)",
    )
    s.add_argument(
        "--image-pull-s",
        type=float,
        default=None,
        help=f"image pull (assumed; default {DEFAULT.startup.image_pull_s:g})",
    )
    s.add_argument(
        "--promote-s",
        type=float,
        default=None,
        help=f"standby -> active (assumed; default {DEFAULT.startup.promote_s:g})",
    )
    s.add_argument(
        "--page-cache", action="store_true", help="weights in the page cache (2.2 s load)"
    )
    s.add_argument("--cold-start", action="store_true", help="pods start cold at t=0")
    s.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="sim engine option (e.g. num_gpu_blocks=12000, time_scale=2)",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "--out", type=Path, default=None, help="run folder (default runs/simulate-<time>)"
    )
    o.add_argument("--name", default="", help="run name (default: the folder's name)")
    o.add_argument("--no-plots", action="store_true", help="print the table only")
    o.add_argument(
        "--jobs", type=int, default=0, help="parallel processes for a sweep (default: CPUs)"
    )


def _fail(message: str) -> int:
    print(f"preheat simulate: {message}", file=sys.stderr)
    return 2


def read_trace(args: argparse.Namespace) -> list[TraceRequest]:
    trace = read_requests(args.trace, trace_options(args))
    if args.max_output_tokens is not None:
        if args.max_output_tokens <= 0:
            raise ValueError(f"--max-output-tokens must be > 0, got {args.max_output_tokens}")
        trace = [
            replace(t, output_tokens=min(t.output_tokens, args.max_output_tokens)) for t in trace
        ]
    if args.copies != 1:
        trace = superpose(trace, args.copies)
    return trace


def _regions(text: str) -> tuple[tuple[str, float], ...]:
    out: list[tuple[str, float]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, raw = parse_assignment(part, "--client-regions")
        try:
            out.append((name, float(raw)))
        except ValueError:
            raise SimInputError(f"--client-regions {part!r}: share must be a number") from None
    return tuple(out)


DEFAULT = SimOptions()


def sim_options(args: argparse.Namespace) -> tuple[SimOptions, dict[str, str]]:
    """The options of the command line (with ``--from-run``'s settings under the flags given)
    and where each start-up and interval assumption comes from."""
    routing: SchedulerConfig | None = None
    if args.routing is not None:
        try:
            text = args.routing.read_text()
        except OSError as e:
            raise SimInputError(f"routing config {args.routing}: {e.strerror or e}") from None
        routing = load_routing_config(text)
    network = load_network(args.network) if args.network is not None else Network()
    engine_options = _engine_options(args.engine_option)
    d = DEFAULT
    explicit = {
        fromrun.AUTOSCALE: args.autoscale_interval_s is not None,
        fromrun.REFRESH: args.refresh_interval_s is not None,
        fromrun.IMAGE_PULL: args.image_pull_s is not None,
        fromrun.PROMOTE: args.promote_s is not None,
    }
    options = SimOptions(
        routing=routing,
        network=network,
        startup=Startup(
            image_pull_s=_or(args.image_pull_s, d.startup.image_pull_s),
            page_cache=args.page_cache,
            promote_s=_or(args.promote_s, d.startup.promote_s),
        ),
        client_regions=_regions(args.client_regions),
        seed=args.seed,
        refresh_interval_s=_or(args.refresh_interval_s, d.refresh_interval_s),
        autoscale_interval_s=_or(args.autoscale_interval_s, d.autoscale_interval_s),
        ttft_deadline_ms=args.ttft_deadline_ms,
        ttft_objective_ms=args.ttft_objective_ms,
        default_ttft_target_ms=args.default_ttft_target_ms,
        max_in_flight=args.max_in_flight,
        cold_start=args.cold_start,
        engine_options=engine_options,
        forecast_history=(
            compare.history_samples(
                compare.read_schedule(args.forecast_history, "--forecast-history")
            )
            if args.forecast_history is not None
            else ()
        ),
    )
    origins = dict(fromrun.DEFAULT_ORIGINS)
    if args.from_run is not None:
        options, origins = fromrun.options_from_run(
            fromrun.read_basis(args.from_run), options, explicit
        )
    for key, given in explicit.items():
        if given:
            origins[key] = "set by a flag"
    if args.page_cache and not explicit.get(fromrun.LOAD):
        origins[fromrun.LOAD] = "H100 cost model, weights in the page cache (--page-cache)"
    return options, origins


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


@dataclass(frozen=True)
class _Job:
    label: str
    pool: Path
    overrides: tuple[tuple[str, str], ...]
    options: SimOptions
    out: Path
    plots: bool


@dataclass(frozen=True)
class _Result:
    label: str
    out: Path
    run: Run
    stats: SimStats


_TRACE: list[TraceRequest] = []  # the trace, per process (set once before the jobs run)


def _run_job(job: _Job, trace: list[TraceRequest] | None = None) -> _Result:
    config = pool_config(read_pool(job.pool), job.overrides)
    run, stats = simulate(config, trace if trace is not None else _TRACE, job.options)
    return _Result(job.label, job.out, run, stats)


def _init_worker(trace: list[TraceRequest]) -> None:
    global _TRACE
    _TRACE = trace


def sweep_table(results: list[_Result]) -> str:
    """The trade-off table: one line per setting."""
    from preheat.report.summary import summarize

    w = min(80, max([7, *(len(r.label) for r in results)]))
    head = (
        f"{'setting':<{w}} {'SLO':>7} {'goodput':>8} {'GPU-h':>8} {'hit':>7} {'TTFT p50':>9}"
        f" {'p95':>8} {'p99':>8} {'ITL p50':>8} {'p95':>6} {'p99':>6} {'ok':>6} {'rej':>5}"
        f" {'err':>5} {'scale':>5}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        s = summarize(r.run)
        gpu_h = float(r.run.meta.extra.get("gpu_hours", 0.0))
        rows.append(
            f"{r.label[:w]:<{w}} {_pct(s.slo_attainment):>7} {_rate(goodput(s)):>8}"
            f" {gpu_h:>8.2f} {_pct(s.cache_hit_rate):>7} {_ms(s.ttft_ms.p50):>9}"
            f" {_ms(s.ttft_ms.p95):>8} {_ms(s.ttft_ms.p99):>8} {_ms1(s.itl_ms.p50):>8}"
            f" {_ms1(s.itl_ms.p95):>6} {_ms1(s.itl_ms.p99):>6} {s.ok:>6} {s.rejected:>5}"
            f" {s.error:>5} {s.scaling_events:>5}"
        )
    return "\n".join(rows)


def goodput(s: RunSummary) -> float | None:
    """Requests per second that finished within the SLO (``slo_attainment`` of every request
    over the run's length); None without an objective."""
    if s.slo_attainment is None or s.duration_s <= 0:
        return None
    return s.slo_attainment * s.requests / s.duration_s


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}/s"


def _ms1(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _pool_path(args: argparse.Namespace) -> Path:
    if args.pool is not None:
        return Path(args.pool)
    if args.from_run is None:
        raise SimInputError("--pool is required (or --from-run RUN_DIR, to take that run's pool)")
    pool_file = fromrun.read_basis(args.from_run).settings.pool_file
    if not pool_file:
        raise SimInputError(f"--from-run {args.from_run}: the run names no pool file; give --pool")
    return Path(pool_file)


def _checked(
    args: argparse.Namespace, pool: PoolDocument, overrides: tuple[tuple[str, str], ...]
) -> tuple[SimOptions, dict[str, str], SimConfig]:
    """The options and their origins, and the simulated replica's engine config (the base
    pool's), every problem of the three layers (the pool file with its overrides, the flags,
    the sim engine's options on that pool) listed at once and before any work: a run with a
    bad pool field, a bad flag and a bad ``--engine-option`` was refused one layer at a time."""
    problems: list[str] = []
    base: PoolConfig | None = None
    options: SimOptions | None = None
    origins: dict[str, str] = {}
    engine: SimConfig | None = None
    try:
        base = pool_config(pool, overrides)
    except PreheatError as e:
        problems.append(str(e))
    try:
        options, origins = sim_options(args)
    except (PreheatError, ValueError) as e:
        problems.append(str(e))
    try:
        if base is not None and options is not None:
            engine = engine_config(base, options)
        else:  # the flags' engine options on their own (a flag that does not parse is
            # among sim_options' problems already)
            SimConfig.from_options(_engine_options(e for e in args.engine_option if "=" in e))
    except PreheatError as e:
        problems.append(str(e))
    if problems or base is None or options is None or engine is None:
        raise SimInputError("\n".join(problems))
    return options, origins, engine


def _engine_options(given: Iterable[str]) -> dict[str, str]:
    """``--engine-option KEY=VALUE`` flags as a mapping (a flag without ``=`` is refused)."""
    return dict(parse_assignment(e, "--engine-option") for e in given)


def run(args: argparse.Namespace) -> int:
    try:
        overrides = tuple(parse_assignment(s) for s in args.set)
        sweep = parse_sweep(args.sweep) if args.sweep else None
        if args.compare and sweep is not None:
            raise SimInputError("--compare and --sweep: give one of them")
        # the comparison's flags before any work (a large trace is read after)
        compared = compare.parse_compare(args.compare) if args.compare else None
        compare.refuse_unused(
            compared,
            compare.parse_knobs(args.knob),
            schedule_given=args.schedule is not None,
            attainment_given=args.target_attainment is not None,
            no_probe=args.no_probe,
        )
        if args.target_attainment is None:
            args.target_attainment = TARGET_ATTAINMENT
        if args.compare and not 0 < args.target_attainment <= 1:
            raise SimInputError(
                f"--target-attainment must be within (0, 1], got {args.target_attainment}"
            )
        if args.copies < 1:
            raise SimInputError(f"--copies must be >= 1, got {args.copies}")
        if args.jobs < 0:
            raise SimInputError(f"--jobs must be >= 0 (0: one per CPU), got {args.jobs}")
        args.pool = _pool_path(args)
        pool = read_pool(args.pool)
        options, origins, engine = _checked(args, pool, overrides)
        assumptions = fromrun.describe_assumptions(engine.cost, options, origins)
        trace = read_trace(args)
    except (PreheatError, TraceError, ValueError) as e:
        return _fail(str(e))
    if not trace:
        return _fail(f"{args.trace}: no requests left after slicing")
    out: Path = args.out or Path("runs") / time.strftime("simulate-%Y%m%d-%H%M%S")
    command = "preheat simulate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    name = args.name or out.name
    trace_desc = f"{args.trace} ({len(trace)} requests)"

    def with_meta(result: _Result, plots: bool) -> None:
        meta = result.run.meta
        meta.trace, meta.command = trace_desc, command
        meta.extra = {**meta.extra, "assumptions": assumptions}
        write_run(result.out, result.run)
        if plots:
            from preheat.report.plots import write_plots  # matplotlib only when plotting

            write_plots(result.run, result.out)

    print(assumptions_text(assumptions, args.from_run))
    if sweep is None and not args.compare:
        job = _Job(name, args.pool, overrides, replace(options, name=name), out, False)
        try:
            result = _run_job(job, trace)
        except PreheatError as e:
            return _fail(str(e))
        try:
            with_meta(result, False)
        except OSError as e:
            return _fail(f"cannot write the run folder {out}: {e.strerror}")
        return _report(result, args)

    if args.compare:
        return _compare(args, pool, overrides, options, trace, out, name, with_meta)
    assert sweep is not None
    key, values = sweep
    jobs = []
    for v in values:
        label = f"{key}={v}"
        ov = (*overrides, (key, v))
        try:
            pool_config(pool, ov)
        except PreheatError as e:
            return _fail(str(e))
        jobs.append(
            _Job(
                label,
                args.pool,
                ov,
                replace(options, name=f"{name} {label}"),
                out / _slug(label),
                not args.no_plots,
            )
        )
    n_jobs = args.jobs or min(len(jobs), os.cpu_count() or 1)
    t0 = time.perf_counter()
    results: list[_Result] = []

    def done(r: _Result) -> None:
        """Each run's folder as it finishes (a sweep stopped midway keeps what ran)."""
        with_meta(r, not args.no_plots)
        print(f"  {r.label}: {r.out}", flush=True)

    try:
        results = _run_all(jobs, trace, n_jobs, done)
    except PreheatError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"cannot write the run folders under {out}: {e.strerror}")
    print(
        f"simulated sweep of {key} over {len(trace)} requests "
        f"({time.perf_counter() - t0:.1f} s wall)"
    )
    print(sweep_table(results))
    print("")
    print("run folders: " + ", ".join(str(r.out) for r in results))
    return 0


def _compare(
    args: argparse.Namespace,
    pool: PoolDocument,
    overrides: tuple[tuple[str, str], ...],
    options: SimOptions,
    trace: list[TraceRequest],
    out: Path,
    name: str,
    with_meta: Callable[[_Result, bool], None],
) -> int:
    """``--compare``: every policy at every knob value on the trace; the table, the
    Pareto plot and the hindsight-best fixed pool (:mod:`preheat.simulate.compare`)."""
    try:
        policies = compare.parse_compare(args.compare)
        knobs = compare.parse_knobs(args.knob)
        spec = apply_overrides(pool.spec or {}, overrides)
        slo_ms = compare.slo_of(spec, args.ttft_objective_ms)
        schedule = compare.read_schedule(args.schedule) if args.schedule else None
        runs = compare.settings(policies, knobs, spec, slo_ms, schedule)

        def job(st: compare.Setting) -> _Job:
            ov = (*overrides, *st.overrides)
            pool_config(pool, ov)  # every problem before any work
            opts = replace(
                options,
                name=f"{name} {st.label}",
                autoscale=st.autoscale,
                ttft_objective_ms=slo_ms,
                record_itl=False,
            )
            if st.interval_s is not None:
                opts = replace(opts, autoscale_interval_s=st.interval_s)
            return _Job(st.label, args.pool, ov, opts, out / _slug(st.label), False)

        jobs = [job(st) for st in runs]
    except PreheatError as e:
        return _fail(str(e))
    n_jobs = args.jobs or min(len(jobs), os.cpu_count() or 1)
    t0 = time.perf_counter()
    print(f"comparing {len(jobs)} runs ({', '.join(policies)}) on {n_jobs} processes", flush=True)
    target = args.target_attainment
    from preheat.report.summary import summarize

    def point(st: compare.Setting, r: _Result) -> Point:
        s = summarize(r.run)
        gpu_h = float(r.run.meta.extra.get("gpu_hours", r.stats.gpu_seconds / 3600.0))
        return Point(st.policy, st.setting, s.ttft_attainment or 0.0, gpu_h, st.value)

    points: list[Point] = []  # one per run, in the order the runs finish (as asked)

    def done(r: _Result) -> None:
        """Each run's folder and line as it finishes (a long comparison keeps what ran)."""
        st = runs[len(points)]
        p = point(st, r)
        points.append(p)
        with_meta(r, False)
        print(
            f"  {st.policy} {st.setting}: {p.attainment * 100:.2f}% on {p.gpu_hours:.2f} "
            f"GPU-h ({r.stats.wall_s:.0f} s wall) -> {r.out}",
            flush=True,
        )

    try:
        results = _run_all(jobs, trace, n_jobs, done)
        # the hindsight-best fixed pool is the cheapest size reaching the target, not only
        # the cheapest of the sizes swept: bisect the gap under it (a run or two)
        while not args.no_probe and (size := next_fixed_probe(points, target)) is not None:
            (st,) = compare.settings(("fixed",), {"fixed": (float(size),)}, spec, slo_ms, None)
            pods = f"{size} pod{'s' * (size != 1)}"
            print(f"hindsight-best fixed pool: also running {pods} (the gap under it)", flush=True)
            runs.append(st)
            (r,) = _run_all([job(st)], trace, 1, done)
            results.append(r)
    except PreheatError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"cannot write a run folder under {out}: {e.strerror}")
    wall = time.perf_counter() - t0
    # in the order asked, a policy's rows together, the fixed pools by size
    first = {st.policy: i for i, st in reversed(list(enumerate(runs)))}
    order = sorted(
        range(len(runs)),
        key=lambda i: (first[runs[i].policy], runs[i].value if runs[i].policy == "fixed" else i),
    )
    runs = [runs[i] for i in order]
    results = [results[i] for i in order]
    points = [points[i] for i in order]
    lines = compare.summary_lines(points, target)
    table = compare.table_markdown(points, target)
    head = (
        f"SIMULATED comparison on {args.trace} ({len(trace)} requests); SLO: TTFT <= "
        f"{slo_ms:g} ms (attainment counts every request); {len(results)} runs in {wall:.0f} s wall"
    )
    print(head)
    print(table)
    print("")
    print("\n".join(lines))
    try:
        out.mkdir(parents=True, exist_ok=True)
        body = [f"# {head}", "", table, "", *(f"- {line}" for line in lines), ""]
        if not args.no_plots:
            png = compare.plot(points, target, out / "pareto.png")
            body += [f"![pareto]({png.name})", ""]
            print(f"plot: {png}")
        (out / "compare.md").write_text("\n".join(body))
        (out / "compare.json").write_text(
            json.dumps(
                {
                    "trace": str(args.trace),
                    "requests": len(trace),
                    "slo_ms": slo_ms,
                    "target_attainment": target,
                    "points": [asdict(p) for p in points],
                },
                indent=1,
            )
        )
    except OSError as e:
        return _fail(f"cannot write the comparison under {out}: {e.strerror}")
    print(f"comparison: {out / 'compare.md'}")
    return 0


def assumptions_text(lines: list[str], from_run: Path | None) -> str:
    """The block printed at the top of the report."""
    if from_run is not None:
        head = f"assumptions (the settings of the preheat up run {from_run}, flags over them):"
    else:
        head = (
            "assumptions (defaults model a production start-up; --from-run RUN_DIR takes a "
            "preheat up run's settings):"
        )
    return "\n".join([head, *(f"  {line}" for line in lines), ""])


def _run_all(
    jobs: list[_Job],
    trace: list[TraceRequest],
    n_jobs: int,
    done: Callable[[_Result], None] | None = None,
) -> list[_Result]:
    """Each job in its own process when there are several (the policies are pure Python:
    one process per core is the only parallelism); in order. ``done`` is called with each
    result as it comes, in order (a long comparison keeps what finished)."""
    if n_jobs <= 1 or len(jobs) == 1:
        results = (_run_job(j, trace) for j in jobs)
        return [_done(r, done) for r in results]
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=n_jobs, initializer=_init_worker, initargs=(trace,)
    ) as pool_ex:
        return [_done(r, done) for r in pool_ex.map(_run_job, jobs)]


def _done(result: _Result, done: Callable[[_Result], None] | None) -> _Result:
    if done is not None:
        done(result)
    return result


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in label)


def _report(result: _Result, args: argparse.Namespace) -> int:
    from preheat.report.summary import summarize
    from preheat.report.table import render_table

    st = result.stats
    print(
        f"simulated {st.requests} requests, {st.virtual_s:.0f} s of virtual time, "
        f"{st.peak_pods} pods at peak, in {st.wall_s:.1f} s wall"
    )
    print(render_table(summarize(result.run)))
    print(f"GPU-hours: {float(result.run.meta.extra.get('gpu_hours', 0.0)):.2f}")
    fc = result.run.meta.extra.get("forecast")
    if isinstance(fc, dict):
        acting = "acting" if fc.get("acting") else "not acting: autoscaling.predictive off"
        basis = f", {fc['horizon_basis']}" if fc.get("horizon_basis") else ""
        print(
            f"arrival-rate forecast {round(float(fc['horizon_s']), 1):g} s ahead{basis} "
            f"({acting}): off by "
            f"{float(fc['error_median']) * 100:.0f}% (median), "
            f"{float(fc['error_p90']) * 100:.0f}% (p90) over {int(fc['evaluations'])} evaluations"
        )
        room = fc.get("headroom")
        if isinstance(room, dict):
            does = (
                "pods kept for forecast / (1 - it), none started for it"
                if room.get("mode") == "keep"
                else "sized for forecast / (1 - it)"
            )
            print(
                f"  headroom: its p{float(room['percentile']):g} shortfall read "
                f"{float(room['shortfall_median']) * 100:.0f}% (median), "
                f"{float(room['shortfall_p90']) * 100:.0f}% (p90) over "
                f"{int(room['evaluations'])} evaluations ({does})"
            )
        if fc.get("history_s"):
            print(
                f"  it started from {float(fc['history_s']):g} s of history before t=0 "
                f"(--forecast-history), season period {float(fc.get('period_s', 0)):g} s"
            )
    if not args.no_plots:
        from preheat.report.plots import write_plots

        try:
            paths = write_plots(result.run, result.out)
        except OSError as e:
            return _fail(f"cannot write plots to {result.out}: {e.strerror}")
        print("plots: " + ", ".join(str(p) for p in paths))
    print(f"run folder: {result.out}")
    return 0
