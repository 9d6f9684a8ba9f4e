"""The ``preheat`` command: one entry point, a subcommand per deployable or tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


def _worker(parser: argparse.ArgumentParser) -> Handler:
    from preheat.worker.main import add_arguments, run

    add_arguments(parser)
    return run


def _router(parser: argparse.ArgumentParser) -> Handler:
    from preheat.router.main import add_arguments, run

    add_arguments(parser)
    return run


def _operator(parser: argparse.ArgumentParser) -> Handler:
    from preheat.operator.main import add_arguments, run

    add_arguments(parser)
    return run


def _bench(parser: argparse.ArgumentParser) -> Handler:
    from preheat.bench.main import add_arguments, run

    add_arguments(parser)
    return run


def _demo(parser: argparse.ArgumentParser) -> Handler:
    from preheat.bench.demo import add_arguments, run

    add_arguments(parser)
    return run


_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Handler]]] = {
    "worker": ("run one worker (gRPC + /metrics) around a sim or vLLM engine", _worker),
    "router": (
        "route requests to the worker predicted to give the earliest first token "
        "(gRPC proxy, lookaside Pick, OpenAI-compatible HTTP)",
        _router,
    ),
    "operator": ("reconcile InferencePool resources into warm worker pods (kopf)", _operator),
    "bench": ("benchmarks (not tests): `preheat bench worker|router`", _bench),
    "demo": ("start a sim worker and stream a few requests, printing TTFT/ITL", _demo),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(prog="preheat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    handlers: dict[str, Handler] = {}
    for name, (help_text, setup) in _COMMANDS.items():
        handlers[name] = setup(sub.add_parser(name, help=help_text, description=help_text))
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
