"""InferencePool spec -> defaults -> every problem at once -> frozen PoolConfig."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from poolkit import EXAMPLES, load_example

from preheat.api.pool import PoolSpecError, parse_duration, to_config, validate_spec
from preheat.core.errors import ErrorCode
from preheat.core.pool import ModelSource, Objective, PoolConfig, Signal

MINIMAL: dict[str, Any] = {"model": {"name": "m"}, "replicas": {"max": 3}}


def spec(**over: Any) -> dict[str, Any]:
    return {**MINIMAL, **over}


def problems(raw: dict[str, Any]) -> list[str]:
    return validate_spec(raw)[1]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0.0), ("500ms", 0.5), ("60s", 60.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5s", 1.5)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "60", "1 minute", "-1s", "1d", "s"])
def test_bad_durations_say_what_a_duration_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match="like 500ms, 60s, 10m or 1h30m"):
        parse_duration(text)


def test_minimal_spec_gets_every_default() -> None:
    c = to_config(MINIMAL, name="p", namespace="ns")
    assert (c.name, c.namespace) == ("p", "ns")
    assert c.engine.kind == "vllm"
    assert c.engine.image == ""
    assert c.engine.args == ()
    assert c.model.source == ModelSource(kind="none")
    assert c.resources.gpus == 1  # vllm without gpus: one
    assert (c.replicas.min, c.replicas.max, c.replicas.warm_standby, c.replicas.desired) == (
        1,
        3,
        0,
        1,
    )
    a = c.autoscaling
    assert a.objectives == ()
    assert a.window_s == 60.0
    assert a.tolerance == 0.1
    assert (a.scale_up.stabilization_s, a.scale_up.cooldown_s, a.scale_up.max_step) == (0, 15, 4)
    assert (a.scale_down.stabilization_s, a.scale_down.cooldown_s, a.scale_down.max_step) == (
        300,
        120,
        1,
    )
    assert not a.panic.enabled
    assert c.routing.session_ttl_s == 600.0
    assert c.routing.hotspot_margin_ms == 150.0
    assert c.topology.zones == ()
    assert c.topology.spread == "balanced"


def test_config_is_frozen_and_has_no_optionals() -> None:
    c = to_config(MINIMAL, name="p", namespace="ns")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.name = "q"  # type: ignore[misc]

    def walk(obj: object) -> None:
        assert obj is not None
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name))
        elif isinstance(obj, tuple):
            for x in obj:
                walk(x)

    walk(c)


@pytest.mark.parametrize(
    ("engine", "gpus", "expected"),
    [("sim", None, 0), ("vllm", None, 1), ("vllm", 2, 2), ("sim", 1, 1)],
)
def test_gpus_default_by_engine(engine: str, gpus: int | None, expected: int) -> None:
    res = {} if gpus is None else {"gpus": gpus}
    c = to_config(spec(engine={"kind": engine}, resources=res), name="p", namespace="ns")
    assert c.resources.gpus == expected


def test_gpus_default_to_tensor_parallel_size() -> None:
    raw = spec(engine={"args": {"tensorParallelSize": 4}})
    assert to_config(raw, name="p", namespace="ns").resources.gpus == 4


@pytest.mark.parametrize(("desired", "expected"), [(None, 2), (0, 2), (3, 3), (9, 5)])
def test_desired_is_clamped_to_min_max(desired: int | None, expected: int) -> None:
    rep: dict[str, Any] = {"min": 2, "max": 5}
    if desired is not None:
        rep["desired"] = desired
    assert to_config(spec(replicas=rep), name="p", namespace="ns").replicas.desired == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("pvc://models", ModelSource("pvc", claim="models")),
        ("pvc://models/llama/8b/", ModelSource("pvc", claim="models", path="llama/8b")),
        ("hostpath:///mnt/m", ModelSource("hostPath", path="/mnt/m")),
    ],
)
def test_model_sources(source: str, expected: ModelSource) -> None:
    raw = spec(model={"name": "m", "source": source})
    assert to_config(raw, name="p", namespace="ns").model.source == expected


def test_objectives_and_durations_map_to_the_config() -> None:
    raw = spec(
        engine={"kind": "sim", "args": {"loadTime": "2s", "warmupTime": "500ms", "seed": 7}},
        autoscaling={
            "objectives": [
                {"signal": "ttft", "percentile": 95, "targetMs": 400},
                {"signal": "queueDepth", "perReplica": 4},
                {"signal": "kvCacheUsage", "targetRatio": 0.8},
            ],
            "panic": {},
        },
    )
    c = to_config(raw, name="p", namespace="ns")
    assert c.autoscaling.objectives == (
        Objective(Signal.TTFT, 95, 400),
        Objective(Signal.QUEUE_DEPTH, 0, 4),
        Objective(Signal.KV_CACHE_USAGE, 0, 0.8),
    )
    assert dict(c.engine.args) == {"loadTime": 2.0, "warmupTime": 0.5, "seed": 7}
    assert c.autoscaling.panic.enabled
    assert c.autoscaling.panic.window_s == 10.0


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_make_configs(path: Any) -> None:
    doc = load_example(path)
    c = to_config(doc["spec"], name=doc["metadata"]["name"], namespace="ns")
    assert isinstance(c, PoolConfig)


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "min>max",
        spec(replicas={"min": 5, "max": 3}),
        "replicas.min (5) must be <= replicas.max (3)",
    ),
    ("max missing", {"model": {"name": "m"}, "replicas": {}}, "replicas.max: required field"),
    ("model missing", {"replicas": {"max": 1}}, "model: required field is missing"),
    ("unknown field", spec(replica={"max": 1}), "replica: unknown field"),
    (
        "unknown engine",
        spec(engine={"kind": "tgi"}),
        "engine.kind: input should be 'vllm' or 'sim'",
    ),
    ("bad duration", spec(autoscaling={"window": "1 minute"}), "autoscaling.window: string should"),
    ("bad source", spec(model={"name": "m", "source": "s3://b/m"}), "model.source: string should"),
    ("negative min", spec(replicas={"min": -1, "max": 3}), "replicas.min: input should be greater"),
    (
        "ttft without target",
        spec(autoscaling={"objectives": [{"signal": "ttft", "percentile": 95}]}),
        "autoscaling.objectives[0]: objective ttft: a latency signal needs percentile and targetMs",
    ),
    (
        "queueDepth with targetMs",
        spec(
            autoscaling={"objectives": [{"signal": "queueDepth", "perReplica": 2, "targetMs": 1}]}
        ),
        "objective queueDepth: a per-replica signal needs perReplica (and no percentile",
    ),
    (
        "concurrency with a percentile",
        spec(
            autoscaling={
                "objectives": [{"signal": "concurrency", "perReplica": 48, "percentile": 99}]
            }
        ),
        "objective concurrency: a per-replica signal needs perReplica (and no percentile",
    ),
    (
        "kv without ratio",
        spec(autoscaling={"objectives": [{"signal": "kvCacheUsage"}]}),
        "objective kvCacheUsage: kvCacheUsage needs targetRatio",
    ),
    (
        "two ttft p95",
        spec(
            autoscaling={
                "objectives": [
                    {"signal": "ttft", "percentile": 95, "targetMs": 400},
                    {"signal": "ttft", "percentile": 95, "targetMs": 300},
                ]
            }
        ),
        "autoscaling.objectives[1]: a second ttft objective at percentile 95; keep one",
    ),
    (
        "sim args on vllm",
        spec(engine={"kind": "vllm", "args": {"numGpuBlocks": 10}}),
        "engine.args numGpuBlocks, timeScale, loadTime, warmupTime, seed, modelSize "
        "apply to engine kind sim only",
    ),
    (
        "vllm args on sim",
        spec(engine={"kind": "sim", "args": {"dtype": "float16"}}),
        "apply to engine kind vllm only",
    ),
    (
        "gpuType without gpus",
        spec(resources={"gpus": 0, "gpuType": "nvidia-h100"}),
        "resources.gpuType (nvidia-h100) needs resources.gpus >= 1",
    ),
    (
        "tp > gpus",
        spec(engine={"args": {"tensorParallelSize": 4}}, resources={"gpus": 2}),
        "engine.args.tensorParallelSize (4) must be <= resources.gpus (2)",
    ),
    (
        "duplicate zones",
        spec(topology={"zones": ["a", "b", "a"]}),
        "topology.zones lists a more than once",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_specs_say_what_is_wrong(raw: dict[str, Any], expected: str) -> None:
    found = problems(raw)
    assert any(expected in p for p in found), found
    with pytest.raises(PoolSpecError) as info:
        to_config(raw, name="p", namespace="ns")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert expected in info.value.message


def test_every_problem_is_reported_at_once() -> None:
    shape = problems(
        {"model": {}, "replicas": {"min": -1, "max": 0}, "engine": {"kind": "x"}, "extra": 1}
    )
    assert len(shape) == 5, shape
    semantic = problems(
        spec(
            replicas={"min": 5, "max": 3},
            resources={"gpus": 0, "gpuType": "a100"},
            autoscaling={"objectives": [{"signal": "itl", "perReplica": 1}]},
            topology={"zones": ["z", "z"]},
        )
    )
    assert len(semantic) == 4, semantic
