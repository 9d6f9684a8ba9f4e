"""Builds the worker's engine from ``preheat worker`` flags: ``sim`` or ``vllm``.

``--engine sim`` builds a :class:`~preheat.engine.sim.SimEngine` from ``--model`` and the
``--sim-*`` flags (plus any ``--sim-opt KEY=VALUE`` that :meth:`SimConfig.from_options`
accepts). ``--engine vllm`` imports :mod:`preheat.engine.vllm` only then, so the control
plane and the sim need no vLLM; without vLLM installed it raises :class:`EngineUnavailable`
with a message that says so.

:func:`build_worker_engine` also builds the engine's OpenAI HTTP API (``--openai-port``):
for ``--engine vllm`` ``vllm serve``'s own app over the engine
(:mod:`preheat.engine.vllm_openai`), its options parsed by vLLM's own CLI parser here, so a
bad one is an :class:`EngineUnavailable` (exit 2) before anything starts; the sim engine
has none (``openai_port`` 0) and refuses the ``vllm serve`` options.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from preheat.core.errors import PreheatError
from preheat.engine.base import Engine

if TYPE_CHECKING:
    from preheat.worker.openai_http import AppFactory

ENGINES = ("sim", "vllm")

_SIM_FLAGS = {  # SimConfig.from_options key -> argparse dest
    "model": "model",
    "num_gpu_blocks": "sim_num_gpu_blocks",
    "max_num_seqs": "sim_max_num_seqs",
    "max_model_len": "sim_max_model_len",
    "block_size": "sim_block_size",
    "time_scale": "sim_time_scale",
    "load_s": "sim_load_s",
    "warmup_s": "sim_warmup_s",
    "seed": "sim_seed",
}
_VLLM_FLAGS = {  # VllmEngineConfig field -> argparse dest
    "max_model_len": "vllm_max_model_len",
    "max_num_seqs": "vllm_max_num_seqs",
    "gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "block_size": "vllm_block_size",
    "dtype": "vllm_dtype",
    "tensor_parallel_size": "vllm_tensor_parallel_size",
}


class EngineUnavailable(Exception):
    """The engine cannot be built here: vLLM is not installed, or a flag is wrong."""


def _given(args: argparse.Namespace, names: dict[str, str]) -> dict[str, Any]:
    """``{option: value}`` for every flag in ``names`` that is set in ``args``."""
    return {k: getattr(args, d) for k, d in names.items() if getattr(args, d, None) is not None}


def engine_args(args: argparse.Namespace) -> dict[str, Any]:
    """``--engine-args``: the JSON object, checked as the operator checks a pool's
    ``engine.args`` (:func:`preheat.api.pool.engine_arg_problems`, the same sentences);
    :class:`EngineUnavailable` listing every problem."""
    text = getattr(args, "engine_args", None)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise EngineUnavailable(f"--engine-args is not JSON: {e}") from e
    if not isinstance(value, dict):
        raise EngineUnavailable("--engine-args must be a JSON object of engine args")
    from preheat.api.pool import engine_arg_problems

    problems = engine_arg_problems(getattr(args, "engine", "sim"), value)
    if problems:
        raise EngineUnavailable("invalid engine args: " + "; ".join(problems))
    return value


def sim_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SimConfig options the flags in ``args`` ask for."""
    options = _given(args, _SIM_FLAGS)
    from preheat.api.engine_args import sim_options as sim_engine_options

    options.update(sim_engine_options(engine_args(args)))
    for item in getattr(args, "sim_opt", None) or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EngineUnavailable(f"--sim-opt wants KEY=VALUE, got {item!r}")
        options[key.strip()] = value.strip()
    return options


