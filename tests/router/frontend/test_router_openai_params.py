"""Every OpenAI chat-completions and completions parameter is either honoured by the router or
refused with a 400 that names it; a value with no effect is accepted. The parameter lists
come from the installed ``openai`` package, so a parameter OpenAI adds fails here until it
is classified in ``preheat.router.frontend.oai_params`` (and given samples below)."""

from __future__ import annotations

import json
import typing
from typing import Any

import grpc
import openai
import pytest
from frontendkit import MODEL, router, workers
from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params

from preheat.proto.preheat.v1 import inference_pb2
from preheat.router.frontend.oai_params import (
    CHAT,
    COMPLETIONS,
    VLLM_IGNORED,
    Param,
    vllm_unsupported,
)
from preheat.router.frontend.openai_schema import (
    BodyError,
    ChatBody,
    CompletionBody,
    parse_body,
    to_generate_request,
)

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def _openai_fields(module: Any) -> set[str]:
    """Every request parameter of one endpoint in the openai package's TypedDicts."""
    names: set[str] = set()
    for td in (module.CompletionCreateParamsNonStreaming, module.CompletionCreateParamsStreaming):
        names |= set(typing.get_type_hints(td))
    return names


# What the test sends for each parameter.
# honoured: a value that is applied. refused: (extra fields, value) that must be a 400 naming
# the parameter. noop: values that change nothing and must be accepted.
HONOURED: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 3,
    "max_completion_tokens": 3,
    "temperature": 0.5,
    "top_p": 0.9,
    "seed": 7,
    "stop": ["zzz"],
    "stream": False,
    "stream_options": {"include_usage": True},
    "user": "alice",
    "prompt_cache_key": "conversation-1",
    "metadata": {"k": "v"},
    "safety_identifier": "user-hash",
    "messages": [{"role": "user", "content": "hello"}],
    "prompt": "hello there",
}
REFUSED: dict[str, tuple[dict[str, Any], Any]] = {
    "n": ({}, 2),
    "frequency_penalty": ({}, 0.5),
    "presence_penalty": ({}, -1.0),
    "logit_bias": ({}, {"50256": -100}),
    "store": ({}, True),
    "service_tier": ({}, "flex"),
    "tools": ({}, [TOOL]),
    "tool_choice": ({}, "required"),
    "parallel_tool_calls": ({"tools": [TOOL]}, True),
    "functions": ({}, [{"name": "f", "parameters": {}}]),
    "function_call": ({}, {"name": "f"}),
    "response_format": ({}, {"type": "json_object"}),
    "logprobs": ({}, True),
    "top_logprobs": ({}, 2),
    "audio": ({}, {"voice": "alloy", "format": "wav"}),
    "modalities": ({}, ["text", "audio"]),
    "prediction": ({}, {"type": "content", "content": "x"}),
    "reasoning_effort": ({}, "low"),
    "verbosity": ({}, "low"),
    "web_search_options": ({}, {}),
    "moderation": ({}, {"model": "omni-moderation-latest"}),
    "prompt_cache_retention": ({}, "24h"),
    "prompt_cache_options": ({}, {"mode": "explicit", "ttl": "30m"}),
    "best_of": ({}, 2),
    "echo": ({}, True),
    "suffix": ({}, "and then"),
}
COMPLETIONS_REFUSED = {**REFUSED, "logprobs": ({}, 0)}  # legacy logprobs: an int, 0 included
NOOP: dict[str, list[Any]] = {
    "n": [1],
    "frequency_penalty": [0, 0.0],
    "presence_penalty": [0],
    "logit_bias": [{}],
    "store": [False],
    "service_tier": ["auto", "default"],
    "tools": [[]],
    "tool_choice": ["none", "auto"],
    "parallel_tool_calls": [True, False],
    "functions": [[]],
    "function_call": ["none"],
    "response_format": [{"type": "text"}],
    "logprobs": [False],
    "top_logprobs": [0],
    "modalities": [["text"]],
    "verbosity": ["medium"],
    "prompt_cache_retention": ["in_memory"],
    "best_of": [1],
    "echo": [False],
    "suffix": [""],
    "stream_options": [{"include_usage": False, "include_obfuscation": False}],
}
COMPLETIONS_NOOP = {**NOOP, "logprobs": []}
# every parameter may also be null (the openai client leaves an omitted one out)
BASE_CHAT: dict[str, Any] = {"messages": [{"role": "user", "content": "hi there"}]}
BASE_COMPLETIONS: dict[str, Any] = {"prompt": "hi there"}

