"""`preheat up -f`: the pool file is validated first; a bad one lists every problem, exits 2
and starts nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from preheat.api.poolfile import PoolFileError, load_pool

REPO = Path(__file__).resolve().parents[2]

BAD = """\
apiVersion: preheat.dev/v1
kind: InferencePool
metadata: {}
spec:
  model: {name: m}
  engine: {kind: sim, args: {maxNumSeqs: 0}}
  replicas: {min: 1, max: 2, spare: 3}
  autoscaling: {window: 10 seconds}
"""


def test_examples_pool_is_valid_and_sized_for_the_demo():
    pool = load_pool(REPO / "examples" / "pool.yaml")
    r = pool.config.replicas
    assert pool.config.engine.kind == "sim"
    assert (r.min, r.warm_standby) == (1, 1)
    assert 3 <= r.max <= 4
    assert pool.config.autoscaling.objectives  # it autoscales
    assert pool.config.autoscaling.scale_down.stabilization_s <= 30


def test_every_problem_is_listed(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    with pytest.raises(PoolFileError) as err:
        load_pool(path)
    problems = err.value.problems
    assert any(p.startswith("apiVersion") for p in problems)
    assert any(p.startswith("metadata.name") for p in problems)
    assert any("spec.engine.args.maxNumSeqs" in p for p in problems)
    assert any("spec.replicas.spare: unknown field" in p for p in problems)
    assert any("spec.autoscaling.window" in p for p in problems)
    assert len(problems) == 5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: [1, 2", "not valid YAML"),
        ("", "exactly one InferencePool document, found 0"),
        ("---\na: 1\n---\nb: 2\n", "found 2 documents"),
        ("- 1\n- 2\n", "expected an InferencePool object"),
        (
            "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: x}\n"
            "spec: {model: {name: m}, replicas: {min: 3, max: 2}}\n",
            "replicas.min (3) must be <= replicas.max (2)",
        ),
    ],
)
def test_bad_shapes_say_what_is_wrong(tmp_path, text, needle):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PoolFileError) as err:
        load_pool(path)
    assert needle in err.value.message


def test_cli_bad_file_exits_2_with_one_message_and_starts_nothing(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "up", "-f", str(path), "--out", str(out), "--no-ui"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "5 problems; nothing was started" in proc.stderr
    assert "spec.replicas.spare: unknown field" in proc.stderr
    assert not out.exists()  # no run folder: no router, no worker was started


def test_cli_missing_file(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "up", "-f", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot read the file" in proc.stderr
    assert "Traceback" not in proc.stderr


def _up_example(tmp_path, flag):
    """`preheat up` on examples/pool.yaml with one extra flag, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "preheat.cli", "up", "-f", str(REPO / "examples" / "pool.yaml"),
         "--out", str(tmp_path / "run"), "--no-ui", flag],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def test_cli_worker_that_rejects_its_flags_stops_up_with_its_error(tmp_path):
    proc = _up_example(tmp_path, "--worker-arg=--no-such-flag")
    assert proc.returncode == 2
    assert "could not start (exit 2)" in proc.stderr
    assert "unrecognized arguments: --no-such-flag" in proc.stderr
    assert "Traceback" not in proc.stderr
    state = json.loads((tmp_path / "run" / "up.json").read_text())
    assert state["stopped"] is True
    assert all(_gone(pid) for pid in state["pids"])


def test_cli_router_that_rejects_its_flags_stops_up_with_its_error(tmp_path):
    proc = _up_example(tmp_path, "--router-arg=--policy=no-such-policy")
    assert proc.returncode == 2
    assert "the router rejected its flags (exit 2)" in proc.stderr
    assert "invalid choice: 'no-such-policy'" in proc.stderr
    state = json.loads((tmp_path / "run" / "up.json").read_text())
    assert all(_gone(pid) for pid in state["pids"])


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_cli_unwritable_run_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "preheat.cli",
            "up",
            "-f",
            str(REPO / "examples" / "pool.yaml"),
            "--out",
            str(blocker / "run"),
            "--no-ui",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot write the run folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_bad_flags_are_named_together_and_start_nothing(tmp_path):
    # NaN passed the `<= 0` checks, and a --prometheus without a scheme warned "unknown url
    # type" and went on with the direct scrape
    pool = tmp_path / "p.yaml"
    pool.write_text(
        "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: x}\n"
        "spec: {model: {name: m}, replicas: {min: 1, max: 1}}\n"
    )
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "preheat.cli", "up", "-f", str(pool), "--out", str(out)),
            *("--no-ui", "--interval-s", "nan", "--drain-grace-s", "inf"),
            *("--prometheus", "prom:9090"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        "preheat up: --interval-s must be > 0 and finite (got nan); --drain-grace-s must be "
        ">= 0 and finite (got inf); --prometheus must be an http:// or https:// URL (got "
        "'prom:9090'); nothing was started"
    ) in proc.stderr
    assert not out.exists()
