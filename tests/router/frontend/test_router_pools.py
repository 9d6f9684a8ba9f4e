"""One router in front of several pools: a request finds its pool by ``model``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml
from frontendkit import eventually, gen, workers

from preheat.autoscaler.scrape import parse_router
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, router_pb2, router_pb2_grpc
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint
from preheat.router.pools import LiteralPools, PoolSource, PoolSpec, StaticPools

CHAT, CODE = "chat-model", "code-model"


@dataclass
class Multi:
    server: RouterServer
    inference: Any
    router: Any
    http: aiohttp.ClientSession
    url: str

    async def chat(self, model: str, **body: Any) -> aiohttp.ClientResponse:
        payload = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        payload.update(body)
        return await self.http.post(self.url + "/v1/chat/completions", json=payload)


@contextlib.asynccontextmanager
async def multi(source: PoolSource, **config: Any) -> AsyncIterator[Multi]:
    config.setdefault("refresh_interval_s", 0.1)
    server = RouterServer(None, RouterConfig(**config), pool_source=source)
    ports = await server.start()
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel,
            aiohttp.ClientSession() as http,
        ):
            yield Multi(
                server,
                inference_pb2_grpc.InferenceStub(channel),
                router_pb2_grpc.RouterStub(channel),
                http,
                f"http://127.0.0.1:{ports.http}",
            )
    finally:
        await asyncio.wait_for(server.stop(), 20)


def two_pools(
    chat: Sequence[DiscoveredEndpoint], code: Sequence[DiscoveredEndpoint]
) -> list[PoolSpec]:
    return [
        PoolSpec(name="chat", model=CHAT, aliases=("chat",), endpoints=tuple(chat)),
        PoolSpec(name="code", model=CODE, endpoints=tuple(code)),
    ]


WORKERS = [
    {"id": "chat-1", "engine": {"model": CHAT}},
    {"id": "code-1", "engine": {"model": CODE}},
]


async def test_requests_go_to_the_pool_of_their_model_over_http_and_grpc() -> None:
    async with workers(WORKERS) as ws:
        source = LiteralPools(two_pools([ws[0].endpoint], [ws[1].endpoint]))
        async with multi(source) as m:
            await m.server.wait_ready(1, timeout_s=10)
            for model, worker in ((CHAT, "chat-1"), ("chat", "chat-1"), (CODE, "code-1")):
                resp = await m.chat(model)
                assert resp.status == 200, await resp.text()
                assert resp.headers["X-Preheat-Worker"] == worker
                body = await resp.json()
                assert body["preheat"]["worker_id"] == worker
                chunks = [c async for c in m.inference.Generate(gen(model=model), timeout=20)]
                assert chunks[-1].worker_id == worker
                pick = await m.router.Pick(router_pb2.PickRequest(request=gen(model=model)))
                assert pick.endpoint.worker_id == worker
            # streamed, through the alias
            resp = await m.chat("chat", stream=True)
            text = await resp.text()
            assert resp.status == 200
            assert text.rstrip().endswith("data: [DONE]")
            assert resp.headers["X-Preheat-Worker"] == "chat-1"


async def test_models_lists_every_pool_and_an_unknown_model_is_not_found() -> None:
    async with workers(WORKERS) as ws:
        source = LiteralPools(two_pools([ws[0].endpoint], [ws[1].endpoint]))
        async with multi(source) as m:
            await m.server.wait_ready(1, timeout_s=10)
            resp = await m.http.get(m.url + "/v1/models")
            body = await resp.json()
            assert body["object"] == "list"
            assert [d["id"] for d in body["data"]] == [CHAT, "chat", CODE]
            for d in body["data"]:
                assert d["object"] == "model"
                assert isinstance(d["created"], int)
                assert d["owned_by"]
            assert [d["root"] for d in body["data"]] == [CHAT, CHAT, CODE]
            one = await (await m.http.get(m.url + f"/v1/models/{CODE}")).json()
            assert one["id"] == CODE
            assert one["object"] == "model"
            alias = await (await m.http.get(m.url + "/v1/models/chat")).json()
            assert (alias["id"], alias["root"]) == ("chat", CHAT)

            resp = await m.chat("no-such-model")
            assert resp.status == 404
            err = (await resp.json())["error"]
            assert err["code"] == "model_not_found"
            assert err["param"] == "model"
            assert set(err) == {"message", "type", "param", "code"}
            assert "no-such-model" in err["message"]
            assert CODE in err["message"]
            resp = await m.http.get(m.url + "/v1/models/no-such-model")
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"

            with pytest.raises(grpc.aio.AioRpcError) as e:
                [c async for c in m.inference.Generate(gen(model="no-such-model"), timeout=10)]
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await m.router.Pick(router_pb2.PickRequest(request=gen(model="nope")))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            # several pools: a request must say which model
            resp = await m.chat("")
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "model"


async def test_a_pool_without_workers_answers_503_with_retry_after() -> None:
    async with workers(WORKERS[:1]) as ws:
        source = LiteralPools(two_pools([ws[0].endpoint], []))
        async with multi(source, queue_timeout_s=0.3) as m:
            await m.server.wait_ready(0, timeout_s=10)
            resp = await m.chat(CODE)
            assert resp.status == 503
            assert int(resp.headers["Retry-After"]) >= 1
            resp = await m.chat(CHAT)
            assert resp.status == 200


async def test_a_held_request_is_served_when_its_pool_gets_a_worker() -> None:
    async with workers(WORKERS) as ws:
        source = LiteralPools(two_pools([ws[0].endpoint], []))
        async with multi(source, queue_timeout_s=10.0) as m:
            await m.server.wait_ready(0, timeout_s=10)
            held = asyncio.ensure_future(m.chat(CODE))
            await eventually(lambda: m.server.pools.resolve(CODE).dispatcher.busy > 0)
            # the held request is the code pool's (it wakes that pool, not the other)
            page = await (await m.http.get(m.url + "/metrics")).text()
            assert parse_router(0.0, page, pool="code").held == 1
            assert parse_router(0.0, page, pool="chat").held == 0
            source.set_pools(two_pools([ws[0].endpoint], [ws[1].endpoint]))
            resp = await asyncio.wait_for(held, 10)
            assert resp.status == 200
            assert resp.headers["X-Preheat-Worker"] == "code-1"


async def test_pools_added_changed_and_deleted_without_a_restart(tmp_path: Path) -> None:
    def write(pools: list[dict[str, Any]]) -> None:
        tmp = tmp_path / "pools.yaml.tmp"
        tmp.write_text(yaml.safe_dump({"pools": pools}))
        tmp.replace(tmp_path / "pools.yaml")

    async with workers(WORKERS) as ws:
        chat = {
            "pool": "chat",
            "model": CHAT,
            "endpoints": [{"address": ws[0].endpoint.address, "id": "chat-1"}],
        }
        code = {
            "pool": "code",
            "model": CODE,
            "endpoints": [{"address": ws[1].endpoint.address, "id": "code-1"}],
        }
        write([chat])
        source = StaticPools(tmp_path / "pools.yaml", PoolSpec(name=""), poll_interval_s=0.05)
        async with multi(source) as m:
            await m.server.wait_ready(1, timeout_s=10)
            assert (await m.chat(CODE)).status == 404
            write([chat, code])  # added
            await eventually(lambda: CODE in m.server.models(), 5)
            await m.server.pools.resolve(CODE).embedded.wait_ready(1, 10)
            resp = await m.chat(CODE)
            assert resp.status == 200
            assert resp.headers["X-Preheat-Worker"] == "code-1"

            # changed: an alias and routing settings, the scheduler kept
            pool = m.server.pools.resolve(CODE)
            write([chat, {**code, "aliases": ["coder"], "routing": {"hotspotMarginMs": 7}}])
            await eventually(lambda: "coder" in m.server.models(), 5)
            assert m.server.pools.resolve("coder") is pool
            assert pool.dispatcher.scheduler_config.hotspot_margin_ms == 7
            assert (await m.chat("coder")).status == 200

            # deleted while a request streams: the stream finishes, new requests get 404
            stream = m.inference.Generate(gen(model=CODE, max_tokens=1000), timeout=30)
            first = await anext(aiter(stream))
            write([chat])
            await eventually(lambda: CODE not in m.server.models(), 5)
            assert pool.dispatcher.busy == 1  # deleted while its request streams
            assert (await m.chat(CODE)).status == 404
            rest = [c async for c in stream]
            assert rest[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH  # not cut
            assert sum(len(c.token_ids) for c in [first, *rest]) == 1000
            await eventually(lambda: pool.embedded.store_task is None, 5)  # then its store stops
            assert (await m.chat(CHAT)).status == 200


async def test_metrics_carry_the_pool_and_model_labels() -> None:
    async with workers(WORKERS) as ws:
        source = LiteralPools(two_pools([ws[0].endpoint], [ws[1].endpoint]))
        async with multi(source) as m:
            await m.server.wait_ready(1, timeout_s=10)
            assert (await m.chat("chat")).status == 200
            assert (await m.chat(CODE)).status == 200
            reg = m.server.metrics.registry
            for pool, model in (("chat", CHAT), ("code", CODE)):
                labels = {"pool": pool, "model_name": model}
                assert reg.get_sample_value("preheat_router_arrivals_total", labels) == 1
                ttft = [
                    x.value
                    for f in reg.collect()
                    if f.name == "preheat_router_ttft_seconds"
                    for x in f.samples
                    if x.name.endswith("_count") and x.labels.items() >= labels.items()
                ]
                assert sum(ttft) == 1
                assert reg.get_sample_value("preheat_router_in_flight", labels) == 0
            source.set_pools(two_pools([ws[0].endpoint], [])[:1])  # code deleted: its series go
            await eventually(
                lambda: (
                    reg.get_sample_value(
                        "preheat_router_arrivals_total", {"pool": "code", "model_name": CODE}
                    )
                    is None
                ),
                5,
            )
            assert (
                reg.get_sample_value(
                    "preheat_router_arrivals_total", {"pool": "chat", "model_name": CHAT}
                )
                == 1
            )


async def test_the_passthrough_path_routes_by_model_and_renames_an_alias() -> None:
    from fakeopenai import fake_openai, serve_openai

    async with fake_openai() as fake, workers(WORKERS) as ws:
        serve_openai(ws[0], fake.port)  # the chat pool's worker serves OpenAI HTTP
        source = LiteralPools(two_pools([ws[0].endpoint], [ws[1].endpoint]))
        async with multi(source) as m:
            await m.server.wait_ready(1, timeout_s=10)
            await eventually(lambda: bool(m.server.pools.resolve(CHAT).passthrough.active()))
            resp = await m.chat("chat")
            assert resp.status == 200, await resp.text()
            assert json.loads(fake.bodies[-1])["model"] == CHAT  # the alias, renamed
            resp = await m.chat(CHAT, stream=True)
            assert resp.status == 200
            assert (await resp.text()).rstrip().endswith("data: [DONE]")
            assert json.loads(fake.bodies[-1])["model"] == CHAT
            resp = await m.chat(CODE)  # the other pool: its sim worker, the gRPC path
            assert resp.status == 200
            assert resp.headers["X-Preheat-Worker"] == "code-1"
            resp = await m.chat("gpt-4")
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"
            assert len(fake.bodies) == 2  # neither reached the OpenAI worker


async def test_a_pool_with_bad_routing_settings_is_skipped_or_keeps_its_last_good() -> None:
    async with workers(WORKERS) as ws:
        chat, code = two_pools([ws[0].endpoint], [ws[1].endpoint])
        bad = dataclasses.replace(code, routing={"policy": "nope"})
        source = LiteralPools([chat, bad])
        async with multi(source) as m:
            await m.server.wait_ready(1, timeout_s=10)
            assert m.server.models() == [CHAT, "chat"]  # the bad new pool is not served
            assert "unknown policy" in m.server.pools.last_error
            source.set_pools([chat, code])
            await eventually(lambda: CODE in m.server.models())
            assert m.server.pools.last_error == ""
            good = dataclasses.replace(code, routing={"hotspotMarginMs": 9})
            source.set_pools([chat, good])
            pool = m.server.pools.resolve(CODE)
            await eventually(lambda: pool.dispatcher.scheduler_config.hotspot_margin_ms == 9)
            source.set_pools([chat, dataclasses.replace(good, routing={"policy": "nope"})])
            await eventually(lambda: "unknown policy" in m.server.pools.last_error)
            assert m.server.pools.resolve(CODE) is pool  # kept, with its last good settings
            assert pool.dispatcher.scheduler_config.hotspot_margin_ms == 9
            await pool.embedded.wait_ready(1, 10)
            assert (await m.chat(CODE)).status == 200


class _SilentPools:
    """A pool source that has not answered yet (the API server not reached)."""

    async def changes(self) -> AsyncIterator[tuple[PoolSpec, ...]]:
        await asyncio.Event().wait()
        yield ()


async def test_the_router_is_ready_once_it_knows_the_pools_not_once_a_worker_is() -> None:
    """A router takes requests (it holds or refuses them itself) as soon as it knows the
    pools, with no worker anywhere and even with no pool: otherwise `helm install --wait`
    never succeeds before a pool exists, rollouts with maxUnavailable 0 stall while a pool
    has no active worker, and at zero workers the router Service has no endpoint left to
    take the request that would wake a pool scaled to zero. Until the pool list is known
    it is not ready."""
    for specs in ([], two_pools([], [])):
        async with multi(LiteralPools(specs), queue_timeout_s=0.3) as m:
            await eventually(lambda: m.server.ready())
            resp = await m.http.get(m.url + "/ready")
            assert resp.status == 200, await resp.text()
            if specs:
                held = await m.chat(CHAT)
                assert held.status == 503  # held for its patience, then Retry-After
                assert "Retry-After" in held.headers
    async with multi(_SilentPools()) as m:
        resp = await m.http.get(m.url + "/ready")
        assert resp.status == 503
        assert (await m.http.get(m.url + "/healthz")).status == 200