ENDPOINTS = [
    ("chat", "/v1/chat/completions", chat_params, CHAT, ChatBody, BASE_CHAT, REFUSED, NOOP),
    (
        "completions",
        "/v1/completions",
        completion_params,
        COMPLETIONS,
        CompletionBody,
        BASE_COMPLETIONS,
        COMPLETIONS_REFUSED,
        COMPLETIONS_NOOP,
    ),
]


def _cases(
    table: dict[str, Param],
    base: dict[str, Any],
    refused: dict[str, tuple[dict[str, Any], Any]],
    noop: dict[str, list[Any]],
) -> list[tuple[str, dict[str, Any], bool]]:
    """(parameter, body, accepted?) for every parameter of ``table``."""
    out: list[tuple[str, dict[str, Any], bool]] = []
    for name, param in table.items():
        if param.honoured:
            out.append((name, {**base, name: HONOURED[name]}, True))
            continue
        extra, value = refused[name]
        out.append((name, {**base, **extra, name: value}, False))
        out.append((name, {**base, name: None}, True))
        out.extend((name, {**base, name: v}, True) for v in noop.get(name, []))
    return out


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_every_openai_parameter_is_classified(endpoint: tuple[Any, ...]) -> None:
    _, _, module, table, *_ = endpoint
    openai_fields = _openai_fields(module)
    assert openai_fields, "no parameters found in the openai package"
    assert set(table) == openai_fields, (
        f"unclassified: {sorted(openai_fields - set(table))}; "
        f"not OpenAI's: {sorted(set(table) - openai_fields)}"
    )
    for name, param in table.items():  # the test has samples for each
        assert name in (HONOURED if param.honoured else REFUSED), name


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_each_parameter_is_honoured_or_refused_by_name(endpoint: tuple[Any, ...]) -> None:
    _, _, _, table, model, base, refused, noop = endpoint
    for name, body, accepted in _cases(table, base, refused, noop):
        raw = json.dumps(body).encode()
        if accepted:
            parse_body(model, raw)  # no error
            continue
        with pytest.raises(BodyError) as exc:
            parse_body(model, raw)
        err = exc.value
        assert err.reason is not None, name
        assert err.reason.value == "unsupported_parameter", name
        assert f"'{name}'" in err.message, (name, err.message)
        assert err.param in {name, *body}, (name, err.param)


def test_every_refused_parameter_is_named_at_once() -> None:
    body = {**BASE_CHAT, "tools": [TOOL], "logprobs": True, "top_k": 5, "presence_penalty": 1}
    with pytest.raises(BodyError) as exc:
        parse_body(ChatBody, json.dumps(body).encode())
    for name in ("tools", "logprobs", "top_k", "presence_penalty"):
        assert f"'{name}'" in exc.value.message
    assert exc.value.param == "tools"


def test_a_message_with_tool_calls_is_refused() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    with pytest.raises(BodyError) as exc:
        parse_body(ChatBody, json.dumps({"messages": messages}).encode())
    assert exc.value.param == "messages.1.tool_calls"
    assert "'messages.1.tool_calls'" in exc.value.message
    ok = [{"role": "assistant", "content": "x", "tool_calls": []}, messages[0]]
    parse_body(ChatBody, json.dumps({"messages": ok}).encode())


def test_a_content_part_that_is_not_text_is_named_by_its_type() -> None:
    # an image part got the union's three unrelated complaints ("Input should be a valid
    # string; ... type: Input should be 'text'; ... text: Field required")
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {}}]
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": parts}]}
    with pytest.raises(BodyError) as exc:
        parse_body(ChatBody, json.dumps(body).encode())
    assert exc.value.param == "messages.1.content"
    assert exc.value.message == (
        "invalid request: messages.1.content: content[1] is a part of type 'image_url': the "
        "pool's models take text, so only 'text' parts are served"
    )
    text_only = parse_body(
        ChatBody, json.dumps({"messages": [{"role": "user", "content": parts[:1]}]}).encode()
    )
    assert text_only.messages[0].text() == "what is this?"


