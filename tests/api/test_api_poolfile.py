"""The one pool-file reader (``preheat.api.poolfile``): every problem at once, with its field
path, in one error type, for ``preheat up``, ``preheat simulate`` and the operator alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from preheat.api.pool import PoolSpecError, to_config
from preheat.api.poolfile import PoolFileError, load_pool
from preheat.simulate import pool_config, read_pool

REPO = Path(__file__).resolve().parents[2]
HEAD = b"apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\n"

# Several wrong fields and min > max: the cross-field rule must be reported with the rest.
MANY = (
    HEAD
    + b"""\
metadata: {name: many}
spec:
  model: {name: m}
  engine: {kind: tgi}
  replicas: {min: 5, max: 3, spare: 1}
  autoscaling:
    window: 10 seconds
    objectives: [{signal: ttft, percentile: 95}]
  topology: {zones: [a, a]}
"""
)
MANY_PROBLEMS = [
    "spec.engine.kind: input should be 'vllm' or 'sim' (got 'tgi')",
    "spec.replicas.spare: unknown field",
    "spec.autoscaling.window: string should match pattern "
    "'^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$' (got '10 seconds')",
    "spec.replicas.min (5) must be <= replicas.max (3)",
    "spec.autoscaling.objectives[0]: objective ttft: a latency signal needs percentile and "
    "targetMs (and no perReplica or targetRatio)",
    "spec.topology.zones lists a more than once",
]

CASES: list[tuple[str, bytes, list[str]]] = [
    ("several wrong fields and min > max", MANY, MANY_PROBLEMS),
    (
        "min > max next to a wrong type in the same section",
        HEAD + b"metadata: {name: p}\nspec: {model: {name: m}, replicas: "
        b"{min: 4, max: 2, warmStandby: many}}\n",
        [
            "spec.replicas.warmStandby: input should be a valid integer (got 'many')",
            "spec.replicas.min (4) must be <= replicas.max (2)",
        ],
    ),
    (
        "sim-only args on vllm next to a missing model",
        HEAD + b"metadata: {name: p}\nspec: {engine: {kind: vllm, args: {timeScale: 2}}, "
        b"replicas: {max: 1}, resources: {gpus: 0, gpuType: h100}}\n",
        [
            "spec.model: required field is missing",
            "spec.engine.args numGpuBlocks, timeScale, loadTime, warmupTime, seed, modelSize "
            "apply to engine kind sim only",
            "spec.resources.gpuType (h100) needs resources.gpus >= 1",
        ],
    ),
    (
        "not UTF-8",
        HEAD + b"metadata: {name: caf\xe9}\nspec: {model: {name: m}, replicas: {max: 1}}\n",
        ["not UTF-8 text: byte 0xe9 at offset 73 (line 3)"],
    ),
    (
        "metadata.name a list",
        HEAD + b"metadata: {name: [1, 2]}\nspec: {model: {name: m}, replicas: {max: 1}}\n",
        ["metadata.name: must be a string (got a YAML list: [1, 2])"],
    ),
    (
        "metadata.name a number, and min > max",
        HEAD + b"metadata: {name: 5}\nspec: {model: {name: m}, replicas: {min: 2, max: 1}}\n",
        [
            "metadata.name: must be a string (got a YAML int: 5)",
            "spec.replicas.min (2) must be <= replicas.max (1)",
        ],
    ),
    (
        "metadata.name a mapping, namespace not a name",
        HEAD + b"metadata: {name: {a: b}, namespace: Prod_1}\n"
        b"spec: {model: {name: m}, replicas: {max: 1}}\n",
        [
            "metadata.name: must be a string (got a YAML dict: {'a': 'b'})",
            "metadata.namespace: 'Prod_1' is not a Kubernetes name (lowercase letters, digits "
            "and '-', starting and ending with a letter or digit, at most 63 characters)",
        ],
    ),
    (
        "metadata not a mapping",
        HEAD + b"metadata: pool\nspec: {model: {name: m}, replicas: {max: 1}}\n",
        ["metadata: must be a mapping (got a YAML str)"],
    ),
    (
        "unknown top-level field",
        HEAD + b"metadata: {name: p}\nspecs: {}\nspec: {model: {name: m}, replicas: {max: 1}}\n",
        ["specs: unknown top-level field"],
    ),
    (
        "spec not a mapping, wrong kind",
        b"apiVersion: preheat.dev/v1alpha1\nkind: Pool\nmetadata: {name: p}\nspec: [1]\n",
        [
            "kind: must be InferencePool (got 'Pool')",
            "spec: must be a mapping (got a YAML list)",
        ],
    ),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_problem_is_listed_at_once_with_its_field_path(
    data: bytes, expected: list[str]
) -> None:
    with pytest.raises(PoolFileError) as err:
        load_pool(data, source="p.yaml")
    assert err.value.problems == expected
    n = len(expected)
    assert err.value.message.startswith(f"p.yaml: {n} problem{'s' if n > 1 else ''}:\n")


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_simulate_reads_pool_files_with_the_same_reader(
    tmp_path: Path, data: bytes, expected: list[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    with pytest.raises(PoolFileError) as err:
        pool_config(read_pool(path))
    assert err.value.problems == expected


def test_simulate_takes_a_bare_spec_but_not_a_mapping_of_unknown_fields(tmp_path: Path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text("model: {name: m}\nreplicas: {min: 3, max: 2}\n")
    with pytest.raises(PoolFileError) as err:
        pool_config(read_pool(bare))
    assert err.value.problems == ["spec.replicas.min (3) must be <= replicas.max (2)"]
    bare.write_text("model: {name: m}\nreplicas: {max: 2}\n")
    assert pool_config(read_pool(bare)).name == "bare"
    other = tmp_path / "other.yaml"
    other.write_text("specs: {model: {name: m}}\n")
    with pytest.raises(PoolFileError) as err:
        pool_config(read_pool(other))
    with pytest.raises(PoolFileError) as up_err:
        load_pool(other)
    assert err.value.problems == up_err.value.problems
    assert "specs: unknown top-level field" in err.value.problems


def test_the_operator_gets_cross_field_problems_next_to_field_problems() -> None:
    """The operator validates the spec it gets from the API server with the same rules."""
    spec = yaml.safe_load(MANY)["spec"]
    with pytest.raises(PoolSpecError) as err:
        to_config(spec, name="many", namespace="ns")
    assert err.value.problems == [p.removeprefix("spec.") for p in MANY_PROBLEMS]


def test_a_valid_file_reads_the_same_from_bytes_and_from_its_path() -> None:
    path = REPO / "examples" / "pool.yaml"
    by_path, by_bytes = load_pool(path), load_pool(path.read_bytes(), source=str(path))
    assert by_path == by_bytes
    assert pool_config(read_pool(path)) == by_path.config


def test_every_example_is_valid() -> None:
    for path in sorted((REPO / "examples").glob("*.yaml")):
        assert load_pool(path).name, path


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "trace.jsonl"
    rows = [{"timestamp_ms": 100 * i, "input_tokens": 64, "output_tokens": 4} for i in range(3)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preheat.cli", *argv], capture_output=True, text=True, timeout=120
    )


def _problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("  - ")]


@pytest.mark.parametrize(
    "case", ["several wrong fields and min > max", "not UTF-8", "unknown top-level field"]
)
def test_up_and_simulate_report_the_same_problems(tmp_path: Path, case: str) -> None:
    data, expected = next(c[1:] for c in CASES if c[0] == case)
    path = tmp_path / "pool.yaml"
    path.write_bytes(data)
    up = _cli("up", "-f", str(path), "--out", str(tmp_path / "up"), "--no-ui")
    sim = _cli(
        "simulate",
        "--pool",
        str(path),
        "--trace",
        str(_trace(tmp_path)),
        "--out",
        str(tmp_path / "sim"),
        "--no-plots",
    )
    for proc in (up, sim):
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert _problem_lines(proc.stderr) == [f"  - {p}" for p in expected]
    assert "nothing was started" in up.stderr
    assert not (tmp_path / "up").exists()
    assert not (tmp_path / "sim").exists()


@pytest.mark.parametrize(
    "name", ["p" * 56, "v1.chat", "9chat"], ids=["56 characters", "a dot", "a leading digit"]
)
def test_a_name_its_service_cannot_carry_is_refused(name: str) -> None:
    """The pool's Service is NAME-workers, a DNS-1035 label: a 59-character pool name gave a
    67-character Service and PDB the API server refuses."""
    spec = b"spec: {model: {name: m}, replicas: {max: 1}}\n"
    data = HEAD + f"metadata: {{name: {name!r}}}\n".encode() + spec
    with pytest.raises(PoolFileError) as err:
        load_pool(data, source="p.yaml")
    (problem,) = err.value.problems
    assert problem.startswith(f"metadata.name: {name!r} cannot name a pool: its Service")
    assert "at most 55 characters" in problem
    load_pool(HEAD + b"metadata: {name: " + b"p" * 55 + b"}\n" + spec)
