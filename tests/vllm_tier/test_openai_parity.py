"""OpenAI API parity with ``vllm serve``: the same requests to ``vllm serve`` and to Preheat.

The tiny offline model is served twice, one after the other (never both at once: 2 cores,
24 GiB shared): by ``vllm serve``'s own API server on loopback (:func:`oai_servers.vllm_serve`),
then by ``preheat up --engine vllm`` (router + one vLLM worker, :func:`oai_servers.preheat_up`),
with identical engine settings (:class:`oai_servers.EngineSettings`: max_model_len, seed,
dtype, block size, prefix caching, KV cache size, tool-call parser). Every request of
:data:`oai_cases.CASES` goes through the official ``openai`` client, greedy with a fixed
seed, asking for token ids (``return_token_ids``): a chat with a system prompt, a streamed
chat with ``stream_options.include_usage``, legacy completions with ``echo`` and
``logprobs``, a ``response_format`` JSON schema (the output must parse and validate), tools
with a named ``tool_choice`` (the arguments must validate), ``logit_bias``, ``stop``,
``n`` = 1, an unknown model and a prompt over the context window (chat and completions).

What must match: the whole response as the client parses it (token ids of the templated
prompt and of every choice, text, ``finish_reason``, ``stop_reason``, ``usage``, ``model``,
``object``, ``system_fingerprint``, logprobs within 1e-4), and for errors the HTTP status, the
client's exception class and the body's ``type``, ``code`` and ``param``. Three refusals are
the router's own (:data:`ROUTER_ANSWERS`: an unknown model, a prompt over the window): their
status and exception class match ``vllm serve``'s; their body follows issue 13's Build 2
(OpenAI's codes), not ``vllm serve``'s, and the full comparison of it is a strict xfail that
names the fields (the issue asks both; they cannot both hold).

What cannot match, and is left out of the comparison (:data:`oai_cases.UNMATCHABLE`):

- ``id``: a fresh random id per request (``chatcmpl-``/``cmpl-`` + a uuid) on either server;
- ``created``: the second the server made the response;
- ``choices[].message.tool_calls[].id``: a fresh random id per tool call;
- in a stream, where chunk boundaries fall: the router may coalesce events
  (``--coalesce-tokens``), so a stream is compared reassembled: text and token ids per choice,
  roles, finish reasons, the one usage chunk (last, no choices), ``usage: null`` elsewhere,
  one id per stream;
- error ``message`` texts: wording is not API (clients key on status, type and code).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import aiohttp
import jsonschema
import openai
import pytest_asyncio
from oai_cases import (
    BIASED_TOKEN,
    CASES,
    SEED,
    TIME_TOOL,
    WEATHER_TOOL,
    Ctx,
    Outcome,
    context,
    differences,
    error_outcome,
    over_context_text,
)
from oai_servers import EngineSettings, PreheatUp, preheat_up, vllm_serve

# the module fixtures start two vLLM engines in turn (each up to START_TIMEOUT_S)
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(600),
]

SETTINGS = EngineSettings()


def client(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def ctx(tiny_model: Path) -> Ctx:
    return context(tiny_model)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reference(
    tiny_model: Path, ctx: Ctx, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    """Every case's outcome from ``vllm serve`` (stopped again before Preheat starts)."""
    out: dict[str, Outcome] = {}
    async with vllm_serve(tiny_model, SETTINGS, tmp_path_factory.mktemp("vllm-serve")) as base:
        c = client(base)
        for name, case in CASES.items():
            out[name] = await case(c, ctx)
        await c.close()
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def up(
    reference: dict[str, Outcome], tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[PreheatUp]:
    """``preheat up`` of the same model (after ``reference``: one engine at a time)."""
    async with preheat_up(tiny_model, SETTINGS, tmp_path_factory.mktemp("preheat-up")) as u:
        yield u


def _choice(outcome: Outcome, key: str = "choices") -> dict[str, Any]:
    choices = outcome[key]
    assert len(choices) == 1, outcome
    first: dict[str, Any] = choices[0]
    return first


async def test_reference_answers_are_what_the_cases_ask_for(reference: dict[str, Outcome]) -> None:
    """``vllm serve`` honours every parameter (else a match would prove little)."""
    r = reference
    assert _choice(r["chat_with_system_prompt"])["token_ids"]
    assert r["chat_with_system_prompt"]["prompt_token_ids"]
    assert r["chat_streamed_with_usage"]["usage_chunk_is_last_and_has_no_choices"] is True
    assert r["chat_streamed_with_usage"]["usage_null_elsewhere"] is True
    assert len(r["chat_streamed_with_usage"]["usage_chunks"]) == 1
    echo = _choice(r["completion_with_echo_and_logprobs"])
    assert echo["logprobs"]["top_logprobs"]
    assert all(t.startswith("token_id:") for t in echo["logprobs"]["tokens"])
    assert echo["text"].startswith("The router sends the request")
    assert r["chat_with_json_schema"]["schema_check"] == "valid"
    assert _choice(r["chat_with_json_schema"])["finish_reason"] == "stop"
    assert r["chat_with_named_tool_choice"]["tool_call_check"] == ["get_weather: valid"]
    assert r["chat_with_logit_bias"]["all_biased"] is True, BIASED_TOKEN
    stopped = r["completion_with_stop"]
    assert stopped["stop"]
    assert _choice(stopped["stopped"])["finish_reason"] == "stop"
    assert _choice(stopped["stopped"])["stop_reason"] == stopped["stop"]
    assert len(r["chat_with_n_1"]["choices"]) == 1
    assert r["unknown_model"]["error"]["status"] == 404
    assert r["chat_over_context_window"]["error"]["status"] == 400
    assert r["completion_over_context_window"]["error"]["status"] == 400


async def _preheat_outcome(up: PreheatUp, ctx: Ctx, name: str) -> Outcome:
    c = client(up.http)
    try:
        got = await CASES[name](c, ctx)
    except openai.APIStatusError as e:  # vllm serve answered it (test above): a difference
        got = {"unexpected_error": error_outcome(e), "message": str(e)[:500]}
    finally:
        await c.close()
    return got


ROUTER_ANSWERS = ("unknown_model", "chat_over_context_window", "completion_over_context_window")
"""Cases the router answers itself, with OpenAI's codes, as issue 13's Build 2 asks."""


@pytest.mark.parametrize("name", [n for n in CASES if n not in ROUTER_ANSWERS])
async def test_preheat_answers_as_vllm_serve(
    name: str, reference: dict[str, Outcome], up: PreheatUp, ctx: Ctx
) -> None:
    diff = differences(reference[name], await _preheat_outcome(up, ctx, name))
    assert not diff, f"{name}: Preheat differs from vllm serve:\n" + "\n".join(diff)


@pytest.mark.parametrize("name", ROUTER_ANSWERS)
async def test_router_refusals_have_vllm_serves_status_and_exception(
    name: str, reference: dict[str, Outcome], up: PreheatUp, ctx: Ctx
) -> None:
    """The refusals the router makes itself: the same HTTP status and ``openai`` exception
    class as ``vllm serve``'s (the body's ``type``/``code``/``param``: next test)."""
    got = await _preheat_outcome(up, ctx, name)
    assert "error" in got, got
    keep = ("status", "exception")
    ref = {k: reference[name]["error"][k] for k in keep}
    assert {k: got["error"][k] for k in keep} == ref


@pytest.mark.xfail(
    strict=True,
    reason="issue 13 asks two things of these refusals that cannot both hold: its Build 2 has "
    "the router answer them itself in OpenAI's shape, its Acceptance 1 wants vllm serve's "
    "body. Measured: an unknown model is type invalid_request_error, code model_not_found "
    "from the router, NotFoundError and '404' from vllm serve; a prompt over the window is "
    "invalid_request_error, context_length_exceeded, param null from the router, "
    "BadRequestError, '400', param 'input_text' from vllm serve. The router follows Build 2 "
    "(OpenAI clients and litellm key on OpenAI's codes)",
)
@pytest.mark.parametrize("name", ROUTER_ANSWERS)
async def test_router_refusals_have_vllm_serves_body(
    name: str, reference: dict[str, Outcome], up: PreheatUp, ctx: Ctx
) -> None:
    diff = differences(reference[name], await _preheat_outcome(up, ctx, name))
    assert not diff, f"{name}: Preheat differs from vllm serve:\n" + "\n".join(diff)


# --- the same Preheat, through other clients ------------------------------------------------


async def test_langchain_bind_tools_gets_the_named_tool_call(up: PreheatUp, ctx: Ctx) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        base_url=up.http + "/v1",
        api_key="unused",  # type: ignore[arg-type]
        model=SETTINGS.served_model_name,
        temperature=0,
        seed=SEED,
        max_tokens=128,
        max_retries=0,
        logit_bias=ctx.no_whitespace,  # type: ignore[call-arg]
    )
    bound = llm.bind_tools([WEATHER_TOOL, TIME_TOOL], tool_choice="get_weather")
    message = await bound.ainvoke("What is the weather in Oslo?")
    calls = message.tool_calls  # type: ignore[attr-defined]
    assert [c["name"] for c in calls] == ["get_weather"], message
    jsonschema.validate(calls[0]["args"], WEATHER_TOOL["function"]["parameters"])


