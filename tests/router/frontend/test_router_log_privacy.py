"""What the router's logs may not carry: the OpenAI ``user`` (an e-mail address in practice)
and any session id appear only as a short hash."""

from __future__ import annotations

import logging

import pytest
from frontendkit import router, words, workers


async def test_the_openai_user_is_logged_as_a_hash(caplog: pytest.LogCaptureFixture) -> None:
    email = "alice@example.com"
    caplog.set_level(logging.DEBUG, logger="preheat")
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws]) as r,
        r.http.post(
            r.url + "/v1/completions",
            json={"prompt": words(8), "max_tokens": 2, "user": email},
        ) as resp,
    ):
        assert resp.status == 200
        await resp.read()
    done = [
        rec
        for rec in caplog.records
        if rec.name == "preheat.router" and rec.getMessage() == "request_done"
    ]
    assert done
    for rec in caplog.records:
        text = rec.getMessage() + repr(getattr(rec, "preheat_fields", {}))
        assert email not in text, rec.getMessage()
    tags = {getattr(rec, "preheat_fields", {}).get("session") for rec in done}
    assert len(tags) == 1
    assert None not in tags
