"""The engine factory and the worker's flags."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from preheat.engine.sim import SimEngine
from preheat.worker.engines import EngineUnavailable, build_engine
from preheat.worker.main import add_arguments


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults() -> None:
    args = parse()
    assert args.engine == "sim"
    assert args.start_as == "active"
    assert args.drain_grace_s == 30.0
    assert args.log_format in ("kv", "json")


def test_sim_from_flags() -> None:
    engine = build_engine(
        parse(
            "--model",
            "m1",
            "--sim-num-gpu-blocks",
            "100",
            "--sim-max-num-seqs",
            "3",
            "--sim-max-model-len",
            "512",
            "--sim-block-size",
            "8",
            "--sim-time-scale",
            "2",
            "--sim-opt",
            "max_waiting=5",
        )
    )
    assert isinstance(engine, SimEngine)
    info = engine.info
    assert (info.kind, info.model, info.num_gpu_blocks, info.max_num_seqs) == ("sim", "m1", 100, 3)
    assert (info.max_model_len, info.block_size) == (512, 8)
    assert engine.config.waiting_limit == 5
    assert engine.config.cost.scale == 2.0


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--sim-opt", "bogus=1"], "unknown sim engine option 'bogus'"),
        (["--sim-opt", "novalue"], "--sim-opt wants KEY=VALUE"),
        (["--engine", "vllm"], "--engine vllm needs --model"),
        (["--sim-max-num-seqs", "0"], "max_num_seqs must be >= 1, got 0"),
        (["--sim-time-scale", "-2"], "time_scale must be > 0 and finite, got -2.0"),
        (["--sim-opt", "eos_probability=1.5"], r"eos_probability must be within \[0, 1\]"),
        # the other engine's flags were never read: the worker ran without a word
        (
            ["--vllm-gpu-memory-utilization", "5", "--vllm-dtype", "x"],
            "--vllm-gpu-memory-utilization, --vllm-dtype: not read by the sim engine",
        ),
    ],
)
def test_bad_engine_flags_are_explained(argv: list[str], fragment: str) -> None:
    with pytest.raises(EngineUnavailable, match=fragment):
        build_engine(parse(*argv))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_without_vllm_is_a_clear_error() -> None:
    with pytest.raises(EngineUnavailable, match="vllm engine is not available here"):
        build_engine(parse("--engine", "vllm", "--model", "some/model"))


@pytest.mark.parametrize("grace", ["-1", "nan", "inf"])
def test_a_bad_drain_grace_exits_2_before_the_engine_is_built(
    grace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # -1 was a ValueError traceback after the engine had been built (a vLLM engine loads its
    # model there); NaN a traceback and a hang. The engine flag is bad too: the grace is
    # the one reported, so the engine was not built first
    from preheat.worker.main import run

    assert run(parse("--drain-grace-s", grace, "--sim-load-s", "-1", "--log-format", "json")) == 2
    said = capsys.readouterr()
    logged = said.out + said.err
    assert '"event": "bad_flags"' in logged or '"event":"bad_flags"' in logged, logged
    assert "--drain-grace-s: drain_grace_s must be >= 0 and finite" in logged
    assert "engine_unavailable" not in logged
