"""The API edge: every number bounded with a 400 that names the field and its range, every
HTTP error OpenAI-shaped JSON (aiohttp's own included), and no exception text in a body."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import pytest
from frontendkit import gen, router, words, workers

from preheat.proto.preheat.v1 import inference_pb2, router_pb2

U32 = 2**32
U64 = 2**64


async def _raw(url: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends ``data`` as it is on a new connection; the status, headers and body."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(10):
            raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return status, headers, body


def _openai_error(body: bytes) -> dict[str, Any]:
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return dict(err)


@pytest.mark.parametrize(
    ("path", "body", "param", "allowed"),
    [
        ("/v1/completions", {"prompt": "x", "max_tokens": U32}, "max_tokens", "4294967295"),
        ("/v1/completions", {"prompt": "x", "seed": U64}, "seed", "18446744073709551615"),
        ("/v1/completions", {"prompt": "x", "seed": -1}, "seed", "[0, "),
        ("/v1/completions", {"prompt": "x", "ttft_deadline_ms": U32}, "ttft_deadline_ms", "[0, "),
        ("/v1/completions", {"prompt": "x", "temperature": 3}, "temperature", "[0, 2]"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p", "(0, 1]"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n", "1"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": U32 * 4},
            "max_completion_tokens",
            "4294967295",
        ),
    ],
)
async def test_out_of_range_numbers_are_400_naming_field_and_range(
    path: str, body: dict[str, Any], param: str, allowed: str
) -> None:
    async with router([]) as r, r.http.post(r.url + path, json=body) as resp:
        assert resp.status == 400
        err = _openai_error(await resp.read())
    assert err["param"] == param
    assert err["type"] == "invalid_request_error"
    assert param in err["message"]
    assert "allowed" in err["message"]
    assert allowed in err["message"]
    assert "ValueError" not in err["message"]


@pytest.mark.parametrize("value", ["-5", "99999999999", "soon"])
async def test_bad_deadline_header_is_400_naming_the_header(value: str) -> None:
    async with (
        router([]) as r,
        r.http.post(
            r.url + "/v1/completions",
            json={"prompt": "x"},
            headers={"x-ttft-deadline-ms": value},
        ) as resp,
    ):
        assert resp.status == 400
        err = _openai_error(await resp.read())
    assert "x-ttft-deadline-ms" in err["message"]
    assert "[0, 4294967295]" in err["message"]


async def test_grpc_fields_out_of_range_are_invalid_argument() -> None:
    req = gen(priority=99)  # type: ignore[arg-type]  # an open enum: any int arrives
    req.coalesce.max_tokens = 5000
    req.coalesce.max_delay_ms = float("nan")
    async with router([]) as r:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await r.generate(req, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details() or ""
        assert "priority must be one of" in details
        assert "coalesce.max_tokens" in details
        assert "coalesce.max_delay_ms" in details
        with pytest.raises(grpc.aio.AioRpcError) as perr:
            await r.router.Pick(router_pb2.PickRequest(request=req), timeout=10)
        assert perr.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_internal_error_never_reaches_the_client_as_text() -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("secret-internal-detail")

    async with router([]) as r:
        r.server.dispatcher.prepare = boom  # type: ignore[method-assign]
        r.server.dispatcher.prepare_async = boom  # type: ignore[method-assign]
        async with r.http.post(r.url + "/v1/completions", json={"prompt": "x"}) as resp:
            assert resp.status == 500
            raw = await resp.read()
        err = _openai_error(raw)
        assert err["type"] == "server_error"
        assert "reference" in err["message"]
        assert b"secret-internal-detail" not in raw
        assert b"RuntimeError" not in raw
        req = inference_pb2.GenerateRequest(prompt="x")
        for call in (
            lambda: r.generate(req, timeout=10),
            lambda: r.router.Pick(router_pb2.PickRequest(request=req), timeout=10),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as gerr:
                await call()
            assert gerr.value.code() == grpc.StatusCode.INTERNAL
            details = gerr.value.details() or ""
            assert "secret-internal-detail" not in details
            assert "RuntimeError" not in details
            assert "reference" in details


async def test_errors_aiohttp_raises_itself_are_openai_json() -> None:
    async with router([]) as r:
        big = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
        many = (
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: a\r\n" % i for i in range(200))
            + b"\r\n"
        )
        for data, status in ((big, 431), (many, 431), (b"NOT HTTP AT ALL\r\n\r\n", 400)):
            got, headers, body = await _raw(r.url, data)
            assert got == status, body
            assert headers["content-type"].startswith("application/json")
            err = _openai_error(body)
            assert err["type"] == "invalid_request_error"
            assert len(err["message"]) < 300

        async with r.http.get(r.url + "/v1/completions") as resp:
            assert resp.status == 405
            assert resp.headers["Allow"] == "POST"
            err = _openai_error(await resp.read())
            assert err["type"] == "invalid_request_error"
            assert err["code"] == "method_not_allowed"
        async with r.http.get(r.url + "/v1/nothing") as resp:
            assert resp.status == 404
            err = _openai_error(await resp.read())
            assert err["type"] == "not_found_error"


async def test_a_workers_internal_error_text_is_not_relayed_to_the_client() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:

        def boom(*_: Any, **__: Any) -> Any:
            raise RuntimeError("secret-worker-detail")

        ws[0].server.engine.generate = boom  # type: ignore[method-assign]
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": words(4), "max_tokens": 2}
        ) as resp:
            raw = await resp.read()
        assert resp.status == 500
        assert _openai_error(raw)["code"] == "internal"
        assert b"secret-worker-detail" not in raw
        assert b"RuntimeError" not in raw
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await r.generate(gen(words(4), max_tokens=2), timeout=10)
        assert "secret-worker-detail" not in (err.value.details() or "")