def test_honoured_parameters_reach_the_engine_request() -> None:
    body = parse_body(
        ChatBody,
        b'{"messages": [{"role": "user", "content": "x"}], "temperature": 0.5, "top_p": 0.9,'
        b' "seed": 7, "stop": ["zzz"], "max_completion_tokens": 3, "prompt_cache_key": "c-1"}',
    )
    req = to_generate_request(body, "x", 3, session_id=body.session_id, request_id="r")
    assert req.sampling.temperature == pytest.approx(0.5)
    assert req.sampling.top_p == pytest.approx(0.9)
    assert req.sampling.seed == 7
    assert list(req.sampling.stop) == ["zzz"]
    assert req.session_id == "c-1"  # prompt_cache_key binds the session


async def test_the_router_answers_the_table_over_http() -> None:
    """Every case of both tables through a live router: 200 or a 400 naming the parameter,
    with OpenAI's code, as the official client sees it."""
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        wrong: list[str] = []
        for label, path, _, table, _, base, refused, noop in ENDPOINTS:
            for name, body, accepted in _cases(table, base, refused, noop):
                body = {"max_tokens": 2, **body}
                async with r.http.post(r.url + path, json=body) as resp:
                    payload = await resp.read()
                    status = resp.status
                if accepted and status != 200:
                    wrong.append(f"{label} {name}={body.get(name)!r}: {status} {payload[:200]!r}")
                if not accepted:
                    err = json.loads(payload).get("error", {})
                    if status != 400 or err.get("code") != "unsupported_parameter":
                        wrong.append(f"{label} {name}: {status} {payload[:200]!r}")
                    elif f"'{name}'" not in err.get("message", ""):
                        wrong.append(f"{label} {name}: not named in {err.get('message')!r}")
        assert not wrong, "\n".join(wrong)

        client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
        try:
            with pytest.raises(openai.BadRequestError) as exc:
                await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "hi"}],
                    tools=[TOOL],  # type: ignore[list-item]
                    tool_choice={"type": "function", "function": {"name": "f"}},
                    max_tokens=2,
                )
            assert exc.value.code == "unsupported_parameter"
            assert exc.value.param in {"tools", "tool_choice"}  # the first in the body
            assert "'tools'" in exc.value.message
            assert "'tool_choice'" in exc.value.message
        finally:
            await client.close()


async def test_a_completion_prompt_of_token_ids_goes_to_the_engine_as_ids() -> None:
    """OpenAI's and vLLM's completions take ``prompt`` as token ids (a list of integers, or
    a list of one such list); the sim path refused them with four unrelated complaints."""
    ids = [11, 12, 13, 14, 15]
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
        try:
            for prompt in (ids, [ids]):
                got = await client.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
                assert got.usage is not None
                assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (5, 2)
            refused = {
                "two prompts": ([ids, ids], "exactly one prompt is supported, 2 were sent"),
                "a negative id": ([3, -1], "token id -1 is not in [0, 4294967295]"),
                "outside the vocabulary": ([3, 10**9], "outside the vocabulary"),
                "a float": ([1.5], "expected a string or token ids (integers)"),
            }
            for label, (prompt, said) in refused.items():
                with pytest.raises(openai.BadRequestError) as exc:
                    await client.completions.create(
                        model=MODEL,
                        prompt=prompt,  # type: ignore[arg-type]
                        max_tokens=2,
                    )
                assert said in exc.value.message, label
        finally:
            await client.close()


