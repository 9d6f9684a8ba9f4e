"""One client must not stall everyone (issue 12, item C): a byte limit checked before the
body is read, a context-window check that stops counting early, and large prompts parsed
and tokenized off the event loop."""

from __future__ import annotations

import json
import threading

import pytest
from frontendkit import router, words, workers

from preheat.router.frontend.http import HttpLimits
from preheat.router.frontend.tokenizer import (
    SimPromptTokenizer,
    TooManyTokens,
    encode_within,
)


class Recording:
    """A sim tokenizer that records the characters it was given and the threads it ran on."""

    def __init__(self) -> None:
        self._tok = SimPromptTokenizer()
        self.name = self._tok.name
        self.chars = 0
        self.threads: list[int] = []

    def encode(self, text: str) -> list[int]:
        self.chars += len(text)
        self.threads.append(threading.get_ident())
        return self._tok.encode(text)


async def test_body_over_the_default_limit_is_413_as_openai_json() -> None:
    big = json.dumps({"prompt": words(700_000), "max_tokens": 2}).encode()
    assert len(big) > HttpLimits().max_body_bytes
    async with (
        router([], min_ready=0) as r,
        r.http.post(
            r.url + "/v1/completions", data=big, headers={"Content-Type": "application/json"}
        ) as resp,
    ):
        assert resp.status == 413
        err = (await resp.json())["error"]
        assert err["type"] == "invalid_request_error"
        assert err["code"] == "request_too_large"
        assert f"limit of {HttpLimits().max_body_bytes} bytes" in err["message"]


async def test_chunked_body_over_the_limit_is_413() -> None:
    async def body():  # no Content-Length: the limit applies as the body arrives
        for _ in range(10):
            yield b"x" * 1000

    async with (
        router([], http=HttpLimits(max_body_bytes=5000), min_ready=0) as r,
        r.http.post(r.url + "/v1/completions", data=body()) as resp,
    ):
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "request_too_large"


def test_encode_within_stops_soon_after_the_limit() -> None:
    tok = Recording()
    text = words(200_000)
    with pytest.raises(TooManyTokens) as ei:
        encode_within(tok, text, 4096, piece_chars=8192)
    assert ei.value.counted > 4096
    assert tok.chars < 2 * 8192 + 4096 * 8  # about one window's worth, not the whole text
    assert tok.chars < len(text) / 10
    # within the limit: exactly the whole text's ids, whatever the pieces
    short = words(3000)
    assert encode_within(SimPromptTokenizer(), short, 4096, piece_chars=100) == (
        SimPromptTokenizer().encode(short)
    )


async def test_prompt_over_the_window_is_refused_without_tokenizing_it_all() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        tok = Recording()
        r.server.dispatcher.tokenizer = tok  # type: ignore[assignment]
        prompt = words(300_000)  # ~2.5 MB, under the byte limit; the window is 4096
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}
        ) as resp:
            assert resp.status == 400
            err = (await resp.json())["error"]
            assert err["code"] == "context_length_exceeded"
            assert err["message"].startswith(
                "This model's maximum context length is 4096 tokens. However, your prompt "
                "resulted in at least "
            )
        assert tok.chars < len(prompt) / 10


async def test_large_prompt_is_tokenized_off_the_event_loop() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        tok = Recording()
        r.server.dispatcher.tokenizer = tok  # type: ignore[assignment]
        loop_thread = threading.get_ident()  # the router runs on the test's loop
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": words(3000), "max_tokens": 2}
        ) as resp:  # ~17k characters: over offload_chars
            assert resp.status == 200, await resp.text()
        assert tok.threads
        assert all(t != loop_thread for t in tok.threads)
        tok.threads.clear()
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": "a short one", "max_tokens": 2}
        ) as resp:
            assert resp.status == 200
        assert tok.threads == [loop_thread]  # a short prompt costs less than a thread hop
