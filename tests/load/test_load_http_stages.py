"""The stage breakdown an OpenAI-HTTP outcome takes from the router's ``"preheat"`` object;
anything else a server may send there leaves it empty instead of failing the request."""

from __future__ import annotations

import pytest

from preheat.load.clients import _http_stages

TIMING = {"queue_ms": 2.0, "prefill_ms": 8.0, "decode_ms": 30.0, "ttft_ms": 10.0, "e2e_ms": 40}


def test_the_routers_timing_becomes_the_same_stages_as_grpc() -> None:
    got = _http_stages(13.5, {"worker_id": "w0", "timing": TIMING})
    assert got == {
        "queue": 2.0,
        "prefill": 8.0,
        "decode": 30.0,
        "server_ttft": 10.0,
        "outside_engine": 3.5,
    }


@pytest.mark.parametrize(
    "extra",
    [
        None,
        "x",
        {},
        {"timing": "x"},
        {"timing": {**TIMING, "ttft_ms": "soon"}},
        {"timing": {**TIMING, "queue_ms": None}},
        {"timing": {"ttft_ms": 10.0}},
        {"timing": {**TIMING, "ttft_ms": 0}},
    ],
)
def test_anything_else_gives_no_stages(extra: object) -> None:
    assert _http_stages(13.5, extra) is None