async def test_langchain_with_structured_output_parses(up: PreheatUp, ctx: Ctx) -> None:
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, ConfigDict

    class Block(BaseModel):
        model_config = ConfigDict(extra="forbid")
        color: Literal["red", "green", "blue"]
        size: Literal["small", "large"]
        ok: bool

    llm = ChatOpenAI(
        base_url=up.http + "/v1",
        api_key="unused",  # type: ignore[arg-type]
        model=SETTINGS.served_model_name,
        temperature=0,
        seed=SEED,
        max_tokens=128,
        max_retries=0,
        logit_bias=ctx.no_whitespace,  # type: ignore[call-arg]
    )
    structured = llm.with_structured_output(Block, method="json_schema", strict=True)
    block = await structured.ainvoke("Describe the block.")
    assert isinstance(block, Block)


def _litellm() -> Any:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import
    import litellm

    return litellm


async def test_litellm_maps_a_prompt_over_the_window_to_context_window_exceeded(
    up: PreheatUp,
) -> None:
    litellm = _litellm()
    with pytest.raises(litellm.ContextWindowExceededError) as e:
        await litellm.acompletion(
            model="openai/" + SETTINGS.served_model_name,
            api_base=up.http + "/v1",
            api_key="unused",
            messages=[{"role": "user", "content": over_context_text()}],
            max_tokens=8,
            num_retries=0,
        )
    assert e.value.status_code == 400


