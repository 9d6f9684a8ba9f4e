"""``preheat bench sim``: runs the parts asked for and writes each one's section.

The routing, autoscaling and geography parts are in :mod:`preheat.bench.sim_bench`, the
decode part (which builds on sim_bench's pools and traces) in :mod:`preheat.bench.sim_decode`;
this module sits above both, so neither imports the other's caller."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from preheat.bench.sim_bench import (
    AZURE,
    MOONCAKE,
    PARTS,
    SERVEGEN,
    autoscaling_part,
    geography_part,
    problems,
    routing_part,
)
from preheat.bench.sim_decode import decode_part
from preheat.report.markdown import write_section


def run(args: argparse.Namespace) -> int:
    parts = PARTS if args.part == "all" else (args.part,)
    bad = problems(args)
    if bad:
        print(f"preheat bench sim: {'; '.join(bad)}", file=sys.stderr)
        return 2
    for f in (MOONCAKE, AZURE, SERVEGEN):
        if not (args.data / f).is_file():
            print(f"error: {args.data / f} not found (--data names the shared data folder)")
            return 2
    img_dir: Path | None = args.img_dir
    if img_dir is None and args.write is not None:
        img_dir = args.write.parent / "img" / "bench"
    t0 = time.perf_counter()
    for part in parts:
        if part == "routing":
            body = routing_part(args, img_dir).body
        elif part == "autoscaling":
            body = autoscaling_part(args, img_dir).body
        elif part == "decode":
            body = decode_part(args)
        else:
            body = geography_part(args, img_dir).body
        print()
        print(body, flush=True)
        if args.write is not None:
            write_section(args.write, f"sim-{part}", body)
            print(f"\nwrote section sim-{part} of {args.write}", flush=True)
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0