# What each engine does with every parameter. sim: the gRPC path (the table in oai_params):
# honoured, or refused with a 400 naming it unless its value has no effect. vllm: the
# passthrough to vLLM's own OpenAI layer: honoured (a field of vLLM's request model: applied,
# or refused by vLLM with its own 400); refused (vLLM has no field for it and would answer 200
# without applying it, as `vllm serve` does, so the router refuses it unless its value has
# no effect: oai_params.VLLM_IGNORED, pinned against vLLM's models in
# tests/vllm_tier/test_vllm_openai_fields.py); router (vLLM ignores it, the router reads it:
# prompt_cache_key is the session, metadata and safety_identifier are informational).
ENGINE_TABLE = """
parameter               endpoints  sim       vllm
model                   C L        honoured  honoured
messages                C          honoured  honoured
prompt                  L          honoured  honoured
max_tokens              C L        honoured  honoured
max_completion_tokens   C          honoured  honoured
temperature             C L        honoured  honoured
top_p                   C L        honoured  honoured
seed                    C L        honoured  honoured
stop                    C L        honoured  honoured
stream                  C L        honoured  honoured
stream_options          C L        honoured  honoured
user                    C L        honoured  honoured
prompt_cache_key        C          honoured  router
metadata                C          honoured  router
safety_identifier       C          honoured  router
n                       C L        refused   honoured
best_of                 L          refused   refused
frequency_penalty       C L        refused   honoured
presence_penalty        C L        refused   honoured
logit_bias              C L        refused   honoured
logprobs                C L        refused   honoured
top_logprobs            C          refused   honoured
echo                    L          refused   honoured
suffix                  L          refused   honoured
tools                   C          refused   honoured
tool_choice             C          refused   honoured
parallel_tool_calls     C          refused   honoured
functions               C          refused   refused
function_call           C          refused   refused
response_format         C          refused   honoured
reasoning_effort        C          refused   honoured
store                   C          refused   refused
service_tier            C          refused   refused
audio                   C          refused   refused
modalities              C          refused   refused
prediction              C          refused   refused
verbosity               C          refused   refused
web_search_options      C          refused   refused
moderation              C          refused   refused
prompt_cache_retention  C          refused   refused
prompt_cache_options    C          refused   refused
"""


def _engine_rows() -> dict[str, tuple[set[str], str, str]]:
    rows: dict[str, tuple[set[str], str, str]] = {}
    for line in ENGINE_TABLE.strip().splitlines()[1:]:
        name, *eps, sim, vllm = line.split()
        rows[name] = ({"chat" if e == "C" else "completions" for e in eps}, sim, vllm)
    return rows


def test_the_engine_table_says_for_every_parameter_what_each_engine_does() -> None:
    rows = _engine_rows()
    tables = {"chat": CHAT, "completions": COMPLETIONS}
    for endpoint, table in tables.items():
        listed = {n for n, (eps, _, _) in rows.items() if endpoint in eps}
        assert listed == set(table), endpoint  # every OpenAI parameter (see the test above)
    for name, (eps, sim, vllm) in rows.items():
        for endpoint in eps:
            param = tables[endpoint][name]
            assert sim == ("honoured" if param.honoured else "refused"), (name, endpoint)
            ignored = name in VLLM_IGNORED[endpoint]
            expected = "honoured" if not ignored else ("router" if param.honoured else "refused")
            assert vllm == expected, (name, endpoint)


def test_vllm_unsupported_names_what_vllm_would_ignore_at_a_value_with_effect() -> None:
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "store": True,
        "modalities": ["text"],  # no effect
        "prompt_cache_key": "c-1",  # the router applies it
        "tools": [TOOL],  # vLLM applies it
        "audio": {"voice": "alloy", "format": "wav"},
    }
    assert [n for n, _ in vllm_unsupported(CHAT, "chat", body)] == ["store", "audio"]
    assert [n for n, _ in vllm_unsupported(COMPLETIONS, "completions", {"best_of": 2})] == [
        "best_of"
    ]
    assert vllm_unsupported(COMPLETIONS, "completions", {"best_of": 1}) == []