def _other_engines_flags(args: argparse.Namespace, kind: str) -> list[str]:
    """The ``--sim-*`` flags given to a vLLM worker, or the ``--vllm-*`` ones given to a sim
    worker: the engine built never reads them (``--engine sim --vllm-gpu-memory-utilization
    5`` ran without a word)."""
    other = {"sim": _VLLM_FLAGS, "vllm": _SIM_FLAGS}.get(kind, {})
    return [
        "--" + dest.replace("_", "-")
        for field, dest in other.items()
        if field != "model" and getattr(args, dest, None) is not None
    ]


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine the flags in ``args`` describe (``--engine`` and its knobs)."""
    kind = getattr(args, "engine", "sim")
    unread = _other_engines_flags(args, kind)
    if unread:
        raise EngineUnavailable(
            f"{', '.join(unread)}: not read by the {kind} engine (--engine {kind}); leave "
            "them out or choose the engine they are for"
        )
    if kind == "sim":
        return _build_sim(args)
    if kind == "vllm":
        return _build_vllm(args)
    raise EngineUnavailable(f"unknown engine {kind!r}; choose one of {', '.join(ENGINES)}")


def _build_sim(args: argparse.Namespace) -> Engine:
    from preheat.engine.sim import SimConfig, SimEngine

    try:
        config = SimConfig.from_options(sim_options(args))
    except PreheatError as e:
        raise EngineUnavailable(e.message) from e
    return SimEngine(config)


_SERVE_FLAGS = {  # argparse dest -> the flag (vllm serve options, --engine vllm only)
    "chat_template": "--chat-template",
    "enable_auto_tool_choice": "--enable-auto-tool-choice",
    "tool_call_parser": "--tool-call-parser",
    "reasoning_parser": "--reasoning-parser",
    "served_model_name": "--served-model-name",
    "vllm_serve_arg": "--vllm-serve-arg",
}


def openai_enabled(args: argparse.Namespace) -> bool:
    """Does this worker serve the OpenAI HTTP API? (``--engine vllm``, ``--openai-port`` >= 0)"""
    return getattr(args, "engine", "sim") == "vllm" and getattr(args, "openai_port", -1) >= 0


def _serve_flags_given(args: argparse.Namespace) -> list[str]:
    return [flag for dest, flag in _SERVE_FLAGS.items() if getattr(args, dest, None)]


def build_worker_engine(args: argparse.Namespace) -> tuple[Engine, AppFactory | None]:
    """The engine, and the factory of its OpenAI HTTP app (None: the worker serves none)."""
    kind = getattr(args, "engine", "sim")
    given = _serve_flags_given(args)
    if kind != "vllm" and given:
        raise EngineUnavailable(
            f"{', '.join(given)}: vllm serve options, for --engine vllm only (the {kind} "
            "engine serves no OpenAI API)"
        )
    if kind != "vllm":
        return build_engine(args), None
    if not openai_enabled(args):
        serve_only = [f for f in given if f != "--served-model-name"]
        if serve_only:
            raise EngineUnavailable(
                f"{', '.join(serve_only)}: options of the OpenAI API, which "
                "--openai-port -1 turns off"
            )
        return _build_vllm(args), None
    try:
        module = importlib.import_module("preheat.engine.vllm_openai")
    except ImportError as e:
        raise EngineUnavailable(
            f"the vllm engine is not available here: {e}; or use --engine sim"
        ) from e
    options = module.ServeOptions(
        model=args.model or "",
        served_model_name=getattr(args, "served_model_name", None) or args.model or "",
        chat_template=getattr(args, "chat_template", None),
        enable_auto_tool_choice=bool(getattr(args, "enable_auto_tool_choice", False)),
        tool_call_parser=getattr(args, "tool_call_parser", None),
        reasoning_parser=getattr(args, "reasoning_parser", None),
        extra=tuple(getattr(args, "vllm_serve_arg", None) or ()),
    )
    if not options.model:
        raise EngineUnavailable("--engine vllm needs --model (a model name or a local path)")
    try:
        serve = module.serve_args(options)
    except module.ServeArgsError as e:
        raise EngineUnavailable(f"bad vllm serve option: {e}") from e
    engine = _build_vllm(args, extra=tuple(serve.engine_overrides.items()))
    vllm_engine: Any = engine  # a VllmEngine: its engine_client is the AsyncLLM, once loaded

    async def factory() -> Any:
        return await module.build_openai_app(vllm_engine.engine_client, serve.namespace)

    return engine, factory


def vllm_traces_endpoint(tracing: bool, env: Mapping[str, str]) -> str:
    """Where vLLM's own request spans go when the worker traces (``--tracing``): the OTLP
    endpoint the worker exports to (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, else the OTLP default). vLLM then records one span per
    request (queue, prefill and decode times, TTFT, token counts: ``gen_ai.*``) as a child
    of the request's ``traceparent``, so a request the router passes through to vLLM's
    OpenAI API shows its worker side too. "" when the worker does not trace."""
    if not tracing or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ""
    return (
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or "http://localhost:4317"
    )


def _build_vllm(args: argparse.Namespace, extra: tuple[tuple[str, Any], ...] = ()) -> Engine:
    if not getattr(args, "model", None):
        raise EngineUnavailable("--engine vllm needs --model (a model name or a local path)")
    try:
        module = importlib.import_module("preheat.engine.vllm")
    except ImportError as e:
        raise EngineUnavailable(
            f"the vllm engine is not available here: {e}; or use --engine sim"
        ) from e
    from preheat.api.engine_args import to_vllm

    fields = _given(args, _VLLM_FLAGS)
    more = to_vllm(engine_args(args))
    endpoint = vllm_traces_endpoint(bool(getattr(args, "tracing", False)), os.environ)
    if endpoint and "otlp_traces_endpoint" not in more:
        more["otlp_traces_endpoint"] = endpoint
    for name in ("max_num_batched_tokens", "max_num_queued_reqs", "kv_cache_memory_bytes"):
        if name in more:  # VllmEngineConfig's own fields
            fields[name] = more.pop(name)
    extra = (*extra, *sorted(more.items()))
    if getattr(args, "vllm_enforce_eager", None) is not None:
        fields["enforce_eager"] = args.vllm_enforce_eager
    if getattr(args, "served_model_name", None):
        fields["served_model_name"] = args.served_model_name
    try:
        config = module.VllmEngineConfig(model=args.model, extra_args=extra, **fields)
    except (TypeError, ValueError) as e:
        raise EngineUnavailable(f"bad vllm engine options: {e}") from e
    engine: Engine = module.VllmEngine(config)
    return engine
