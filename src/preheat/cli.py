"""The ``preheat`` command: one entry point, a subcommand per deployable or tool.

Each subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> int``; it is
imported only when the parser is built, so ``preheat worker`` never imports kopf.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from preheat.process.children import die_with_parent

Handler = Callable[[argparse.Namespace], int]

_COMMANDS: dict[str, tuple[str, str]] = {
    "worker": (
        "run one worker (gRPC + /metrics) around a sim or vLLM engine",
        "preheat.worker.main",
    ),
    "router": (
        "route requests to the worker predicted to give the earliest first token "
        "(gRPC proxy, lookaside Pick, OpenAI-compatible HTTP)",
        "preheat.router.main",
    ),
    "operator": (
        "reconcile InferencePool resources into warm worker pods (kopf)",
        "preheat.operator.main",
    ),
    "release-pools": (
        "take the operator's finalizer off every InferencePool (the chart's post-delete "
        "hook: after `helm uninstall`, pools stay and can be deleted without the operator)",
        "preheat.operator.release",
    ),
    "up": (
        "run an InferencePool on this machine: sim workers and a router as local processes, "
        "autoscaled like the operator does (live view; Ctrl-C drains)",
        "preheat.local.main",
    ),
    "bench": (
        "benchmarks (not tests): `preheat bench worker|router|sim|vllm-serve|traces|forecast` "
        "(the worker's and the router's overhead, routing policies, simulated routing/"
        "autoscaling/geography, vLLM's serving benchmark through the router, the autoscaling "
        "traces, the arrival-rate forecast's error on a rate series)",
        "preheat.bench.main",
    ),
    "demo": (
        "start a sim worker and stream a few requests, printing TTFT/ITL",
        "preheat.bench.demo",
    ),
    "load": (
        "replay a trace against a router or worker (gRPC or OpenAI HTTP), recording every "
        "request's outcome into a run folder",
        "preheat.load.main",
    ),
    "report": (
        "print a run's figures (TTFT/ITL/e2e percentiles, SLO attainment, cache hits, "
        "replica-seconds) and write its plots",
        "preheat.report.main",
    ),
    "simulate": (
        "replay a trace against a pool in virtual time with the production policies "
        "(--set/--sweep to try settings, --from-run to take a `preheat up` run's); states "
        "its start-up assumptions; writes a run folder marked simulated",
        "preheat.simulate.main",
    ),
}


def build_parser(
    only: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    """The parser; with ``only``, just that subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="preheat",
        description="Preheat: warm LLM inference pools and a router that sends each request "
        "where its first token comes soonest. `preheat COMMAND --help` for each command.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    handlers: dict[str, Handler] = {}
    for name, (help_text, module_name) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            handlers[name] = module.run
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()  # a child of `preheat up` or a benchmark: go when the parent goes
    args_in = list(sys.argv[1:] if argv is None else argv)
    wanted = args_in[0] if args_in and args_in[0] in _COMMANDS else None
    parser, handlers = build_parser(wanted)
    args = parser.parse_args(args_in)
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
