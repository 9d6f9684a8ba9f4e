"""``preheat report RUN_DIR [RUN_DIR ...]``: the table of a run's figures, and its PNG plots;
with several runs, also one line per run side by side.

Exit codes: 0 done; 2 bad input (no such folder, not a run folder, a malformed line), with
one message saying what is wrong and where.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from preheat.report.periods import by_period, parse_periods, render_periods
from preheat.report.record import Run, RunFormatError, read_run
from preheat.report.summary import summarize
from preheat.report.table import render_comparison, render_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="a run folder; several: each one's table, then one line per run side by side",
    )
    plots = parser.add_mutually_exclusive_group()  # --no-plots used to drop --plots silently
    plots.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write the PNG plots (default: each RUN_DIR; with several runs, "
        "DIR/<run folder name>)",
    )
    plots.add_argument("--no-plots", action="store_true", help="print the tables only")
    parser.add_argument(
        "--periods",
        default=None,
        metavar="SECONDS",
        help="also print the misses and mean replicas of each period: its edges in seconds of "
        "the run (0,360,720: a period from each edge to the next, the last to the run's end) "
        "or one length (360: periods of 360 s from 0)",
    )


def _read(folder: Path) -> Run:
    if not folder.is_dir():
        raise RunFormatError(f"{folder}: no such run folder")
    try:
        return read_run(folder)
    except OSError as err:
        raise RunFormatError(f"cannot read {folder}: {err.strerror}") from None


def run(args: argparse.Namespace) -> int:
    folders: list[Path] = args.run_dirs
    try:
        edges = parse_periods(args.periods) if args.periods is not None else None
        runs = [_read(f) for f in folders]  # every folder checked before any output
        periods = [by_period(r, edges) for r in runs] if edges is not None else None
    except (RunFormatError, ValueError) as err:
        print(f"preheat report: {err}", file=sys.stderr)
        return 2
    summaries = [summarize(r) for r in runs]
    for i, (folder, record, summary) in enumerate(zip(folders, runs, summaries, strict=True)):
        if i:
            print("\n" + "=" * 78 + "\n")
        print(render_table(summary))
        if periods is not None:
            print("\n" + render_periods(record, periods[i]))
        for where in record.cut_off:  # a partial last line, left out (it used to be silent)
            print(
                f"note: {folder / where}: the line was cut off mid-write (the run stopped "
                "while writing it); left out"
            )
        if args.no_plots:
            continue
        from preheat.report.plots import write_plots  # matplotlib only when plotting

        out: Path = folder
        if args.plots is not None:
            out = args.plots / folder.resolve().name if len(folders) > 1 else args.plots
        try:
            paths = write_plots(record, out)
        except OSError as err:
            print(f"preheat report: cannot write plots to {out}: {err.strerror}", file=sys.stderr)
            return 2
        print("")
        print("plots: " + ", ".join(str(p) for p in paths))
    if len(folders) > 1:
        print("\n" + render_comparison(summaries, [f.resolve().name for f in folders]))
    return 0
