"""The router counts each endpoint's requests past their first token (``Endpoint.decoding``,
the ``decode-interference`` scorer's neighbours) until their stream ends, however it ends."""

from __future__ import annotations

import asyncio

from frontendkit import MODEL, Router, eventually, gen, router, words, workers


def decoding(r: Router, wid: str) -> int:
    return next(e.decoding for e in r.server.store.snapshot() if e.id == wid)


async def test_decoding_counts_open_streams_until_they_end() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        assert decoding(r, "w-1") == 0
        # finished normally, streamed and not (the router buffers a non-streaming answer)
        await r.generate(gen(words(16, "a"), max_tokens=4))
        assert decoding(r, "w-1") == 0
        body = {"model": MODEL, "prompt": words(16, "c"), "max_tokens": 4}
        async with r.http.post(f"{r.url}/v1/completions", json=body) as resp:
            assert resp.status == 200
        assert decoding(r, "w-1") == 0
        # two long streams: counted from their first token while they run
        calls = [r.inference.Generate(gen(words(16, f"b{i}"), 4000), timeout=20) for i in range(2)]
        for call in calls:
            await asyncio.wait_for(call.read(), 10)
        assert decoding(r, "w-1") == 2
        # one cancelled by the client, one left to run: one fewer at once, then none
        calls[0].cancel()
        await eventually(lambda: decoding(r, "w-1") == 1)
        calls[1].cancel()
        await eventually(lambda: decoding(r, "w-1") == 0)
