"""The worker's ``vllm serve`` options, parsed by vLLM's own CLI parser (no engine started)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

from preheat.engine.vllm_openai import ServeArgsError, ServeOptions, serve_args
from preheat.worker.engines import EngineUnavailable, build_worker_engine
from preheat.worker.main import add_arguments, run

pytestmark = [pytest.mark.vllm]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def options(*extra: str, **kw: Any) -> ServeOptions:
    return ServeOptions(model="/models/m", served_model_name="m", extra=extra, **kw)


def test_defaults_are_vllm_serves() -> None:
    ns = serve_args(options()).namespace
    assert ns.served_model_name == ["m"]
    assert ns.model == "/models/m"
    assert ns.chat_template is None
    assert ns.enable_auto_tool_choice is False
    assert ns.port == 8000  # vllm serve's (the worker binds its own socket)


def test_named_options_and_pass_through() -> None:
    serve = serve_args(
        options(
            "--max-log-len=100",
            "--max-logprobs",
            "5",
            enable_auto_tool_choice=True,
            tool_call_parser="hermes",
            chat_template="{{ messages }}",
        )
    )
    ns = serve.namespace
    assert (ns.enable_auto_tool_choice, ns.tool_call_parser) == (True, "hermes")
    assert ns.chat_template == "{{ messages }}"
    assert ns.max_log_len == 100  # a frontend flag: the app's
    assert serve.engine_overrides == {"max_logprobs": 5}  # an engine flag: the engine's


@pytest.mark.parametrize(
    ("kw", "extra", "fragment"),
    [
        ({}, ("--no-such-flag",), "--no-such-flag"),
        ({}, ("--max-log-len=many",), "max-log-len"),
        ({"tool_call_parser": "nope"}, (), "unknown --tool-call-parser 'nope'"),
        ({"reasoning_parser": "nope"}, (), "reasoning"),
        ({"enable_auto_tool_choice": True}, (), "requires --tool-call-parser"),
        ({}, ("--max-model-len=64",), "use --vllm-max-model-len instead"),
        ({}, ("--enable-prefix-caching",), "set by the worker itself"),
    ],
)
def test_bad_options_are_named(
    kw: dict[str, object], extra: tuple[str, ...], fragment: str
) -> None:
    with pytest.raises(ServeArgsError) as err:
        serve_args(options(*extra, **kw))
    assert fragment in str(err.value)


def test_worker_flags_reach_vllms_parser(tiny_model: Path) -> None:
    args = parse("--engine", "vllm", "--model", str(tiny_model), "--tool-call-parser", "nope")
    with pytest.raises(EngineUnavailable, match="unknown --tool-call-parser 'nope'"):
        build_worker_engine(args)
    args = parse("--engine", "vllm", "--model", str(tiny_model), "--vllm-serve-arg=--bogus")
    assert run(args) == 2  # before anything binds or loads
