"""The requests the OpenAI parity test sends to both servers, and how answers are compared.

Every case takes an ``openai.AsyncOpenAI`` client and returns a JSON-able *outcome*: the
whole response as the client parsed it (``model_dump``), less the fields that cannot be
equal between two servers (:data:`UNMATCHABLE`), or, for a refused request, the error's HTTP
status, the client's exception class and the body's ``type``, ``code`` and ``param``. Two
outcomes are compared by :func:`differences`: every key and value must be equal, floats
(log-probabilities) within :data:`LOGPROB_TOLERANCE`.

All requests are greedy (temperature 0) with a fixed seed and ask vLLM for the token ids
(``return_token_ids``: the prompt's after the chat template, and each choice's), so equal
outcomes mean the same templated prompt went into the same engine and the same tokens came
out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import openai

MODEL = "tiny-llama"
SEED = 1234
LOGPROB_TOLERANCE = 1e-4
#: a token id of the tiny model's vocabulary (512) that is not a special token (0-2)
BIASED_TOKEN = 300

#: fields two servers cannot agree on, and why (removed from both outcomes before comparing)
UNMATCHABLE = {
    "id": "a fresh random id per request (chatcmpl-/cmpl- + uuid), on either server",
    "created": "the wall-clock second the server made the response",
    "choices[].message.tool_calls[].id": "a fresh random tool-call id per call",
}

Outcome = dict[str, Any]


@dataclass(frozen=True)
class Ctx:
    """What the cases need besides the client."""

    #: ``logit_bias`` that bans every whitespace-only token: JSON allows whitespace between
    #: tokens, and a random-weight model under vLLM's default grammar (any whitespace) fills
    #: ``max_tokens`` with it; banned, the grammar leaves it only the JSON itself
    no_whitespace: dict[str, int]


Case = Callable[[openai.AsyncOpenAI, Ctx], Awaitable[Outcome]]


def whitespace_token_ids(model_dir: Path) -> list[int]:
    """The ids of the tokens of ``model_dir``'s tokenizer that decode to whitespace only."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = range(tok.get_vocab_size())
    return [i for i in ids if (t := tok.decode([i], skip_special_tokens=False)) and not t.strip()]


def context(model_dir: Path) -> Ctx:
    return Ctx(no_whitespace={str(i): -100 for i in whitespace_token_ids(model_dir)})


GREEDY: dict[str, Any] = {"temperature": 0.0, "seed": SEED}
TOKEN_IDS: dict[str, Any] = {"extra_body": {"return_token_ids": True}}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "size": {"type": "string", "enum": ["small", "large"]},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "size", "ok"],
    "additionalProperties": False,
}
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def _strip(outcome: Outcome) -> Outcome:
    """Removes :data:`UNMATCHABLE` fields from a response dump (in place) and returns it."""
    outcome.pop("id", None)
    outcome.pop("created", None)
    for choice in outcome.get("choices") or ():
        message = choice.get("message") or {}
        for call in message.get("tool_calls") or ():
            call.pop("id", None)
    return outcome


def dump(response: Any) -> Outcome:
    out: Outcome = response.model_dump(mode="json")
    return _strip(out)


def error_outcome(e: openai.APIStatusError) -> Outcome:
    return {
        "status": e.status_code,
        "exception": type(e).__name__,
        "type": e.type,
        "code": e.code,
        "param": e.param,
    }


async def refused(call: Awaitable[Any]) -> Outcome:
    """The outcome of a request expected to fail with an HTTP error."""
    try:
        response = await call
    except openai.APIStatusError as e:
        return {"error": error_outcome(e)}
    return {"unexpected_success": dump(response)}


# --- the cases ------------------------------------------------------------------------------


async def chat_with_system_prompt(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    r = await client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are a terse assistant. Answer in one line."},
            {"role": "user", "content": "Which queue is the fast one, and why?"},
        ],
        max_tokens=24,
        **GREEDY,
        **TOKEN_IDS,
    )
    return dump(r)


