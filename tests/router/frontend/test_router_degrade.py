"""The degradation ladder at the router (issue 18, item 4): a request every endpoint is
predicted to serve past its class's target is clamped (its class names a degraded
max_tokens), served anyway (its class is not sheddable) or rejected early (429); the step
is in a header, the last chunk's ``preheat`` block, a metric and a log line, and a clamped
answer is an ordinary completion to the ``openai`` client with ``finish_reason: length``."""

from __future__ import annotations

from typing import Any

import grpc
import openai
from frontendkit import gen, router, words, workers

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.core.traffic.classes import Traffic, TrafficClass

TRAFFIC = Traffic(
    classes=(
        TrafficClass(name="clamped", ttft_ms=1, degraded_max_tokens=3),
        TrafficClass(name="must", ttft_ms=1, sheddable=False, priority=0),
        TrafficClass(name="shed", ttft_ms=1),
        TrafficClass(name="roomy", ttft_ms=600_000),
    ),
    default_class="roomy",
)


async def test_each_class_takes_its_ladders_step_and_says_so() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        url = r.url + "/v1/completions"
        body: dict[str, Any] = {"prompt": words(3000), "max_tokens": 20}
        async with r.http.post(url, json=body, headers={"x-slo-class": "clamped"}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["X-Preheat-Degraded"] == "clamp-output; max_tokens_asked=20"
            out = await resp.json()
        assert out["usage"]["completion_tokens"] == 3
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["preheat"]["degraded"] == {"step": "clamp-output", "max_tokens_asked": 20}
        stream_body = {**body, "stream": True}
        async with r.http.post(url, json=stream_body, headers={"x-slo-class": "clamped"}) as resp:
            assert resp.headers["X-Preheat-Degraded"].startswith("clamp-output")
            text = await resp.text()
        assert '"degraded":{"step":"clamp-output","max_tokens_asked":20}' in text
        async with r.http.post(url, json=body, headers={"x-slo-class": "must"}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["X-Preheat-Degraded"] == "queue"
            assert (await resp.json())["usage"]["completion_tokens"] == 20
        async with r.http.post(url, json=body, headers={"x-slo-class": "shed"}) as resp:
            assert resp.status == 429
            assert "Retry-After" in resp.headers
        async with r.http.post(url, json=body) as resp:  # within its target: untouched
            assert resp.status == 200
            assert "X-Preheat-Degraded" not in resp.headers
        async with r.http.get(r.url + "/metrics") as resp:
            metrics = await resp.text()
        name = mn.ROUTER_DEGRADED + "_total"
        steps = {
            (s.labels[mn.LABEL_SLO_CLASS], s.labels[mn.LABEL_STEP]): s.value
            for s in parse_samples(metrics, only=(name,))
        }
        assert steps == {
            ("clamped", "clamp-output"): 2,
            ("must", "queue"): 1,
            ("shed", "reject"): 1,
        }


async def test_the_openai_client_sees_a_clamped_answer_as_an_ordinary_completion() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
        async with client:
            done = await client.completions.create(
                model="",
                prompt=words(3000),
                max_tokens=20,
                extra_headers={"x-slo-class": "clamped"},
            )
        assert done.choices[0].finish_reason == "length"
        assert done.usage is not None
        assert done.usage.completion_tokens == 3


async def test_over_grpc_the_step_comes_as_a_trailer() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        call = r.inference.Generate(gen(words(3000), 20, slo_class="clamped"), timeout=20)
        tokens = 0
        while (chunk := await call.read()) is not grpc.aio.EOF:
            tokens += len(chunk.token_ids)
        assert tokens == 3
        trailers = dict(await call.trailing_metadata() or ())
        assert trailers["x-preheat-degraded"] == "clamp-output; max_tokens_asked=20"
        plain = r.inference.Generate(gen("short", 2), timeout=20)
        while await plain.read() is not grpc.aio.EOF:
            pass
        assert "x-preheat-degraded" not in dict(await plain.trailing_metadata() or ())
