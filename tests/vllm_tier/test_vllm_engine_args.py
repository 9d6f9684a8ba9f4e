"""vLLM engine args from a pool spec, on the vLLM CPU build (tiny offline model).

- The checked-in table (``src/preheat/api/vllm_engine_args.json``) is what
  ``scripts/gen_vllm_args.py`` reads from this vLLM: regenerated here and compared.
- A pool's ``engine.args`` go through the operator's path (``to_config`` ->
  ``worker_args``) into the worker's own argument parser and engine builder, and vLLM's own
  config shows them unchanged; the worker then streams and reports vLLM's metrics.
- A bad arg that slips past the operator is refused by the worker before vLLM starts, with
  the operator's sentences.

- N-gram speculative decoding (``speculativeConfig``) runs on the CPU build: vLLM's config
  shows it and the worker streams.

Not tried here: ``quantization`` and ``kvCacheDtype: fp8`` (the tiny model is a float32
checkpoint with random weights; FP8 kernels are a GPU matter), draft-model and EAGLE
speculation (no draft checkpoint offline).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import aiohttp
import grpc
import pytest_asyncio

from preheat.api.pool import to_config, validate_spec
from preheat.core.manifests import BuildOptions, worker_args
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc
from preheat.worker import main as worker_main
from preheat.worker.engines import EngineUnavailable, build_engine
from preheat.worker.server import WorkerConfig, WorkerServer

pytestmark = [pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]

ARGS = {
    # the batching budget and chunked prefill, and a few more of vLLM's own
    "maxNumBatchedTokens": 96,
    "enableChunkedPrefill": True,
    "longPrefillTokenThreshold": 48,
    "maxLogprobs": 7,
}


def test_the_checked_in_table_is_this_vllms(tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_vllm_args.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert out.read_text() == (ROOT / "src/preheat/api/vllm_engine_args.json").read_text(), (
        "stale: run .venv-vllm/bin/python scripts/gen_vllm_args.py, then make crd"
    )


def _worker_namespace(spec_args: dict[str, Any], model: Path) -> argparse.Namespace:
    """The worker's parsed command line for a pool with ``spec_args``, built the way the
    operator builds the pod (``to_config`` -> ``worker_args``)."""
    spec = {
        "model": {"name": "tiny-llama"},
        "engine": {
            "kind": "vllm",
            "args": {"maxModelLen": 256, "maxNumSeqs": 4, "dtype": "float32", **spec_args},
        },
        "replicas": {"max": 1},
        "resources": {"gpus": 0},
    }
    assert validate_spec(spec)[1] == []
    argv = worker_args(to_config(spec, name="p", namespace="ns"), BuildOptions())
    argv[argv.index("--model") + 1] = str(model)
    parser = argparse.ArgumentParser()
    worker_main.add_arguments(parser)
    return parser.parse_args([a for a in argv if a not in ("--start-as", "standby")])


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_model: Path) -> AsyncIterator[tuple[Any, Any, str]]:
    ns = _worker_namespace(ARGS, tiny_model)
    engine = build_engine(ns)
    server = WorkerServer(engine, WorkerConfig(worker_id="w-args", stop_grace_s=1.0))
    ports = await server.start()
    try:
        await asyncio.wait_for(server.wait_warm(), 240)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel:
            yield (
                engine,
                inference_pb2_grpc.InferenceStub(channel),
                f"http://127.0.0.1:{ports.http}",
            )
    finally:
        await asyncio.wait_for(server.stop(), 60)


@pytest.mark.asyncio(loop_scope="module")
async def test_pool_engine_args_reach_vllm_unchanged_and_it_serves(
    served: tuple[Any, Any, str],
) -> None:
    engine, stub, http_url = served
    config = engine.engine_client.vllm_config  # vLLM's own config of the running engine
    sched = config.scheduler_config
    assert sched.max_num_batched_tokens == 96
    assert sched.enable_chunked_prefill is True
    assert sched.long_prefill_token_threshold == 48
    assert config.model_config.max_logprobs == 7
    assert sched.max_num_seqs == 4
    assert config.model_config.max_model_len == 256

    # a prompt longer than the budget is prefilled in chunks, then streams
    request = inference_pb2.GenerateRequest(
        prompt="the " * 150,
        sampling=inference_pb2.SamplingParams(max_tokens=6, temperature=0.0, seed=1),
    )
    tokens = 0
    async for reply in stub.Generate(request, timeout=120):
        tokens += len(reply.token_ids)
    assert tokens == 6
    async with aiohttp.ClientSession() as http, http.get(f"{http_url}/metrics") as r:
        text = await r.text()
    assert "vllm:prompt_tokens_total" in text
    assert "vllm:generation_tokens_total" in text


def test_a_bad_arg_that_slips_through_is_refused_before_vllm_starts(tiny_model: Path) -> None:
    ns = _worker_namespace({}, tiny_model)
    ns.engine_args = '{"maxNumBatchedTokens": 0, "enableChunkedPrefil": true}'
    with pytest.raises(EngineUnavailable) as err:
        build_engine(ns)
    assert str(err.value) == (
        "invalid engine args: engine.args.enableChunkedPrefil: not an engine argument of vLLM "
        "0.32.0 (did you mean enableChunkedPrefill?); the allowed keys are vLLM's engine flags "
        "in camelCase (--max-num-batched-tokens -> maxNumBatchedTokens), listed in "
        "docs/engine-args.md; engine.args.maxNumBatchedTokens: 0 is out of range; must be >= 1"
    )


@pytest.mark.asyncio
async def test_ngram_speculative_decoding_on_the_cpu_build(tiny_model: Path) -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
    ns = _worker_namespace({"speculativeConfig": spec}, tiny_model)
    engine = build_engine(ns)
    server = WorkerServer(engine, WorkerConfig(worker_id="w-spec", stop_grace_s=1.0))
    ports = await server.start()
    try:
        await asyncio.wait_for(server.wait_warm(), 240)
        sc = engine.engine_client.vllm_config.speculative_config
        assert (sc.method, sc.num_speculative_tokens, sc.prompt_lookup_max) == ("ngram", 2, 3)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel:
            stub = inference_pb2_grpc.InferenceStub(channel)
            request = inference_pb2.GenerateRequest(
                prompt="one two three one two three one two",
                sampling=inference_pb2.SamplingParams(max_tokens=8, temperature=0.0, seed=1),
            )
            tokens = sum([len(r.token_ids) async for r in stub.Generate(request, timeout=120)])
        assert tokens == 8
    finally:
        await asyncio.wait_for(server.stop(), 60)
