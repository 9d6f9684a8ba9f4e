"""Through the passthrough, an OpenAI parameter vLLM has no field for (it would answer 200
without applying it) is refused with 400 ``unsupported_parameter`` naming it when its value
would change something, and passed through when it would not; vLLM never sees the refused
request."""

from __future__ import annotations

from typing import Any

import pytest
from fakeopenai import fake_openai, serve_openai
from frontendkit import router, workers

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "x"}]

CASES: list[tuple[str, dict[str, Any], bool]] = [
    (CHAT, {"messages": MESSAGES, "store": True}, False),
    (CHAT, {"messages": MESSAGES, "store": False}, True),
    (CHAT, {"messages": MESSAGES, "functions": [{"name": "f", "parameters": {}}]}, False),
    (CHAT, {"messages": MESSAGES, "audio": {"voice": "alloy", "format": "wav"}}, False),
    (CHAT, {"messages": MESSAGES, "modalities": ["text"]}, True),
    (CHAT, {"messages": MESSAGES, "prompt_cache_key": "c-1", "metadata": {"k": "v"}}, True),
    (CHAT, {"messages": MESSAGES, "tools": [], "logprobs": True, "n": 2}, True),  # vLLM's
    ("/v1/completions", {"prompt": "x", "best_of": 2}, False),
    ("/v1/completions", {"prompt": "x", "best_of": 1, "echo": True}, True),
]


@pytest.mark.parametrize(("path", "body", "passed"), CASES)
async def test_what_vllm_would_ignore_is_refused_by_name(
    path: str, body: dict[str, Any], passed: bool
) -> None:
    async with fake_openai(["ok"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with (
            router([w.endpoint for w in ws]) as r,
            r.http.post(r.url + path, json=body) as resp,
        ):
            status, answer = resp.status, await resp.json()
        if passed:
            assert status == 200, answer
            assert len(fake.bodies) == 1
            return
        assert status == 400
        err = answer["error"]
        assert err["code"] == "unsupported_parameter"
        name = next(k for k in body if k not in ("messages", "prompt"))
        assert f"'{name}'" in err["message"]
        assert "vLLM ignores it" in err["message"]
        assert err["param"] == name
        assert fake.bodies == []
