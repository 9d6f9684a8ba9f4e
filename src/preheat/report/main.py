"""``preheat report RUN_DIR``: the table of a run's figures, and its PNG plots.

Exit codes: 0 done; 2 bad input (no such folder, not a run folder, a malformed line), with
one message saying what is wrong and where.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from preheat.report.record import RunFormatError, read_run
from preheat.report.summary import summarize
from preheat.report.table import render_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder")
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write the PNG plots (default: RUN_DIR)",
    )
    parser.add_argument("--no-plots", action="store_true", help="print the table only")


def run(args: argparse.Namespace) -> int:
    folder: Path = args.run_dir
    if not folder.is_dir():
        print(f"preheat report: {folder}: no such run folder", file=sys.stderr)
        return 2
    try:
        record = read_run(folder)
    except RunFormatError as err:
        print(f"preheat report: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"preheat report: cannot read {folder}: {err.strerror}", file=sys.stderr)
        return 2
    summary = summarize(record)
    print(render_table(summary))
    if not args.no_plots:
        from preheat.report.plots import write_plots  # matplotlib only when plotting

        out: Path = args.plots or folder
        try:
            paths = write_plots(record, out)
        except OSError as err:
            print(f"preheat report: cannot write plots to {out}: {err.strerror}", file=sys.stderr)
            return 2
        print("")
        print("plots: " + ", ".join(str(p) for p in paths))
    return 0
