"""Builds the worker's engine from ``preheat worker`` flags: ``sim`` or ``vllm``.

``--engine sim`` builds a :class:`~preheat.engine.sim.SimEngine` from ``--model`` and the
``--sim-*`` flags (plus any ``--sim-opt KEY=VALUE`` that :meth:`SimConfig.from_options`
accepts). ``--engine vllm`` imports :mod:`preheat.engine.vllm` only then, so the control
plane and the sim need no vLLM; without vLLM installed it raises :class:`EngineUnavailable`
with a message that says so.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from preheat.core.errors import PreheatError
from preheat.engine.base import Engine

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


def sim_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SimConfig options the flags in ``args`` ask for."""
    options = _given(args, _SIM_FLAGS)
    for item in getattr(args, "sim_opt", None) or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EngineUnavailable(f"--sim-opt wants KEY=VALUE, got {item!r}")
        options[key.strip()] = value.strip()
    return options


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine the flags in ``args`` describe (``--engine`` and its knobs)."""
    kind = getattr(args, "engine", "sim")
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


def _build_vllm(args: argparse.Namespace) -> Engine:
    if not getattr(args, "model", None):
        raise EngineUnavailable("--engine vllm needs --model (a model name or a local path)")
    try:
        module = importlib.import_module("preheat.engine.vllm")
    except ImportError as e:
        raise EngineUnavailable(
            f"the vllm engine is not available here: {e}; or use --engine sim"
        ) from e
    fields = _given(args, _VLLM_FLAGS)
    if getattr(args, "vllm_enforce_eager", None) is not None:
        fields["enforce_eager"] = args.vllm_enforce_eager
    try:
        config = module.VllmEngineConfig(model=args.model, **fields)
    except (TypeError, ValueError) as e:
        raise EngineUnavailable(f"bad vllm engine options: {e}") from e
    engine: Engine = module.VllmEngine(config)
    return engine
