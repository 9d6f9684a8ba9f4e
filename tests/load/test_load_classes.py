"""Traffic classes through the load generator and the report (issue 18: "the report breaks
TTFT/SLO attainment down by class"): a trace row's ``slo_class`` is sent as the router reads
it and recorded with the outcome; the report groups by it."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp.web
import pytest

from preheat.load.clients import OpenAIClient
from preheat.load.replay import LoadOptions
from preheat.report.record import RequestOutcome, Run, RunMeta
from preheat.report.summary import summarize
from preheat.report.table import render_table
from preheat.workload.traces import TraceError, TraceRequest, load_trace


def test_a_trace_row_names_its_class(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp_ms": 0, "input_tokens": 8, "output_tokens": 2, "slo_class": "interactive"},
        {"timestamp_ms": 5, "input_tokens": 8, "output_tokens": 2},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r.slo_class for r in load_trace(path)] == ["interactive", ""]
    path.write_text(json.dumps({**rows[0], "slo_class": 3}) + "\n")
    with pytest.raises(TraceError, match="slo_class must be a string"):
        load_trace(path)


async def test_the_http_client_sends_the_class_header_and_records_it() -> None:
    seen: list[str | None] = []

    async def completions(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(request.headers.get("x-slo-class"))
        body = {"error": {"message": "over quota", "code": "rate_limit_exceeded"}}
        return aiohttp.web.json_response(body, status=429)

    app = aiohttp.web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = OpenAIClient(f"http://127.0.0.1:{port}", LoadOptions(api="openai", model="m"))
    try:
        req = TraceRequest(arrival_s=0.0, input_tokens=4, output_tokens=2, slo_class="batch")
        out = await client.send(req, "r-1", 0.0)
        plain = await client.send(TraceRequest(0.0, 4, 2), "r-2", 0.0)
    finally:
        await client.session.close()
        await runner.cleanup()
    assert seen == ["batch", None]
    assert (out.outcome, out.slo_class) == ("rejected", "batch")
    assert plain.slo_class == ""


def test_the_report_breaks_ttft_and_attainment_down_by_class() -> None:
    def ok(i: int, klass: str, ttft: float) -> RequestOutcome:
        return RequestOutcome(
            f"r{i}", float(i), "ok", ttft_ms=ttft, e2e_ms=ttft + 50, slo_class=klass
        )

    reqs = [
        ok(0, "interactive", 100.0),
        ok(1, "interactive", 300.0),
        RequestOutcome("r2", 2.0, "rejected", slo_class="batch"),
        ok(3, "batch", 900.0),
        ok(4, "", 150.0),
    ]
    s = summarize(Run(RunMeta(name="x", ttft_objective_ms=500.0), reqs, [], []))
    assert set(s.by_class) == {"interactive", "batch", ""}
    inter, batch = s.by_class["interactive"], s.by_class["batch"]
    assert (inter.requests, inter.ok, inter.ttft_attainment) == (2, 2, 1.0)
    assert (batch.requests, batch.rejected, batch.ttft_attainment) == (2, 1, 0.0)
    assert inter.ttft_ms.p50 is not None
    assert inter.ttft_ms.p50 <= 300.0
    text = render_table(s)
    assert "interactive" in text
    assert "(default)" in text
    no_classes = summarize(Run(RunMeta(name="y"), [ok(0, "", 100.0)], [], []))
    assert no_classes.by_class == {}
    assert "TTFT SLO" not in render_table(no_classes)  # the class table's header
