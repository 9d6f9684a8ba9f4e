"""What a client without credentials can and cannot do: API keys on the HTTP API, a token
for lookaside picks, per-tenant prefix hashes, and session ids kept out of the logs."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
from frontendkit import MODEL, gen, router, words, workers

from preheat.core.blocks import ROOT_HASH, block_hashes, tenant_root
from preheat.proto.preheat.v1 import router_pb2
from preheat.router.embedded import EmbeddedRouter
from preheat.router.endpoints import StaticDiscovery
from preheat.router.frontend.auth import CredentialFileError, KeySet, bearer
from preheat.router.main import add_arguments, build_config

KEYS = KeySet.of(["# the router's API keys", "sk-team-a team-a", "", "sk-anon"])


def test_key_files_name_tenants_and_compare_whole_keys(tmp_path: Path) -> None:
    assert KEYS.match("sk-team-a") == "team-a"
    anon = KEYS.match("sk-anon")
    assert anon is not None
    assert anon.startswith("key-")
    assert "sk-anon" not in anon
    for wrong in ("sk-team", "sk-team-a ", "", None, "SK-TEAM-A"):
        assert KEYS.match(wrong) is None
    assert bearer("Bearer sk-x") == "sk-x"
    assert bearer("bearer  sk-x ") == "sk-x"
    assert bearer("Basic abc") is None
    assert bearer("Bearer") is None
    with pytest.raises(CredentialFileError, match="holds no key"):
        KeySet.of(["# nothing", ""], "k.txt")
    with pytest.raises(CredentialFileError, match=r"k\.txt:1"):
        KeySet.of(["a b c"], "k.txt")
    with pytest.raises(CredentialFileError, match="cannot read"):
        KeySet.from_file(tmp_path / "missing")


def test_flags_load_key_files_and_report_bad_ones(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("sk-1 team-1\n")
    tokens = tmp_path / "tokens"
    tokens.write_text("gateway-token\n")
    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--discovery", "static:x.yaml"]
    cfg = build_config(
        p.parse_args(
            [
                *base,
                f"--api-keys-file={keys}",
                f"--pick-token-file={tokens}",
                "--tenant-header=X-Tenant",
            ]
        )
    )
    assert cfg.api_keys is not None
    assert cfg.api_keys.match("sk-1") == "team-1"
    assert cfg.pick_tokens is not None
    assert cfg.pick_tokens.match("gateway-token")
    assert cfg.tenant_header == "x-tenant"
    open_cfg = build_config(p.parse_args(base))
    assert open_cfg.api_keys is None
    assert open_cfg.pick_tokens is None
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="--api-keys-file") as err:
        build_config(
            p.parse_args(
                [*base, f"--api-keys-file={empty}", f"--pick-token-file={tmp_path / 'none'}"]
            )
        )
    assert "--api-keys-file" in str(err.value)
    assert "--pick-token-file" in str(err.value)


async def test_api_keys_guard_the_openai_api_and_leave_probes_open() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], api_keys=KEYS) as r,
    ):
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "sk-anon"}):
            async with r.http.post(
                r.url + "/v1/completions", json={"prompt": "x"}, headers=headers
            ) as resp:
                assert resp.status == 401
                err = (await resp.json())["error"]
                assert err["code"] == "invalid_api_key"
                assert err["type"] == "invalid_request_error"
                assert "sk-wrong" not in err["message"]
        async with r.http.get(r.url + "/v1/models") as resp:
            assert resp.status == 401
        for path in ("/healthz", "/ready", "/metrics"):
            async with r.http.get(r.url + path) as resp:
                assert resp.status == 200, path

        bad = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="sk-wrong", max_retries=0)
        good = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="sk-team-a", max_retries=0)
        try:
            with pytest.raises(openai.AuthenticationError):
                await bad.completions.create(model=MODEL, prompt="one two", max_tokens=2)
            whole = await good.completions.create(model=MODEL, prompt="one two", max_tokens=2)
            assert len(whole.choices[0].text.split()) == 2
        finally:
            await bad.close()
            await good.close()


async def test_lookaside_picks_need_the_token_and_generate_does_not() -> None:
    tokens = KeySet.of(["gw-secret"])
    pick = router_pb2.PickRequest(request=gen(words(64)))
    good = (("authorization", "Bearer gw-secret"),)
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], pick_tokens=tokens) as r,
    ):
        for metadata in ((), (("authorization", "Bearer nope"),), (("authorization", "gw"),)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await r.router.Pick(pick, metadata=metadata, timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await r.router.PickBatch(
                    router_pb2.PickBatchRequest(picks=[pick]), metadata=metadata, timeout=10
                )
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

            async def one() -> Any:
                yield router_pb2.PickStreamRequest(id=1, pick=pick)

            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in r.router.PickStream(one(), metadata=metadata, timeout=10):
                    pass
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

        answer = await r.router.Pick(pick, metadata=good, timeout=10)
        assert answer.endpoint.worker_id == "w-1"
        batch = await r.router.PickBatch(
            router_pb2.PickBatchRequest(picks=[pick]), metadata=good, timeout=10
        )
        assert batch.results[0].picked.endpoint.worker_id == "w-1"
        chunks = await r.generate(gen(words(8), max_tokens=2))  # the data path stays open
        assert chunks[-1].worker_id == "w-1"

        # the in-process router has no network edge: no token
        embedded = EmbeddedRouter(StaticDiscovery([w.endpoint for w in ws]), r.server.config)
        async with embedded:
            await embedded.wait_ready(1, timeout_s=10)
            assert (await embedded.pick(pick, timeout_s=5)).endpoint.worker_id == "w-1"


async def test_a_denied_pick_stream_is_answered_whether_or_not_the_client_half_closes() -> None:
    # the refusal waits for what the client sends at once (so its writes do not race the
    # status), but not for a stream the client keeps open: bounded by DENY_READ_S
    tokens = KeySet.of(["gw-secret"])
    pick = router_pb2.PickRequest(request=gen(words(64)))
    held_open = asyncio.Event()

    async def one_then_wait() -> Any:
        yield router_pb2.PickStreamRequest(id=1, pick=pick)
        await held_open.wait()

    async def many() -> Any:
        for i in range(100):
            yield router_pb2.PickStreamRequest(id=i, pick=pick)

    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], pick_tokens=tokens) as r,
    ):
        for requests in (one_then_wait(), many()):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in r.router.PickStream(requests, timeout=10):
                    pass
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        held_open.set()


def test_tenants_name_the_same_prompt_with_different_blocks() -> None:
    tokens = list(range(64))
    assert tenant_root("") == ROOT_HASH  # no tenant: the hashes every worker computes
    a = block_hashes(tokens, 16, tenant_root("team-a"))
    b = block_hashes(tokens, 16, tenant_root("team-b"))
    plain = block_hashes(tokens, 16)
    assert len(a) == len(b) == len(plain) == 4
    assert not set(a) & set(b)
    assert not set(a) & set(plain)
    assert a == block_hashes(tokens, 16, tenant_root("team-a"))  # stable


async def test_one_tenant_cannot_probe_another_tenants_prompt() -> None:
    secret = words(96, "secret")
    gateway = (("authorization", "Bearer gw"),)

    def pick_as(tenant: str) -> Any:
        return (*gateway, ("x-tenant", tenant))

    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}]) as ws,
        router(
            [w.endpoint for w in ws],
            api_keys=KeySet.of(["sk-a team-a", "sk-b team-b"]),
            pick_tokens=KeySet.of(["gw"]),
            tenant_header="x-tenant",
        ) as r,
    ):
        async with r.http.post(
            r.url + "/v1/completions",
            json={"prompt": secret, "max_tokens": 2},
            headers={"Authorization": "Bearer sk-a"},
        ) as resp:
            assert resp.status == 200
        req = router_pb2.PickRequest(request=gen(secret))
        own = await r.router.Pick(req, metadata=pick_as("team-a"), timeout=10)
        assert own.cached_blocks >= 5  # the tenant's own prompt is cached for it
        other = await r.router.Pick(req, metadata=pick_as("team-b"), timeout=10)
        assert other.cached_blocks == 0  # another tenant learns nothing
        # an API key's tenant wins over the header: team-b cannot claim to be team-a
        async with r.http.post(
            r.url + "/v1/completions",
            json={"prompt": secret + " more", "max_tokens": 2},
            headers={"Authorization": "Bearer sk-b", "x-tenant": "team-a"},
        ) as resp:
            assert resp.status == 200
        more = router_pb2.PickRequest(request=gen(secret + " more"))
        assert (await r.router.Pick(more, metadata=pick_as("team-b"), timeout=10)).cached_blocks
