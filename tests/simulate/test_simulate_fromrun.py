"""The simulator says what it assumes, and takes a `preheat up` run's settings (--from-run),
so that a live run and its simulation are compared like for like."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from preheat.api.poolfile import load_pool
from preheat.local.settings import flag_value, up_settings
from preheat.report.record import (
    RunFormatError,
    RunSettings,
    ScaleEvent,
    read_meta,
    read_settings,
    write_settings,
)
from preheat.simulate import SimInputError, SimOptions
from preheat.simulate.fromrun import (
    DEFAULT_ORIGINS,
    RunBasis,
    describe_assumptions,
    options_from_run,
    read_basis,
    startups,
)
from preheat.simulate.world import engine_config

REPO = Path(__file__).resolve().parents[2]
POOL = REPO / "examples" / "pool.yaml"


def _ev(t: float, kind: str, worker: str) -> ScaleEvent:
    return ScaleEvent(t_s=t, kind=kind, worker=worker)


def test_startups_pair_each_start_with_its_ready_restarts_included() -> None:
    events = [
        _ev(0.0, "start", "w-1"),
        _ev(0.1, "start", "w-2"),
        _ev(3.0, "ready", "w-1"),
        _ev(4.1, "ready", "w-2"),
        _ev(5.0, "scale_up", ""),
        _ev(10.0, "start", "w-1"),  # a restart: counted anew
        _ev(12.5, "ready", "w-1"),
        _ev(13.0, "ready", "w-3"),  # no start seen: ignored
        _ev(14.0, "start", "w-4"),  # never ready: ignored
    ]
    assert startups(events) == pytest.approx((3.0, 4.0, 2.5))


def _settings(**kw: object) -> RunSettings:
    base: dict[str, object] = {
        "pool_file": str(POOL),
        "autoscale_interval_s": 2.0,
        "router_refresh_interval_s": 0.5,
        "worker_load_s": 1.0,
        "worker_warmup_s": 0.5,
    }
    return RunSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_run_settings_replace_the_production_defaults() -> None:
    basis = RunBasis(Path("runs/x"), _settings(), (3.0, 4.0, 5.0))
    opts, origins = options_from_run(basis, SimOptions(), {})
    assert opts.autoscale_interval_s == 2.0
    assert opts.refresh_interval_s == 0.5
    su = opts.startup
    assert su.image_pull_s == 0.0
    # the measured median (4 s) split into the sim's warm-up and the rest
    assert (su.load_s, su.warmup_s) == pytest.approx((3.5, 0.5))
    assert "median start -> ready 4.00 s over 3 worker starts" in origins["load"]
    assert origins["autoscale"] == "from runs/x"


def test_without_measured_start_ups_the_workers_settings_are_used() -> None:
    basis = RunBasis(Path("r"), _settings(worker_time_scale=2.0), ())
    opts, _ = options_from_run(basis, SimOptions(), {})
    assert (opts.startup.load_s, opts.startup.warmup_s) == pytest.approx((2.0, 1.0))
    assert opts.engine_options["time_scale"] == 2.0


def test_flags_win_over_the_run() -> None:
    basis = RunBasis(Path("r"), _settings(), (4.0,))
    mine = SimOptions(autoscale_interval_s=7.0)
    opts, origins = options_from_run(basis, mine, {"autoscale": True, "refresh": False})
    assert opts.autoscale_interval_s == 7.0
    assert opts.refresh_interval_s == 0.5
    assert origins["autoscale"] == DEFAULT_ORIGINS["autoscale"]  # the CLI marks it a flag


def test_the_assumptions_name_every_start_up_phase_and_interval() -> None:
    config = load_pool(POOL).config
    lines = describe_assumptions(engine_config(config, SimOptions()).cost, SimOptions())
    text = "\n".join(lines)
    assert "evaluates every 15.0 s" in text
    assert "ready 55.7 s after it is started = image pull 30.0 s (assumed)" in text
    assert "load 15.7 s" in text
    assert "warm-up 10.0 s" in text
    assert "standby -> active: 1 s" in text
    assert "refreshes endpoints every 1 s" in text
    assert "1.5 ms overhead" in text


def test_up_settings_take_the_pool_and_the_flags_workers_and_router_get() -> None:
    config = load_pool(POOL).config  # loadTime 1s, warmupTime 500ms
    s = up_settings(
        config,
        pool_file="p.yaml",
        engine="sim",
        autoscale_interval_s=3.0,
        worker_args=("--sim-warmup-s=0.25", "--sim-time-scale", "2"),
        router_args=("--refresh-interval-s", "0.2"),
    )
    assert (s.worker_load_s, s.worker_warmup_s, s.worker_time_scale) == (1.0, 0.25, 2.0)
    assert (s.autoscale_interval_s, s.router_refresh_interval_s) == (3.0, 0.2)
    assert s.image_pull_s == 0.0
    assert flag_value(["--a", "1", "--a=2"], "--a") == "2"
    assert flag_value(["--ab=1"], "--a") is None


def test_settings_round_trip_and_a_folder_without_them_says_so(tmp_path: Path) -> None:
    write_settings(tmp_path, _settings(worker_args=["--x"]))
    assert read_settings(tmp_path) == _settings(worker_args=["--x"])
    with pytest.raises(RunFormatError, match="no such file"):
        read_settings(tmp_path / "nope")
    with pytest.raises(SimInputError, match=r"--from-run .*no such file"):
        read_basis(tmp_path / "nope")
    (tmp_path / "settings.json").write_text('{"autoscale_interval_s": "fast"}')
    with pytest.raises(SimInputError, match="autoscale_interval_s"):
        read_basis(tmp_path)


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "trace.jsonl"
    rows = [{"timestamp_ms": 200 * i, "input_tokens": 300, "output_tokens": 4} for i in range(20)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _simulate(tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    out = tmp_path / "sim"
    argv = ["simulate", "--trace", str(_trace(tmp_path)), "--out", str(out), "--no-plots"]
    proc = subprocess.run(
        [sys.executable, "-m", "preheat.cli", *argv, *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_cli_prints_its_assumptions_at_the_top_of_the_report(tmp_path: Path) -> None:
    rc, out, err = _simulate(tmp_path, "--pool", str(POOL))
    assert rc == 0, err
    assert out.startswith("assumptions (defaults model a production start-up")
    assert "evaluates every 15.0 s (default: the operator's)" in out.splitlines()[1]
    meta = read_meta(tmp_path / "sim")
    assert meta is not None
    assert any("image pull 30.0 s" in line for line in meta.extra["assumptions"])


def test_cli_from_run_takes_the_runs_pool_settings_and_measured_start_up(tmp_path: Path) -> None:
    run = tmp_path / "up-run"
    run.mkdir()
    write_settings(run, _settings())
    (run / "events.jsonl").write_text(
        "".join(
            json.dumps({"t_s": t, "kind": k, "worker": w}) + "\n"
            for t, k, w in [(0, "start", "w-1"), (2.5, "ready", "w-1")]
        )
    )
    rc, out, err = _simulate(tmp_path, "--from-run", str(run), "--promote-s", "0.3")
    assert rc == 0, err
    head = out.split("\n\n", 1)[0]
    assert f"the settings of the preheat up run {run}" in head
    assert f"evaluates every 2 s (from {run})" in head
    assert "image pull 0 s" in head
    assert "load 2 s" in head
    assert "warm-up 0.5 s" in head
    assert "median start -> ready 2.50 s over 1 worker start" in head
    assert "standby -> active: 0.3 s (set by a flag)" in head
    assert "refreshes endpoints every 0.5 s" in head


def test_cli_from_a_folder_that_is_not_an_up_run_exits_2(tmp_path: Path) -> None:
    rc, _, err = _simulate(tmp_path, "--from-run", str(tmp_path / "nothing"))
    assert rc == 2
    assert "settings.json: no such file" in err
    assert "Traceback" not in err


def test_up_writes_its_settings_into_the_run_folder(tmp_path: Path) -> None:
    """A worker flag the worker refuses stops `up` at once: the folder still says how it ran."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "up", "-f", str(POOL), "--out", str(out),
         "--no-ui", "--interval-s", "3", "--worker-arg=--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    s = read_settings(out)
    assert s.autoscale_interval_s == 3.0
    assert s.pool_file == str(POOL)
    assert (s.worker_load_s, s.worker_warmup_s) == (1.0, 0.5)
    assert s.worker_args == ["--no-such-flag"]
