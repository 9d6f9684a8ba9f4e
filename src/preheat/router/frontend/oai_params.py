"""Every OpenAI request parameter, and whether the router honours it: what it cannot honour
is refused with a 400 naming each such parameter, never a silent 200.

:data:`CHAT` and :data:`COMPLETIONS` classify every parameter of OpenAI's
``/v1/chat/completions`` and ``/v1/completions`` (the ``openai`` package's
``completion_create_params``; a table test fails when OpenAI adds one that is not here):

- **honoured**: the router applies it (sampling parameters travel in the proto's
  ``SamplingParams``; ``user``/``prompt_cache_key`` bind the session; ``stream_options``'s
  ``include_usage`` adds the usage chunk);
- **no-op only**: refused unless its value has no effect (``presence_penalty: 0``,
  ``logprobs: false``, ``n: 1``, ``tool_choice: "none"`` with no tools, ``null``): such a
  value is accepted, any other is refused.

A body field that is neither an OpenAI parameter of that endpoint nor a Preheat extension
(``session_id``, ``ttft_deadline_ms``, ``slo_class``) nor one of vLLM's extensions the sim
engine honours (:data:`VLLM_EXTENSIONS`: ``stop_token_ids``, ``min_tokens``,
``ignore_eos``; and ``repetition_penalty`` at its no-op 1, which vLLM's benchmark client
sends) is refused too (vLLM's other extensions such as ``top_k`` included), as OpenAI's own
API refuses an unrecognized argument.

This table is the gRPC path's (sim workers): the router builds the engine's request itself,
so what it does not carry cannot reach the engine. To workers that serve OpenAI HTTP (vLLM)
the router passes the JSON through and none of this applies: every parameter is vLLM's to
apply or refuse (:mod:`.passthrough`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from preheat.core.errors import Reason

# the body fields that are Preheat's own (also accepted as headers; see http.py)
PREHEAT_EXTENSIONS = frozenset({"session_id", "ttft_deadline_ms", "slo_class"})

NoOp = Callable[[Any, Mapping[str, Any]], bool]  # (value, the whole body) -> has no effect


@dataclass(frozen=True)
class Param:
    """How the router treats one parameter: honoured, or accepted only when ``noop``."""

    honoured: bool
    note: str
    noop: NoOp | None = None  # for a parameter not honoured: the values that change nothing

    def refuses(self, value: Any, body: Mapping[str, Any]) -> bool:
        if self.honoured:
            return False
        return value is not None and not (self.noop is not None and self.noop(value, body))


def _honoured(note: str) -> Param:
    return Param(True, note)


def _refused(note: str, noop: NoOp | None = None) -> Param:
    return Param(False, note, noop)


def _is(*values: Any) -> NoOp:
    return lambda v, _body: any(v == x and type(v) is type(x) for x in values)


def _zero(v: Any, _body: Mapping[str, Any]) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == 0


def _empty(v: Any, _body: Mapping[str, Any]) -> bool:
    return v in ({}, [], "")


def _false(v: Any, _body: Mapping[str, Any]) -> bool:
    return v is False


def _no_tools(body: Mapping[str, Any]) -> bool:
    return not body.get("tools") and not body.get("functions")


def _tool_choice_noop(v: Any, body: Mapping[str, Any]) -> bool:
    return v == "none" or (v == "auto" and _no_tools(body))


def _response_format_noop(v: Any, _body: Mapping[str, Any]) -> bool:
    return isinstance(v, dict) and v == {"type": "text"}


def _modalities_noop(v: Any, _body: Mapping[str, Any]) -> bool:
    return bool(v == ["text"])


_PENALTY = "penalties are not applied by the router's engines yet"
_LOGPROBS = "log probabilities are not returned yet"
_TOOLS = "tool calling needs the engine's tool parser (issue 13's passthrough)"

_SHARED: dict[str, Param] = {
    "model": _honoured("must name the pool's model (or be empty); else 404 model_not_found"),
    "max_tokens": _honoured("SamplingParams.max_tokens"),
    "temperature": _honoured("SamplingParams.temperature"),
    "top_p": _honoured("SamplingParams.top_p"),
    "seed": _honoured("SamplingParams.seed"),
    "stop": _honoured("SamplingParams.stop"),
    "n": _refused("one choice per request (allowed: 1)", _is(1)),
    "stream": _honoured("server-sent events"),
    "stream_options": _honoured(
        "include_usage adds the usage chunk; include_obfuscation: only false/absent"
    ),
    "user": _honoured("the session id when no x-session-id / session_id / prompt_cache_key"),
    "frequency_penalty": _refused(_PENALTY + " (allowed: 0)", _zero),
    "presence_penalty": _refused(_PENALTY + " (allowed: 0)", _zero),
    "logit_bias": _refused("logit bias is not applied yet (allowed: {})", _empty),
}

CHAT: dict[str, Param] = {
    **_SHARED,
    "messages": _honoured("text content; flattened to role-tagged lines (no chat template yet)"),
    "max_completion_tokens": _honoured("SamplingParams.max_tokens (wins over max_tokens)"),
    "prompt_cache_key": _honoured("the session id (prefix-cache affinity) when none is given"),
    "metadata": _honoured("accepted; informational (nothing is stored)"),
    "safety_identifier": _honoured("accepted; informational"),
    "store": _refused("completions are not stored (allowed: false)", _false),
    "service_tier": _refused("no service tiers (allowed: auto, default)", _is("auto", "default")),
    "tools": _refused(_TOOLS + " (allowed: [])", _empty),
    "tool_choice": _refused(_TOOLS + " (allowed: none, or auto with no tools)", _tool_choice_noop),
    "parallel_tool_calls": _refused(_TOOLS, lambda _v, body: _no_tools(body)),
    "functions": _refused(_TOOLS + " (allowed: [])", _empty),
    "function_call": _refused(
        _TOOLS + " (allowed: none, or auto with no functions)", _tool_choice_noop
    ),
    "response_format": _refused(
        "structured outputs need the engine's guided decoding (issue 13's passthrough) "
        '(allowed: {"type": "text"})',
        _response_format_noop,
    ),
    "logprobs": _refused(_LOGPROBS + " (allowed: false)", _false),
    "top_logprobs": _refused(_LOGPROBS + " (allowed: 0)", _zero),
    "audio": _refused("no audio output"),
    "modalities": _refused('text output only (allowed: ["text"])', _modalities_noop),
    "prediction": _refused("predicted outputs are not supported"),
    "reasoning_effort": _refused("no reasoning controls"),
    "verbosity": _refused("no verbosity control (allowed: medium)", _is("medium")),
    "web_search_options": _refused("no web search"),
    "moderation": _refused("no moderation"),
    "prompt_cache_retention": _refused(
        "no cache retention control (allowed: in_memory)", _is("in_memory")
    ),
    "prompt_cache_options": _refused("no cache options"),
}

COMPLETIONS: dict[str, Param] = {
    **_SHARED,
    "prompt": _honoured("one prompt: a string or token ids, or a list of one of either"),
    "best_of": _refused("one candidate per request (allowed: 1)", _is(1)),
    "echo": _refused("the prompt is not echoed yet (allowed: false)", _false),
    "logprobs": _refused(_LOGPROBS),
    "suffix": _refused('no insertion after the completion (allowed: "")', _empty),
}


def _stream_options_problem(value: Any) -> str | None:
    if isinstance(value, dict) and value.get("include_obfuscation"):
        return "stream_options.include_obfuscation: no obfuscation padding is added"
    return None


# message fields the router cannot honour (a message's tool calls are not flattened)
_MESSAGE_REFUSED = {
    "tool_calls": "a message's tool calls are not passed to the engine (issue 13's passthrough)",
    "function_call": "a message's function call is not passed to the engine",
    "audio": "no audio",
}


def _message_problems(messages: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not isinstance(messages, list):
        return out
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        for key, why in _MESSAGE_REFUSED.items():
            if m.get(key):
                out.append((f"messages.{i}.{key}", why))
    return out


# vLLM's extensions to OpenAI's parameters that the gRPC path carries (SamplingParams) and
# the sim engine honours, and repetition_penalty at its no-op 1 (vLLM's own benchmark client,
# `vllm bench serve`, sends 1.0 with every request); every other one (top_k, min_p, ...) is
# refused there as not a parameter of the endpoint
VLLM_EXTENSIONS: dict[str, Param] = {
    "stop_token_ids": _honoured("SamplingParams.stop_token_ids"),
    "min_tokens": _honoured("SamplingParams.min_tokens"),
    "ignore_eos": _honoured("SamplingParams.ignore_eos"),
    "repetition_penalty": _refused(
        "vLLM's repetition penalty is not applied by the sim engine (allowed: 1)", _is(1, 1.0)
    ),
}

VLLM_IGNORED: dict[str, frozenset[str]] = {
    "chat": frozenset(
        {
            "audio",
            "function_call",
            "functions",
            "metadata",
            "modalities",
            "moderation",
            "prediction",
            "prompt_cache_key",
            "prompt_cache_options",
            "prompt_cache_retention",
            "safety_identifier",
            "service_tier",
            "store",
            "verbosity",
            "web_search_options",
        }
    ),
    "completions": frozenset({"best_of"}),
}
"""The OpenAI parameters that vLLM's OpenAI layer (0.32.0, the passthrough's upstream) has no
field for: ``vllm serve`` answers a body with them 200 and ignores them (its request models
allow extra fields). ``tests/vllm_tier/test_vllm_openai_fields.py`` pins these sets against
vLLM's request models; :func:`vllm_unsupported` names those of a body that would change
something, which the passthrough refuses rather than answer with a silent 200."""


def vllm_unsupported(
    table: Mapping[str, Param], endpoint: str, body: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """(parameter, why) for every field of ``body`` that vLLM would ignore although its value
    changes something (by ``table``'s no-op rules; one the router itself applies, such as
    ``prompt_cache_key``, is not listed): what a passthrough must refuse rather than answer
    with a silent 200."""
    ignored = VLLM_IGNORED[endpoint]
    out: list[tuple[str, str]] = []
    for name, value in body.items():
        param = table.get(name)
        if name in ignored and param is not None and param.refuses(value, body):
            out.append((name, "vLLM ignores it (" + param.note + ")"))
    return out


def unsupported(table: Mapping[str, Param], body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(parameter, why) for every field of ``body`` that ``table`` does not honour at its
    value, in the body's order (a message's ``tool_calls``, ``function_call`` and ``audio``
    too); empty when the router can honour the whole body."""
    out: list[tuple[str, str]] = []
    if "messages" in table:
        out.extend(_message_problems(body.get("messages")))
    for name, value in body.items():
        if name in PREHEAT_EXTENSIONS:
            continue
        param = table.get(name) or VLLM_EXTENSIONS.get(name)
        if param is None:
            out.append((name, "not a parameter of this endpoint that the router knows"))
        elif param.refuses(value, body):
            out.append((name, param.note))
        elif name == "stream_options" and (why := _stream_options_problem(value)) is not None:
            out.append((name, why))
    return out


def unsupported_message(problems: list[tuple[str, str]]) -> str:
    names = ", ".join(f"'{p}'" for p, _ in problems)
    detail = "; ".join(f"{p}: {why}" for p, why in problems)
    return (
        f"Unsupported parameter(s): {names} (the router cannot honour them at these values; "
        f"leave them out or send a value with no effect). {detail}"
    )


UNSUPPORTED = Reason.UNSUPPORTED_PARAMETER