async def chat_streamed_with_usage(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    """A streamed chat, reassembled: the text and token ids per choice, the finish reason,
    the one usage chunk (last, with no choices) and that every other chunk has
    ``usage: null``. Chunk boundaries are not compared: a proxy may coalesce chunks."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Stream a short story about a warm cache."}],
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
        **TOKEN_IDS,
    )
    chunks = [c.model_dump(mode="json") async for c in stream]
    text: dict[int, str] = {}
    token_ids: dict[int, list[int]] = {}
    roles: dict[int, list[str]] = {}
    finish: dict[int, list[str | None]] = {}
    usage = [c["usage"] for c in chunks if c.get("usage") is not None]
    prompt_ids = [c["prompt_token_ids"] for c in chunks if c.get("prompt_token_ids")]
    for c in chunks:
        for ch in c["choices"]:
            i = ch["index"]
            delta = ch.get("delta") or {}
            text[i] = text.get(i, "") + (delta.get("content") or "")
            token_ids.setdefault(i, []).extend(ch.get("token_ids") or [])
            if delta.get("role"):
                roles.setdefault(i, []).append(delta["role"])
            if ch.get("finish_reason") is not None:
                finish.setdefault(i, []).append(ch["finish_reason"])
    return {
        "models": sorted({c["model"] for c in chunks}),
        "objects": sorted({c["object"] for c in chunks}),
        "one_id_per_stream": len({c["id"] for c in chunks}) == 1,
        "text": text,
        "token_ids": token_ids,
        "roles": roles,
        "finish_reasons": finish,
        "prompt_token_ids": prompt_ids,
        "usage_chunks": usage,
        "usage_chunk_is_last_and_has_no_choices": bool(
            chunks and chunks[-1].get("usage") is not None and chunks[-1]["choices"] == []
        ),
        "usage_null_elsewhere": all(c.get("usage") is None for c in chunks[:-1]),
    }


async def completion_with_echo_and_logprobs(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    r = await client.completions.create(
        model=MODEL,
        prompt="The router sends the request to the worker with the warm prefix",
        max_tokens=12,
        echo=True,
        logprobs=3,
        **GREEDY,
        # token ids through the logprobs ("token_id:N"): with return_token_ids vLLM does
        # not detokenize the prompt, so the echo would lose its text
        extra_body={"return_tokens_as_token_ids": True},
    )
    return dump(r)


async def chat_with_json_schema(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    r = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe the block as JSON."}],
        max_tokens=128,
        logit_bias=ctx.no_whitespace,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "block", "schema": SCHEMA, "strict": True},
        },
        **GREEDY,
        **TOKEN_IDS,
    )
    out = dump(r)
    content = r.choices[0].message.content or ""
    try:
        parsed = json.loads(content)
        jsonschema.validate(parsed, SCHEMA)
        out["schema_check"] = "valid"
    except (ValueError, jsonschema.ValidationError) as e:
        out["schema_check"] = f"invalid: {e!s:.200} in {content!r:.200}"
    return out


async def chat_with_named_tool_choice(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    r = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        max_tokens=128,
        logit_bias=ctx.no_whitespace,
        tools=[WEATHER_TOOL, TIME_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        **GREEDY,
        **TOKEN_IDS,
    )
    out = dump(r)
    calls = r.choices[0].message.tool_calls or []
    checks = []
    for call in calls:
        fn = getattr(call, "function", None)
        try:
            args = json.loads(fn.arguments) if fn else None
            jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])
            checks.append(f"{fn.name if fn else None}: valid")
        except (ValueError, jsonschema.ValidationError) as e:
            checks.append(f"invalid: {e!s:.200}")
    out["tool_call_check"] = checks
    return out


async def chat_with_logit_bias(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    r = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say anything."}],
        max_tokens=8,
        logit_bias={str(BIASED_TOKEN): 100},
        **GREEDY,
        **TOKEN_IDS,
    )
    out = dump(r)
    out["all_biased"] = r.choices[0].model_dump().get("token_ids") == [BIASED_TOKEN] * 8
    return out


async def completion_of_token_ids(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    """``prompt`` as token ids, bare and as a list of one (OpenAI's and vLLM's forms): the
    engine gets the ids as they are, no tokenizer in between."""
    ids = list(range(BIASED_TOKEN, BIASED_TOKEN + 12))
    out: Outcome = {}
    for label, prompt in (("bare", ids), ("list_of_one", [ids])):
        r = await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=8, **GREEDY, **TOKEN_IDS
        )
        out[label] = dump(r)
    return out


async def completion_with_stop(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    """Asks once without ``stop``, picks a stop string from the middle of that text, asks
    again with it (each server derives its own stop string; equal texts, equal strings)."""
    prompt = "Every worker keeps a cache of prefix blocks and"
    free = await client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, **GREEDY)
    text = free.choices[0].text
    mid = len(text) // 2
    stop = text[mid : mid + 3] if len(text.strip()) >= 6 else ""
    out: Outcome = {"free_text": text, "stop": stop}
    if stop:
        r = await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=16, stop=[stop], **GREEDY, **TOKEN_IDS
        )
        out["stopped"] = dump(r)
    return out


async def chat_with_n_1(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    r = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "One answer only, please."}],
        max_tokens=12,
        n=1,
        **GREEDY,
        **TOKEN_IDS,
    )
    return dump(r)


async def unknown_model(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    return await refused(
        client.chat.completions.create(
            model="no-such-model",
            messages=[{"role": "user", "content": "Hello?"}],
            max_tokens=4,
            **GREEDY,
        )
    )


def over_context_text() -> str:
    """A prompt far over the 512-token context window (each word is a token or two)."""
    return " ".join(f"block {i} of the prefix" for i in range(400))


async def chat_over_context_window(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    return await refused(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": over_context_text()}],
            max_tokens=8,
            **GREEDY,
        )
    )


async def completion_over_context_window(client: openai.AsyncOpenAI, ctx: Ctx) -> Outcome:
    return await refused(
        client.completions.create(model=MODEL, prompt=over_context_text(), max_tokens=8, **GREEDY)
    )


CASES: dict[str, Case] = {
    "chat_with_system_prompt": chat_with_system_prompt,
    "chat_streamed_with_usage": chat_streamed_with_usage,
    "completion_with_echo_and_logprobs": completion_with_echo_and_logprobs,
    "chat_with_json_schema": chat_with_json_schema,
    "chat_with_named_tool_choice": chat_with_named_tool_choice,
    "chat_with_logit_bias": chat_with_logit_bias,
    "completion_of_token_ids": completion_of_token_ids,
    "completion_with_stop": completion_with_stop,
    "chat_with_n_1": chat_with_n_1,
    "unknown_model": unknown_model,
    "chat_over_context_window": chat_over_context_window,
    "completion_over_context_window": completion_over_context_window,
}


# --- comparing ------------------------------------------------------------------------------


def differences(ref: Any, got: Any, path: str = "$") -> list[str]:
    """Where ``got`` differs from ``ref``: one line per path (JSON values; floats within
    :data:`LOGPROB_TOLERANCE`, so log-probabilities computed twice may differ in the last
    bits)."""
    if isinstance(ref, dict) and isinstance(got, dict):
        out: list[str] = []
        for k in sorted(set(ref) | set(got), key=str):
            if k not in got:
                out.append(f"{path}.{k}: missing (vllm serve: {ref[k]!r:.120})")
            elif k not in ref:
                out.append(f"{path}.{k}: extra ({got[k]!r:.120}); vllm serve has none")
            else:
                out += differences(ref[k], got[k], f"{path}.{k}")
        return out
    if isinstance(ref, list) and isinstance(got, list):
        if len(ref) != len(got):
            return [
                f"{path}: {len(got)} items, vllm serve {len(ref)}: {got!r:.200} vs {ref!r:.200}"
            ]
        return [
            d
            for i, (a, b) in enumerate(zip(ref, got, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    if isinstance(ref, float) and isinstance(got, float):
        same = math.isclose(ref, got, abs_tol=LOGPROB_TOLERANCE) or (math.isinf(ref) and ref == got)
        return [] if same else [f"{path}: {got!r}, vllm serve {ref!r}"]
    if type(ref) is not type(got) or ref != got:
        return [f"{path}: {got!r:.200}, vllm serve {ref!r:.200}"]
    return []
