"""The worker command line `preheat up` builds: the operator's flags for the pool, on
loopback, with the engine asked for."""

from __future__ import annotations

import copy
import json

from preheat.api.poolfile import parse_pool
from preheat.local.runtime import local_config, router_tokenizer_args, worker_argv

POOL = {
    "apiVersion": "preheat.dev/v1alpha1",
    "kind": "InferencePool",
    "metadata": {"name": "p"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"kind": "vllm", "args": {"maxNumSeqs": 64, "gpuMemoryUtilization": 0.8}},
        "replicas": {"min": 1, "max": 2},
    },
}


def _argv(pool: dict[str, object], engine: str) -> list[str]:
    config = local_config(parse_pool(pool, "p.yaml").config, engine)
    return worker_argv(
        config,
        "w-3",
        grpc_port=5001,
        http_port=5002,
        control_port=5003,
        drain_grace_s=7.0,
        extra=("--x",),
    )


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_vllm_pool_runs_on_the_sim_by_default_keeping_the_args_that_apply():
    argv = _argv(POOL, "sim")
    assert argv[argv.index("worker") - 2 :][:3] == ["-m", "preheat.cli", "worker"]
    assert _flag(argv, "--engine") == "sim"
    assert _flag(argv, "--sim-max-num-seqs") == "64"
    assert not any(a.startswith("--vllm") for a in argv)  # gpuMemoryUtilization dropped
    assert _flag(argv, "--start-as") == "standby"
    assert _flag(argv, "--drain-grace-s") == "7"
    assert (_flag(argv, "--host"), _flag(argv, "--grpc-port"), _flag(argv, "--http-port")) == (
        "127.0.0.1",
        "5001",
        "5002",
    )
    assert _flag(argv, "--worker-id") == "w-3"
    assert argv[-1] == "--x"


def test_every_worker_port_is_on_loopback_and_the_control_port_is_named():
    """The operator's flags bind 0.0.0.0 (a pod); ``preheat up`` puts every port, the
    control port too, on loopback. The token is not in argv (any user can read a command
    line): it goes in the worker's environment."""
    argv = _argv(POOL, "sim")
    for flag, value in (("--host", "127.0.0.1"), ("--control-host", "127.0.0.1")):
        assert argv.count(flag) == 1
        assert _flag(argv, flag) == value
    assert argv.count("--control-port") == 1
    assert _flag(argv, "--control-port") == "5003"
    assert "0.0.0.0" not in argv
    assert not any("token" in a.lower() for a in argv)


def test_engine_vllm_passes_the_vllm_args_through():
    argv = _argv(POOL, "vllm")
    assert _flag(argv, "--engine") == "vllm"
    assert _flag(argv, "--model") == "meta-llama/Llama-3.1-8B-Instruct"
    assert _flag(argv, "--vllm-max-num-seqs") == "64"
    assert _flag(argv, "--vllm-gpu-memory-utilization") == "0.8"


def test_a_hostpath_model_is_read_in_place():
    pool = copy.deepcopy(POOL)
    pool["spec"]["model"]["source"] = "hostpath:///models/tiny"  # type: ignore[index]
    assert _flag(_argv(pool, "vllm"), "--model") == "/models/tiny"


def test_a_vllm_pools_router_gets_the_models_tokenizer():
    """The router of a vLLM pool with a local model routes on that model's tokenizer (and
    chat template), so its prefix hashes are the engine's; sim pools keep the router's
    ``sim`` tokenizer, and a ``--tokenizer`` of the user's wins."""
    local = copy.deepcopy(POOL)
    local["spec"]["model"]["source"] = "hostpath:///models/tiny"  # type: ignore[index]
    vllm = local_config(parse_pool(local, "p.yaml").config, "vllm")
    assert router_tokenizer_args(vllm, ()) == ["--tokenizer", "hf:/models/tiny"]
    assert router_tokenizer_args(vllm, ("--tokenizer", "sim")) == []
    sim = local_config(parse_pool(local, "p.yaml").config, "sim")
    assert router_tokenizer_args(sim, ()) == []
    hub = local_config(parse_pool(POOL, "p.yaml").config, "vllm")  # no local folder
    assert router_tokenizer_args(hub, ()) == []


def test_a_vllm_pool_s_engine_args_run_locally_on_the_sim_where_it_models_them() -> None:
    pool = copy.deepcopy(POOL)
    pool["spec"]["engine"]["args"].update(  # type: ignore[index]
        quantization="fp8",
        enableChunkedPrefill=True,  # the sim always chunks: not one of its args
        speculativeConfig={"method": "ngram", "num_speculative_tokens": 3},  # no acceptance
    )
    argv = _argv(pool, "sim")
    assert _flag(argv, "--sim-max-num-seqs") == "64"
    # only what the sim models, as given: speculation without its expected acceptance and
    # the vLLM-only args are dropped (logged), not refused by the sim worker at start
    assert json.loads(_flag(argv, "--engine-args")) == {"quantization": "fp8"}
    vllm = _argv(pool, "vllm")
    assert set(json.loads(_flag(vllm, "--engine-args"))) == {
        "quantization",
        "enableChunkedPrefill",
        "speculativeConfig",
    }