# Every gRPC SamplingParams field: what each engine does with it (sim: honoured, or refused
# with INVALID_ARGUMENT naming `sampling.<field>` unless its value has no effect; vllm:
# mapped onto vLLM's SamplingParams, tests/vllm_tier/test_vllm_sampling.py) and a value that
# has an effect.
GRPC_TABLE: dict[str, tuple[str, str, dict[str, Any]]] = {
    "max_tokens": ("honoured", "honoured", {"max_tokens": 3}),
    "temperature": ("honoured", "honoured", {"temperature": 0.5}),
    "top_p": ("honoured", "honoured", {"top_p": 0.5}),
    "stop": ("honoured", "honoured", {"stop": ["zzz"]}),
    "seed": ("honoured", "honoured", {"seed": 3}),
    "stop_token_ids": ("honoured", "honoured", {"stop_token_ids": [5]}),
    "ignore_eos": ("honoured", "honoured", {"ignore_eos": True}),
    "min_tokens": ("honoured", "honoured", {"min_tokens": 2}),
    "top_k": ("refused", "honoured", {"top_k": 5}),
    "min_p": ("refused", "honoured", {"min_p": 0.1}),
    "presence_penalty": ("refused", "honoured", {"presence_penalty": 0.5}),
    "frequency_penalty": ("refused", "honoured", {"frequency_penalty": 0.5}),
    "repetition_penalty": ("refused", "honoured", {"repetition_penalty": 1.2}),
    "logit_bias": ("refused", "honoured", {"logit_bias": {5: 2.0}}),
    "logprobs": ("refused", "honoured", {"logprobs": 0}),
    "prompt_logprobs": ("refused", "honoured", {"prompt_logprobs": 1}),
    "structured_output": (
        "refused",
        "honoured",
        {"structured_output": inference_pb2.StructuredOutput(json_object=True)},
    ),
}


def test_the_grpc_table_covers_every_sampling_field() -> None:
    fields = set(inference_pb2.SamplingParams.DESCRIPTOR.fields_by_name)
    assert set(GRPC_TABLE) == fields


async def test_the_router_answers_the_grpc_table_with_the_sim_engine() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        wrong: list[str] = []
        for name, (sim, _, value) in GRPC_TABLE.items():
            s = inference_pb2.SamplingParams(**{"max_tokens": 4, **value})
            req = inference_pb2.GenerateRequest(prompt="hello there", sampling=s)
            try:
                chunks = await r.generate(req)
                if sim != "honoured" or not chunks[-1].finish_reason:
                    wrong.append(f"{name}: answered, expected {sim}")
            except grpc.aio.AioRpcError as e:
                named = f"sampling.{name}" in (e.details() or "")
                if sim != "refused" or e.code() != grpc.StatusCode.INVALID_ARGUMENT or not named:
                    wrong.append(f"{name}: {e.code().name} {e.details()!r}, expected {sim}")
        assert not wrong, "\n".join(wrong)


async def test_vllm_extensions_the_sim_honours_over_http() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        base = {"prompt": "hello there", "max_tokens": 6, "seed": 2}
        async with r.http.post(r.url + "/v1/completions", json=base) as resp:
            free = (await resp.json())["choices"][0]["text"].split()
        stop_id = int(free[2][1:], 16)  # the sim's token text is " w<id in hex>"
        body = {**base, "stop_token_ids": [stop_id], "min_tokens": 0, "ignore_eos": True}
        async with r.http.post(r.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            choice = (await resp.json())["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["text"].split() == free[: free.index(free[2])]
        bad = {**base, "min_tokens": 7}
        async with r.http.post(r.url + "/v1/completions", json=bad) as resp:
            assert resp.status == 400
            assert (
                "sampling.min_tokens (7) must be at most max_tokens (6)"
                in ((await resp.json())["error"]["message"])
            )
        async with r.http.post(r.url + "/v1/completions", json={**base, "top_k": 3}) as resp:
            err = (await resp.json())["error"]
            assert (resp.status, err["code"]) == (400, "unsupported_parameter")
            assert "'top_k'" in err["message"]


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
@pytest.mark.parametrize(
    ("value", "accepted"), [(1.0, True), (1, True), (None, True), (1.2, False), (True, False)]
)
def test_vllm_repetition_penalty_is_accepted_only_at_its_no_op_value(
    endpoint: tuple[Any, ...], value: Any, accepted: bool
) -> None:
    # vLLM's benchmark client (vllm bench serve) sends repetition_penalty 1.0 every time
    _, _, _, _, model, base, _, _ = endpoint
    raw = json.dumps({**base, "repetition_penalty": value}).encode()
    if accepted:
        parse_body(model, raw)
        return
    with pytest.raises(BodyError) as exc:
        parse_body(model, raw)
    assert "'repetition_penalty'" in exc.value.message