async def test_litellm_raises_rate_limit_error_on_the_routers_429(up: PreheatUp) -> None:
    """A TTFT deadline no endpoint can meet (1 ms for a long prompt): the router's admission
    refuses it with 429 ``rate_limit_exceeded``, which litellm raises as RateLimitError."""
    litellm = _litellm()
    prompt = " ".join(["the cache of the worker"] * 30)  # ~150 tokens: inside the window
    with pytest.raises(litellm.RateLimitError) as e:
        await litellm.acompletion(
            model="openai/" + SETTINGS.served_model_name,
            api_base=up.http + "/v1",
            api_key="unused",
            messages=[{"role": "user", "content": prompt}],
            max_tokens=8,
            num_retries=0,
            extra_body={"ttft_deadline_ms": 1},
        )
    assert e.value.status_code == 429


# --- routing: the router's predicted cached blocks against vLLM's hits ---------------------

TURNS = 4  # the whole chat stays well inside the 512-token window
THINK_S = 1.0  # between turns: the worker's KV events reach the router meanwhile


async def _prefix_hits(http: aiohttp.ClientSession, metrics_url: str) -> float:
    """The worker's ``vllm:prefix_cache_hits`` counter (tokens), from its /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    async with http.get(metrics_url) as r:
        text = await r.text()
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "vllm:prefix_cache_hits"
        for s in fam.samples
        if s.name.endswith("_total")
    )


def _predictions(router_log: Path) -> list[int]:
    """``predicted_cached_blocks`` of every passed-through chat request, in log order."""
    out = []
    for line in router_log.read_text().splitlines():
        if '"request_done"' not in line:
            continue
        rec = json.loads(line)
        if rec.get("event") == "request_done":
            out.append(int(rec["predicted_cached_blocks"]))
    return out


async def test_predicted_cached_blocks_match_vllm_prefix_hits(up: PreheatUp, ctx: Ctx) -> None:
    """A multi-turn chat replayed through the router: for every turn, the blocks the router
    predicted to hit the worker's prefix cache (``predicted_cached_blocks`` in its
    ``request_done`` log line) equal, within one block, the blocks vLLM reports as hits
    (its ``vllm:prefix_cache_hits`` counter, in tokens, over the request / block size): the
    router hashes the same templated token ids the engine caches."""
    (endpoint,) = up.endpoints()
    metrics_url = str(endpoint["metrics_url"])
    router_log = up.run / "logs" / "router.log"
    c = client(up.http)
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "You answer questions about caches, briefly."}
    ]
    predicted: list[int] = []
    actual: list[int] = []
    async with aiohttp.ClientSession() as http:
        for turn in range(TURNS):
            messages.append(
                {
                    "role": "user",
                    "content": f"Turn {turn}: " + over_context_text()[: 60 + 10 * turn],
                }
            )
            before_hits = await _prefix_hits(http, metrics_url)
            before_logs = len(_predictions(router_log))
            r = await c.chat.completions.create(
                model=SETTINGS.served_model_name,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=12,
                temperature=0,
                seed=SEED,
                user="routing-check",
            )
            messages.append({"role": "assistant", "content": r.choices[0].message.content or ""})
            await asyncio.sleep(THINK_S)  # the counter and the log line land meanwhile
            hits = await _prefix_hits(http, metrics_url) - before_hits
            logged = _predictions(router_log)
            assert len(logged) == before_logs + 1, f"turn {turn}: no request_done line"
            predicted.append(logged[-1])
            actual.append(int(hits) // SETTINGS.block_size)
    await c.close()
    print(f"per turn: router predicted {predicted} blocks, vLLM hit {actual}")  # -rP shows it
    assert sum(actual[1:]) > 0, f"no prefix-cache hits after the first turn: {actual}"
    off = [
        (t, p, a) for t, (p, a) in enumerate(zip(predicted, actual, strict=True)) if abs(p - a) > 1
    ]
    assert not off, f"turns where the router's prediction is off by more than a block: {off}"
