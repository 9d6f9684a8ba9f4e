"""OpenAI passthrough (router/frontend/passthrough.py): with workers whose Status names an
OpenAI port, the router forwards the client's request to that API and its answer back, bytes
unchanged; it answers itself only what it can see (unknown model, context window, admission,
no endpoint), in OpenAI's shapes."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import openai
import pytest
from fakeopenai import USAGE, WHOLE, fake_openai, serve_openai, stream_events
from frontendkit import MODEL, eventually, router, words, workers

from preheat.core.routing.admission import AdmissionConfig
from preheat.router.frontend.http import HttpLimits
from preheat.wire.coalesce import CoalesceConfig

CHAT = "/v1/chat/completions"


def _sample(r: Any, name: str, **labels: str) -> float:
    v = r.server.metrics.registry.get_sample_value(name, labels)
    return float(v or 0.0)


async def test_body_and_stream_bytes_pass_through_unchanged() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            held: list[tuple[int, int]] = []  # (priority, tokens) given to the endpoint
            store = r.server.store
            started = store.request_started

            def record(endpoint_id: str, priority: int = 1, tokens: int = 0) -> None:
                held.append((priority, tokens))
                started(endpoint_id, priority, tokens)

            store.request_started = record  # type: ignore[method-assign]
            # parameters the gRPC path refuses (tools, response_format, logprobs, top_k) are
            # the engine's to judge here: the router passes them on
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                "response_format": {"type": "json_object"},
                "logprobs": True,
                "top_k": 5,
            }
            raw = json.dumps(body).encode()
            async with r.http.post(
                r.url + CHAT, data=raw, headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                assert resp.headers["X-Preheat-Worker"] == "w-1"
                got = await resp.read()
            assert fake.bodies == [raw]
            assert fake.paths == [CHAT]
            assert fake.headers[0]["X-Request-Id"] == resp.headers["X-Request-Id"]
            assert got == b"".join(stream_events(True))
            # bookkeeping ran: a first token, the usage's cached tokens, nothing left in flight
            await eventually(lambda: r.server.in_flight() == 0)
            ttft = "preheat_router_ttft_seconds_count"
            assert _sample(r, ttft, pool="", model_name=MODEL, reason=_reason(r)) == 1
            ep = r.server.store.snapshot()[0]
            assert ep.in_flight == 0
            assert ep.decoding == 0
            # the prompt's tokens were held in the endpoint's queue until the first token
            assert len(held) == 1
            assert held[0][1] > 0
            assert ep.in_flight_tokens == 0


def _reason(r: Any) -> str:
    fams = r.server.metrics.registry.collect()
    for fam in fams:
        if fam.name == "preheat_router_ttft_seconds":
            for s in fam.samples:
                if s.name.endswith("_count") and s.value:
                    return str(s.labels["reason"])
    return ""


async def test_whole_body_and_openai_client() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
            try:
                out = await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "hi"}],
                    tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                )
            finally:
                await client.close()
            assert out.choices[0].message.content == WHOLE["choices"][0]["message"]["content"]
            assert out.usage is not None
            assert out.usage.completion_tokens == USAGE["completion_tokens"]
            sent = json.loads(fake.bodies[0])
            assert sent["tools"][0]["function"]["name"] == "f"
            assert "stream" not in sent or sent["stream"] is False


async def test_completions_pass_through() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            raw = json.dumps({"model": MODEL, "prompt": "hello", "echo": True}).encode()
            async with r.http.post(r.url + "/v1/completions", data=raw) as resp:
                assert resp.status == 200
                assert await resp.json() == WHOLE
            assert fake.paths == ["/v1/completions"]
            assert fake.bodies == [raw]


async def test_worker_error_status_and_body_pass_through_unchanged() -> None:
    async with fake_openai(["error400"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            for stream in (False, True):
                body = {"messages": [{"role": "user", "content": "x"}], "stream": stream}
                async with r.http.post(r.url + CHAT, json=body) as resp:
                    assert resp.status == 400
                    got = await resp.json()
                assert got["error"] == {
                    "message": "fake vLLM refusal",
                    "type": "BadRequestError",
                    "param": "tools",
                    "code": 400,
                }
            assert len(fake.bodies) == 2  # a refusal is not retried elsewhere
            ep = r.server.store.snapshot()[0]
            assert (ep.in_flight, ep.decoding) == (0, 0)


async def test_worker_500_is_its_answer_not_retried() -> None:
    async with fake_openai(["error500"]) as fake, workers([{"id": "w-1"}, {"id": "w-2"}]) as ws:
        for w in ws:
            serve_openai(w, fake.port)
        async with router([w.endpoint for w in ws]) as r:
            body = {"messages": [{"role": "user", "content": "x"}]}
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 500
                assert await resp.json() == {"error": {"message": "boom", "code": 500}}
            assert len(fake.bodies) == 1
            assert all(e.in_flight == 0 for e in r.server.store.snapshot())


@pytest.mark.parametrize("first", ["unavailable", "drop"])
async def test_failure_before_first_byte_is_retried_on_another_endpoint(first: str) -> None:
    async with fake_openai([first, "ok"]) as fake, workers([{"id": "w-1"}, {"id": "w-2"}]) as ws:
        for w in ws:
            serve_openai(w, fake.port)
        async with router([w.endpoint for w in ws]) as r:
            body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 200
                got = await resp.read()
            assert got == b"".join(stream_events(False))
            assert len(fake.bodies) == 2
            assert _sample(r, "preheat_router_retries_total", pool="", model_name=MODEL) == 1


async def test_no_endpoint_that_can_take_it_is_503_with_retry_after() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    async with workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], closed)
        async with router([w.endpoint for w in ws], max_retries=0) as r:
            body = {"messages": [{"role": "user", "content": "x"}]}
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 503
                assert int(resp.headers["Retry-After"]) >= 1
                err = (await resp.json())["error"]
            assert err["type"] == "service_unavailable"
            assert "w-1" in err["message"]


async def test_mid_stream_failure_ends_with_an_error_event() -> None:
    async with fake_openai(["break"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 200
                got = await resp.read()
            sent = b"".join(fake.sent)
            assert got.startswith(sent)
            rest = got[len(sent) :].split(b"\n\n")
            assert rest[0].startswith(b"data: ")
            err = json.loads(rest[0][len(b"data: ") :])["error"]
            assert err["code"] == "unavailable"
            assert "not retried" in err["message"]
            assert rest[1:] == [b"data: [DONE]", b""]
            assert len(fake.bodies) == 1


async def test_client_disconnect_cancels_the_upstream_request() -> None:
    async with fake_openai(["hang"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
            resp = await r.http.post(r.url + CHAT, json=body)
            assert resp.status == 200
            async with asyncio.timeout(5):
                first = await resp.content.readuntil(b"\n\n")
            assert first.startswith(b"data: ")
            resp.close()  # the client goes away mid-stream
            async with asyncio.timeout(5):
                await fake.cancelled.wait()
            await eventually(lambda: r.server.in_flight() == 0)
            ep = r.server.store.snapshot()[0]
            await eventually(lambda: r.server.store.snapshot()[0].decoding == 0)
            assert ep.in_flight == 0


async def test_router_answers_what_it_can_see_in_openai_shapes() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws]) as r:
            client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
            try:
                with pytest.raises(openai.NotFoundError) as nf:
                    await client.chat.completions.create(
                        model="gpt-9", messages=[{"role": "user", "content": "x"}]
                    )
                assert nf.value.code == "model_not_found"
                with pytest.raises(openai.BadRequestError) as big:
                    await client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": words(5000)}]
                    )
                assert big.value.code == "context_length_exceeded"
                assert "maximum context length is 4096 tokens" in big.value.message
                with pytest.raises(openai.BadRequestError) as bad:
                    await client.completions.create(model=MODEL, prompt=[])
                assert bad.value.param == "prompt"
            finally:
                await client.close()
            async with r.http.post(r.url + CHAT, data=b"[1, 2]") as resp:
                assert resp.status == 400
                assert (await resp.json())["error"]["type"] == "invalid_request_error"
            assert fake.bodies == []  # none of them reached the worker


async def test_admission_refusal_is_429_rate_limit_exceeded() -> None:
    async with fake_openai(["hang"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router(
            [w.endpoint for w in ws], admission=AdmissionConfig(max_in_flight=1)
        ) as r:
            body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
            held = await r.http.post(r.url + CHAT, json=body)
            try:
                await eventually(lambda: r.server.in_flight() == 1)
                async with r.http.post(r.url + CHAT, json=body) as resp:
                    assert resp.status == 429
                    assert int(resp.headers["Retry-After"]) >= 1
                    err = (await resp.json())["error"]
                assert err["code"] == "rate_limit_exceeded"
                assert err["type"] == "rate_limit_error"
            finally:
                held.close()
            assert len(fake.bodies) == 1


async def test_tenant_salts_the_upstream_cache_and_the_client_cannot(tmp_path: Any) -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], tenant_header="x-tenant") as r:
            body = {"messages": [{"role": "user", "content": "x"}], "cache_salt": "mine"}
            async with r.http.post(r.url + CHAT, json=body, headers={"x-tenant": "t1"}) as resp:
                assert resp.status == 200
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 200
            assert json.loads(fake.bodies[0])["cache_salt"] == "t1"
            assert "cache_salt" not in json.loads(fake.bodies[1])


async def test_sim_pool_keeps_the_grpc_path_and_its_refusals() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        body = {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
        async with r.http.post(r.url + CHAT, json=body) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["code"] == "unsupported_parameter"


async def test_request_timeout_ends_the_stream_with_an_error_event() -> None:
    async with fake_openai(["hang"]) as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        limits = HttpLimits(request_timeout_s=0.5)
        async with router([w.endpoint for w in ws], http=limits) as r:
            body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
            async with asyncio.timeout(10), r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 200
                got = (await resp.read()).split(b"\n\n")
            assert got[0] == stream_events(False)[0].rstrip(b"\n")
            assert b"timed out" in got[1]
            assert got[2:] == [b"data: [DONE]", b""]
            async with asyncio.timeout(5):
                await fake.cancelled.wait()


async def test_coalesced_stream_keeps_every_byte() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        coalesce = CoalesceConfig(max_tokens=8, max_delay_s=0.05)
        async with router([w.endpoint for w in ws], coalesce=coalesce) as r:
            body = {
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 200
                got = await resp.read()
            assert got == b"".join(stream_events(True))


async def test_a_request_before_any_worker_answered_waits_for_the_pools_word() -> None:
    """A router started beside its workers: a request that comes before any discovered
    worker answered Status waits (like one in the queue) for one, then takes the path that
    worker's pool speaks; and once the pool is at zero it keeps that path."""
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        status = ws[0].server.status
        late = asyncio.Event()

        def held() -> Any:  # the worker does not answer Status until `late`
            if not late.is_set():
                raise RuntimeError("starting")
            return status()

        ws[0].server.status = held  # type: ignore[method-assign]
        async with router([w.endpoint for w in ws], min_ready=0, queue_timeout_s=10) as r:
            tools = [{"type": "function", "function": {"name": "f"}}]
            body = {"messages": [{"role": "user", "content": "x"}], "tools": tools}
            sent = asyncio.ensure_future(r.http.post(r.url + CHAT, json=body))
            await asyncio.sleep(0.3)
            assert not sent.done()
            late.set()
            async with asyncio.timeout(10):
                resp = await sent
            async with resp:
                assert resp.status == 200  # passed through (the gRPC path refuses tools)
            assert len(fake.bodies) == 1
            # scaled to zero: no worker left, the pool keeps its kind (not the gRPC refusal)
            r.server.store.source.set_endpoints([])
            await eventually(lambda: not r.server.store.all_endpoints())
            assert r.server.store.serves_openai() is True


async def test_no_worker_answering_is_503_after_the_queue_timeout() -> None:
    async with workers([{"id": "w-1"}]) as ws:

        def silent() -> Any:
            raise RuntimeError("starting")

        ws[0].server.status = silent  # type: ignore[method-assign]
        async with router([w.endpoint for w in ws], min_ready=0, queue_timeout_s=0.3) as r:
            body = {"messages": [{"role": "user", "content": "x"}]}
            async with r.http.post(r.url + CHAT, json=body) as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"] == "1"
                assert "answered Status" in (await resp.json())["error"]["message"]
