"""Every vLLM engine argument in ``spec.engine.args``: the table, the refusals, the worker.

The table is generated from the pinned vLLM (``scripts/gen_vllm_args.py``; the vLLM tier
regenerates it and compares). Here: what the pool validation refuses and how it says so,
that a good set reaches the worker's command line unchanged, that the worker refuses the
same args with the same sentences, and that the CRD lists every argument.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from preheat.api import engine_args
from preheat.api.pool import crd, to_config, validate_spec
from preheat.core.manifests import BuildOptions, worker_args
from preheat.worker.engines import EngineUnavailable
from preheat.worker.engines import engine_args as worker_engine_args

GOOD = {
    "maxNumBatchedTokens": 2048,
    "enableChunkedPrefill": True,
    "quantization": "fp8",
    "kvCacheDtype": "fp8",
    "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 3, "promptLookupMax": 4},
    "compilationConfig": {"cudagraph_capture_sizes": [1, 2, 4]},
}


def _spec(args: dict[str, Any], kind: str = "vllm") -> dict[str, Any]:
    return {
        "model": {"name": "m"},
        "engine": {"kind": kind, "args": args},
        "replicas": {"max": 2},
    }


def _problems(args: dict[str, Any], kind: str = "vllm") -> list[str]:
    return validate_spec(_spec(args, kind))[1]


def test_the_table_is_vllms_engine_args_in_camel_case() -> None:
    rows = engine_args.rows()
    assert engine_args.vllm_version() == "0.32.0"  # the pin of scripts/setup_vllm_venv.sh
    assert len(rows) > 200
    for key, row in rows.items():
        assert row["flag"] == "--" + row["field"].replace("_", "-")
        assert engine_args.snake(key) == row["field"]
    assert rows["maxNumBatchedTokens"]["type"] == "integer"
    assert rows["gpuMemoryUtilization"]["exclusiveMinimum"] == 0
    assert "num_speculative_tokens" in rows["speculativeConfig"]["fields"]
    assert "fp8" in rows["quantization"]["enum"]


def test_a_good_set_of_vllm_args_is_accepted_and_reaches_the_worker_unchanged() -> None:
    assert _problems(GOOD) == []
    config = to_config(_spec({**GOOD, "maxNumSeqs": 8}), name="p", namespace="ns")
    argv = worker_args(config, BuildOptions())
    assert argv[argv.index("--vllm-max-num-seqs") + 1] == "8"
    assert json.loads(argv[argv.index("--engine-args") + 1]) == GOOD
    # and the worker maps them to vLLM's own field names
    fields = engine_args.to_vllm(GOOD)
    assert fields["max_num_batched_tokens"] == 2048
    assert fields["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
    }
    assert fields["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4]}


BAD = {
    "maxNumBatchedToken": 2048,  # unknown (a typo)
    "enableChunkedPrefill": "yes",  # wrong type
    "maxNumScheduledTokens": 0,  # out of range (>= 1)
    "quantization": "fp9",  # not a choice
    "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 0, "k": 3},
    "model": "other",  # Preheat's own
}


def test_every_bad_arg_is_refused_at_once_naming_the_key_and_what_is_allowed() -> None:
    problems = _problems(BAD)
    text = "\n".join(problems)
    assert len(problems) == 7, text
    assert (
        "engine.args.maxNumBatchedToken: not an engine argument of vLLM 0.32.0 "
        "(did you mean maxNumBatchedTokens?)"
    ) in text
    assert "engine.args.enableChunkedPrefill: must be true or false (got a string 'yes')" in text
    assert "engine.args.maxNumScheduledTokens: 0 is out of range; must be >= 1" in text
    assert "engine.args.quantization: 'fp9' is not one of " in text
    assert "fp8, " in text
    assert (
        "engine.args.speculativeConfig.num_speculative_tokens: 0 is out of range; must be > 0"
        in text
    )
    assert "engine.args.speculativeConfig.k: not a field of this vLLM config" in text
    assert "engine.args.model: set by Preheat, not by the pool" in text
    with pytest.raises(Exception, match="invalid InferencePool"):
        to_config(_spec(BAD), name="p", namespace="ns")


def test_the_typed_fields_keep_their_own_checks_beside_the_table() -> None:
    problems = _problems({"maxNumSeqs": 0, "maxNumBatchedTokens": 64})
    assert problems == [
        "engine.args.maxNumSeqs: input should be greater than or equal to 1 (got 0)"
    ]


def test_the_sim_takes_only_the_vllm_args_it_models() -> None:
    assert _problems({"maxNumBatchedTokens": 1024, "timeScale": 0.5}, kind="sim") == []
    assert "asyncScheduling" not in engine_args.SIM_VLLM_ARGS
    (problem,) = _problems({"asyncScheduling": False}, kind="sim")
    assert problem.startswith("engine.args.asyncScheduling: ")
    assert "a vLLM argument the sim engine does not model; with engine kind sim use" in problem
    assert "maxNumBatchedTokens" in problem


@pytest.mark.parametrize("kind", ["vllm", "sim"])
def test_the_worker_refuses_the_same_args_with_the_same_sentences(kind: str) -> None:
    bad = {k: v for k, v in BAD.items()}
    problems = _problems(bad, kind=kind)
    ns = argparse.Namespace(engine=kind, engine_args=json.dumps(bad))
    with pytest.raises(EngineUnavailable) as err:
        worker_engine_args(ns)
    assert str(err.value) == "invalid engine args: " + "; ".join(problems)
    assert worker_engine_args(argparse.Namespace(engine="vllm", engine_args=json.dumps(GOOD)))


def test_the_worker_refuses_args_that_are_not_a_json_object() -> None:
    for text in ("[1]", "{maxNumSeqs: 1}"):
        with pytest.raises(EngineUnavailable, match="--engine-args"):
            worker_engine_args(argparse.Namespace(engine="vllm", engine_args=text))


def test_the_crd_lists_every_vllm_arg_with_its_type_and_bounds() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    args = schema["properties"]["spec"]["properties"]["engine"]["properties"]["args"]
    props = args["properties"]
    for key in engine_args.rows():
        assert (key in props) == (key not in engine_args.OWNED or key == "seed"), key
    assert props["maxNumBatchedTokens"]["type"] == "integer"
    assert props["maxNumBatchedTokens"]["minimum"] == 1
    assert props["kvCacheDtype"]["enum"][0] == "auto"
    assert props["speculativeConfig"]["x-kubernetes-preserve-unknown-fields"] is True
    # Preheat's typed field wins over vLLM's row for the same key
    assert props["maxNumSeqs"]["maximum"] == 65536
    assert "additionalProperties" not in args


def test_a_sim_pool_s_levers_reach_the_sim_worker_s_cost_model() -> None:
    """The vLLM keys the sim models, through the operator's worker args into the sim."""
    from preheat.engine.sim import SimEngine
    from preheat.worker.engines import build_engine
    from preheat.worker.main import add_arguments

    levers = {
        "quantization": "fp8",
        "kvCacheDtype": "fp8",
        "maxNumBatchedTokens": 4096,
        "modelSize": "32b",
        "speculativeConfig": {
            "method": "eagle",
            "num_speculative_tokens": 3,
            "synthetic_acceptance_rates": [0.8, 0.64, 0.512],
        },
    }
    assert _problems(levers, kind="sim") == []
    argv = worker_args(
        to_config(_spec(levers, kind="sim"), name="p", namespace="ns"), BuildOptions()
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    engine = build_engine(parser.parse_args(argv))
    assert isinstance(engine, SimEngine)
    cost = engine.config.cost
    assert (cost.model_size, cost.weights, cost.kv_dtype) == ("32b", "fp8", "fp8")
    assert (cost.spec_method, cost.spec_tokens) == ("eagle", 3)
    assert cost.spec_accept_len == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert engine.config.max_num_batched_tokens == 4096
    # the KV memory FP8 weights and an FP8 cache leave the 32B (16 tokens a block)
    assert engine.config.num_gpu_blocks > 10_000


def test_the_sim_needs_the_expected_acceptance_to_simulate_speculation() -> None:
    spec = {"speculativeConfig": {"method": "ngram", "num_speculative_tokens": 3}}
    (problem,) = _problems(spec, kind="sim")
    assert problem.startswith("engine.args.speculativeConfig: the sim engine needs the expected")
    assert _problems(spec, kind="vllm") == []
