"""/metrics serves the engine's vLLM-named metrics and the worker's preheat_* metrics."""

from __future__ import annotations

from workerkit import Client, gen_request


async def test_metrics_has_engine_and_worker_families(client: Client) -> None:
    await client.generate(gen_request(max_tokens=4))
    async with client.http.get(client.http_url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    assert "vllm:num_requests_running" in text
    assert text.index("vllm:num_requests_running") < text.index("preheat_worker_")
    for name in (
        'preheat_worker_requests_total{outcome="ok"} 1.0',
        "preheat_worker_ttft_seconds_count 1.0",
        "preheat_worker_e2e_seconds_count 1.0",
        'preheat_worker_stage_seconds_count{stage="queue"} 1.0',
        'preheat_worker_stage_seconds_count{stage="prefill"} 1.0',
        'preheat_worker_stage_seconds_count{stage="decode"} 1.0',
        'preheat_worker_state{state="active"} 1.0',
        'preheat_worker_state{state="loading"} 0.0',
        "preheat_worker_in_flight 0.0",
    ):
        assert name in text, name
    itl_count = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("preheat_worker_itl_seconds_count")
    )
    assert itl_count == 3.0  # 4 tokens, 3 gaps


async def test_healthz_is_always_up(client: Client) -> None:
    async with client.http.get(client.http_url + "/healthz") as resp:
        assert resp.status == 200
