"""finish_reason is only ever OpenAI's (stop, length, tool_calls, content_filter) whatever
the path: vLLM's ``"abort"`` (a draining worker's engine aborted the request) becomes an
error event after what was passed on, or a retry on another endpoint when nothing was."""

from __future__ import annotations

import json

import pytest
from fakeopenai import fake_openai, serve_openai, stream_events
from frontendkit import router, workers

from preheat.router.frontend.finish_reasons import OPENAI_FINISH_REASONS, foreign_finish

CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"choices":[{"finish_reason":"stop"}]}', None),
        (b'{"choices":[{"finish_reason":null}]}', None),
        (b'{"choices":[{"finish_reason": "abort"}]}', (0, "abort")),
        (b'data: {"finish_reason":null}\n\ndata: {"finish_reason":"error"}\n\n', (30, "error")),
        (b'data: {"finish_reason":"length"}\n\ndata: [DONE]\n\n', None),
        (
            b'{"choices":[{"finish_reason":"tool_calls"},{"finish_reason":"repetition"}]}',
            (0, "repetition"),
        ),
    ],
)
def test_foreign_finish(data: bytes, expected: tuple[int, str] | None) -> None:
    assert foreign_finish(data) == expected
    assert {"stop", "length", "tool_calls", "content_filter"} == OPENAI_FINISH_REASONS


async def test_an_aborted_stream_ends_with_an_error_event_after_what_was_passed_on() -> None:
    async with fake_openai(["abort"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            async with r.http.post(r.url + CHAT, json={**BODY, "stream": True}) as resp:
                assert resp.status == 200
                got = await resp.read()
            assert b'"abort"' not in got
            first = stream_events(False)[0]
            assert got.startswith(first)  # the token before the abort was passed on
            rest = got[len(first) :].split(b"\n\n")
            err = json.loads(rest[0][len(b"data: ") :])["error"]
            assert err["code"] == "unavailable"
            assert "finish_reason 'abort'" in err["message"]
            assert rest[1:] == [b"data: [DONE]", b""]


@pytest.mark.parametrize(
    ("mode", "stream"),
    [("abort", False), ("abort_first", False), ("abort_first", True)],
)
async def test_an_abort_before_anything_was_passed_on_is_retried(mode: str, stream: bool) -> None:
    async with fake_openai([mode, "ok"]) as fake, workers([{"id": "w-1"}, {"id": "w-2"}]) as ws:
        for w in ws:
            serve_openai(w, fake.port)
        async with router([w.endpoint for w in ws]) as r:
            async with r.http.post(r.url + CHAT, json={**BODY, "stream": stream}) as resp:
                assert resp.status == 200
                got = await resp.read()
            assert b'"abort"' not in got
            assert len(fake.bodies) == 2  # the second endpoint answered
            assert b'"length"' in got


async def test_an_aborted_answer_with_no_other_endpoint_is_503() -> None:
    async with fake_openai(["abort"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], max_retries=0) as r:
            async with r.http.post(r.url + CHAT, json=BODY) as resp:
                assert resp.status == 503
                err = (await resp.json())["error"]
            assert "finish_reason 'abort'" in err["message"]
