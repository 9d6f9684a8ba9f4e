"""Which OpenAI parameters vLLM's own OpenAI layer (the passthrough's upstream) has a field
for: the rest it accepts and ignores (200, no effect: its request models allow extra fields).
Pins ``oai_params.VLLM_IGNORED`` (the vLLM column of the engine table in
tests/router/frontend/test_router_openai_params.py) against the installed vLLM, so a vLLM
upgrade that adds or drops one fails here."""

from __future__ import annotations

import typing
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest

from preheat.router.frontend.oai_params import VLLM_EXTENSIONS, VLLM_IGNORED

pytestmark = pytest.mark.vllm


def _openai_fields(module: Any) -> set[str]:
    names: set[str] = set()
    for td in (module.CompletionCreateParamsNonStreaming, module.CompletionCreateParamsStreaming):
        names |= set(typing.get_type_hints(td))
    return names


def _vllm_fields(model: Any) -> set[str]:
    fields = set(model.model_fields)
    return fields | {f.alias for f in model.model_fields.values() if f.alias}


@pytest.mark.parametrize(
    ("endpoint", "openai_module", "vllm_model"),
    [
        ("chat", chat_params, ChatCompletionRequest),
        ("completions", completion_params, CompletionRequest),
    ],
)
def test_vllm_ignores_exactly_the_listed_parameters(
    endpoint: str, openai_module: Any, vllm_model: Any
) -> None:
    ignored = _openai_fields(openai_module) - _vllm_fields(vllm_model)
    assert ignored == VLLM_IGNORED[endpoint]


def test_the_extensions_the_grpc_path_carries_are_vllm_fields() -> None:
    for model in (ChatCompletionRequest, CompletionRequest):
        assert set(VLLM_EXTENSIONS) <= _vllm_fields(model)
