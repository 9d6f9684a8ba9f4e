"""``preheat simulate --compare``: the runs each policy is swept over, and the command's
table, plot and record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preheat.core.autoscaling.baselines import Hpa, Keda, Kpa
from preheat.report.record import read_run
from preheat.simulate import SimInputError, pool_config, spec_document
from preheat.simulate.compare import (
    default_values,
    parse_compare,
    parse_knobs,
    refuse_unused,
    settings,
    slo_of,
    summary_lines,
    table_markdown,
)
from preheat.simulate.pareto import Point

SPEC: dict[str, Any] = {
    "model": {"name": "m"},
    "engine": {"kind": "sim"},
    "replicas": {"min": 1, "max": 8, "warmStandby": 1},
    "autoscaling": {
        "objectives": [
            {"signal": "ttft", "percentile": 95, "targetMs": 400},
            {"signal": "concurrency", "perReplica": 64},
        ]
    },
}


def test_parse_compare_names_policies_once_and_all_means_every_one() -> None:
    assert parse_compare("hpa, keda,hpa") == ("hpa", "keda")
    assert parse_compare("all") == ("preheat", "hpa", "keda", "kpa", "fixed")
    with pytest.raises(SimInputError, match="unknown policy hpx"):
        parse_compare("hpx,kpa")


def test_a_knob_or_schedule_the_comparison_would_not_read_is_refused_with_the_others() -> None:
    refuse_unused(("hpa", "kpa"), parse_knobs(["hpa=16", "kpa=8"]), schedule_given=False)
    refuse_unused(("hpa",), {}, schedule_given=False, attainment_given=True)
    refuse_unused(("scheduled",), {}, schedule_given=True)
    refuse_unused(None, {}, schedule_given=False)
    with pytest.raises(SimInputError) as e:
        refuse_unused(("hpa",), parse_knobs(["keda=2", "hpa=8", "fixed=3"]), schedule_given=True)
    assert str(e.value) == (
        "--knob keda: keda is not compared (--compare hpa); add it there; "
        "--knob fixed: fixed is not compared (--compare hpa); add it there; "
        "--schedule is read by scheduled only, which is not compared (--compare hpa; "
        "`all` leaves it out): add scheduled there"
    )
    with pytest.raises(SimInputError) as e:
        refuse_unused(None, parse_knobs(["hpa=16"]), schedule_given=True)
    assert str(e.value) == (
        "--knob sweeps a policy of --compare: give --compare too; "
        "--schedule is read by --compare scheduled: give it too"
    )


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("hpa", "expected POLICY=V1,V2"),
        ("nope=1", "expected POLICY=V1,V2"),
        ("hpa=a,b", "values must be numbers"),
        ("keda=0", "values > 0"),
        ("fixed=1.5", "whole numbers"),
    ],
)
def test_parse_knobs_says_what_is_wrong(item: str, message: str) -> None:
    with pytest.raises(SimInputError, match=message):
        parse_knobs([item])


def test_slo_is_the_flag_else_the_pools_ttft_objective() -> None:
    assert slo_of(SPEC, 500.0) == 500.0
    assert slo_of(SPEC, 0.0) == 400.0
    with pytest.raises(SimInputError, match="needs an SLO"):
        slo_of({"replicas": {"max": 2}}, 0.0)


def test_fixed_sizes_default_up_to_the_pools_max() -> None:
    assert default_values("fixed", 500, 8) == (1, 2, 3, 4, 5, 6, 8)
    # preheat's target from 0.4 to 3 x the SLO, about as wide as the baselines' knobs (8x)
    assert default_values("preheat", 500, 8) == (200, 300, 400, 500, 750, 1000, 1500)


def test_each_policy_is_swept_over_its_knob() -> None:
    runs = settings(
        ("preheat", "hpa", "keda", "kpa", "fixed"),
        parse_knobs(["preheat=300,200", "hpa=16,32", "keda=2", "kpa=24", "fixed=2,4"]),
        SPEC,
        500.0,
    )
    assert [r.label for r in runs] == [
        "preheat ttft p95<=200ms",
        "preheat ttft p95<=300ms",
        "hpa 16/pod",
        "hpa 32/pod",
        "keda 2/pod",
        "kpa 24/pod",
        "fixed 2 pods",
        "fixed 4 pods",
    ]
    by = {r.label: r for r in runs}
    # preheat: the pool's own policy with its first latency objective's target changed
    pre = by["preheat ttft p95<=200ms"]
    assert pre.autoscale is None
    cfg = pool_config(spec_document("p", SPEC), pre.overrides)
    assert [o.target for o in cfg.autoscaling.objectives] == [200.0, 64.0]
    # hpa: the target in flight per pod is utilization x slots
    hpa = by["hpa 32/pod"].autoscale
    assert isinstance(hpa, Hpa)
    assert hpa.target_utilization * hpa.slots_per_replica == pytest.approx(32)
    kpa = by["kpa 24/pod"].autoscale
    assert isinstance(kpa, Kpa)
    assert kpa.target_concurrency * kpa.target_utilization == pytest.approx(24)
    assert by["kpa 24/pod"].interval_s == 2.0
    keda = by["keda 2/pod"].autoscale
    assert isinstance(keda, Keda)
    assert keda.threshold == 2.0
    # the baselines keep the pool's replicas and get a queueDepth signal to read
    cfg = pool_config(spec_document("p", SPEC), by["keda 2/pod"].overrides)
    assert cfg.replicas.warm_standby == 1
    assert cfg.replicas.max == 8
    assert "queueDepth" in [o.signal.value for o in cfg.autoscaling.objectives]
    # fixed: that many pods, no standby, no autoscaling
    cfg = pool_config(spec_document("p", SPEC), by["fixed 4 pods"].overrides)
    assert (cfg.replicas.min, cfg.replicas.max, cfg.replicas.desired) == (4, 4, 4)
    assert cfg.replicas.warm_standby == 0
    assert cfg.autoscaling.objectives == ()


def test_a_pool_without_a_latency_objective_gets_one_for_preheat() -> None:
    spec = {**SPEC, "autoscaling": {"objectives": [{"signal": "queueDepth", "perReplica": 4}]}}
    (run,) = settings(("preheat",), {"preheat": (250.0,)}, spec, 500.0)
    cfg = pool_config(spec_document("p", spec), run.overrides)
    assert [(o.signal.value, o.target) for o in cfg.autoscaling.objectives] == [
        ("ttft", 250.0),
        ("queueDepth", 4.0),
    ]


def test_summary_says_cost_at_target_and_where_ours_is_not_left_of_a_baseline() -> None:
    pts = [
        Point("preheat", "a", 0.995, 3.0),
        Point("hpa", "x", 0.999, 2.5),
        Point("hpa", "y", 0.90, 1.0),
        Point("fixed", "2 pods", 0.98, 2.0),
        Point("fixed", "3 pods", 0.995, 3.0),
    ]
    lines = summary_lines(pts, 0.99)
    assert lines[0].startswith("hindsight-best fixed pool: 3 pods")
    assert "preheat at 99.00%: a, 3.00 GPU-h (99.50%), 1.00x the hindsight fixed pool" in lines
    assert "preheat NOT at or left of hpa at: x (99.90% on 2.50), y (90.00% on 1.00)" in lines
    assert "preheat NOT at or left of fixed at: 2 pods (98.00% on 2.00)" in lines
    table = table_markdown(pts, 0.99)
    assert "| hpa | x | 99.90% | 2.50 | 0.83 | yes |" in table


def test_summary_cautions_when_the_size_under_the_hindsight_best_was_not_run() -> None:
    pts = [
        Point("preheat", "a", 0.995, 13.0, 300.0),
        Point("fixed", "14 pods", 0.981, 14.0, 14.0),
        Point("fixed", "16 pods", 0.997, 16.0, 16.0),
    ]
    lines = summary_lines(pts, 0.99)
    assert lines[0].startswith("hindsight-best fixed pool: 16 pods")
    assert lines[1].startswith("CAUTION: 15 pods not run")
    assert "--knob fixed=15" in lines[1]
    with_15 = [*pts, Point("fixed", "15 pods", 0.985, 15.0, 15.0)]
    assert not any(line.startswith("CAUTION") for line in summary_lines(with_15, 0.99))


def _files(tmp_path: Path) -> tuple[Path, Path]:
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: t}\n"
        "spec: {model: {name: m}, engine: {kind: sim}, replicas: {min: 1, max: 2},\n"
        "  autoscaling: {objectives: [{signal: ttft, percentile: 95, targetMs: 500}]}}\n"
    )
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp_ms": 250 * i, "input_tokens": 600, "output_tokens": 5} for i in range(12)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pool, trace


def test_cli_compare_writes_table_plot_and_one_run_per_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    pool, trace = _files(tmp_path)
    out = tmp_path / "cmp"
    rc = main(
        [
            "simulate", "--pool", str(pool), "--trace", str(trace), "--out", str(out),
            "--compare", "preheat,hpa,fixed", "--knob", "preheat=500", "--knob", "hpa=16",
            "--knob", "fixed=1,2", "--jobs", "1",
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "hindsight-best fixed pool: 1 pod " in text
    doc = json.loads((out / "compare.json").read_text())
    assert [p["setting"] for p in doc["points"]] == ["ttft p95<=500ms", "16/pod", "1 pod", "2 pods"]
    assert doc["slo_ms"] == 500.0
    assert all(0 <= p["attainment"] <= 1 and p["gpu_hours"] > 0 for p in doc["points"])
    assert (out / "pareto.png").stat().st_size > 0
    assert "| fixed | 2 pods |" in (out / "compare.md").read_text()
    run = read_run(out / "fixed_2_pods")
    assert run.meta.simulated
    assert len(run.requests) == 12


def test_cli_compare_takes_a_burstgpt_trace_and_says_what_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A BurstGPT CSV (another public trace format) compares as ours does, one model's rows
    if asked; its failed requests (0 response tokens) and the other model's rows are not
    replayed, and stderr says how many."""
    from preheat.cli import main

    pool, _ = _files(tmp_path)
    trace = tmp_path / "BurstGPT_1.csv"
    rows = [
        f"{0.25 * i:g},{'GPT-4' if i in (0, 5) else 'ChatGPT'},600,{0 if i % 4 == 3 else 5},"
        "0,Conversation log"
        for i in range(16)
    ]
    trace.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        + "\n".join(rows)
        + "\n"
    )
    out = tmp_path / "cmp"
    rc = main(
        [
            "simulate", "--pool", str(pool), "--trace", str(trace), "--out", str(out),
            "--trace-model", "ChatGPT", "--compare", "fixed", "--knob", "fixed=1",
            "--no-probe", "--jobs", "1",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    assert "skipped 6 rows of the file: 4 with 0 output tokens" in captured.err
    assert "; 2 with another model than the one asked for" in captured.err
    assert "(10 requests)" in captured.out
    assert len(read_run(out / "fixed_1_pod").requests) == 10


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--compare", "hpx"], "unknown policy hpx"),
        (["--compare", "hpa", "--sweep", "replicas.max=1,2"], "give one of them"),
        (["--compare", "hpa", "--knob", "hpa"], "expected POLICY=V1,V2"),
        (["--compare", "fixed", "--target-attainment", "2"], "--target-attainment"),
        # a flag the comparison would not read: refused, not run without it
        (["--knob", "hpa=16"], "--knob sweeps a policy of --compare: give --compare too"),
        (["--compare", "hpa", "--knob", "kpa=16"], "--knob kpa: kpa is not compared"),
        (["--compare", "all", "--schedule", "day.json"], "--schedule is read by scheduled only"),
        (["--target-attainment", "0.9", "--no-probe"], "--target-attainment is read by --compare"),
        (["--no-probe"], "--no-probe is read by --compare: give it too"),
    ],
)
def test_cli_compare_bad_input_exits_2_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    from preheat.cli import main

    pool, trace = _files(tmp_path)
    argv = ["simulate", "--pool", str(pool), "--trace", str(trace), "--out", str(tmp_path / "x")]
    rc = main([*argv, *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_scheduled_needs_a_schedule_and_sizes_each_hour_from_it(tmp_path: Path) -> None:
    from preheat.core.autoscaling.baselines import Scheduled
    from preheat.simulate.compare import read_schedule

    with pytest.raises(SimInputError, match="needs --schedule"):
        settings(("scheduled",), {}, SPEC, 500.0)
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"rates_rps": [5.0] * 6 + [50.0] * 6, "window_s": 20.0}))
    (run,) = settings(("scheduled",), {"scheduled": (10.0,)}, SPEC, 500.0, read_schedule(f))
    assert run.label == "scheduled 10 req/s/pod"
    sch = run.autoscale
    assert isinstance(sch, Scheduled)
    assert sch.sizes == (1, 5)  # ceil(5/10) = 1 (min 1), ceil(50/10) = 5
    assert sch.slot_s == 120.0  # six 20-s windows an hour
    (capped,) = settings(("scheduled",), {"scheduled": (1.0,)}, SPEC, 500.0, read_schedule(f))
    assert isinstance(capped.autoscale, Scheduled)
    assert capped.autoscale.sizes == (5, 8)  # at most replicas.max
    f.write_text(json.dumps({"rates_rps": [], "window_s": 20.0}))
    with pytest.raises(SimInputError, match="rates_rps"):
        read_schedule(f)
    with pytest.raises(SimInputError, match="--schedule"):
        read_schedule(tmp_path / "missing.json")


def test_the_benchmarks_pool_file_is_the_autoscaling_parts_pool() -> None:
    from preheat.bench.sim_bench import _autoscaling_pool
    from preheat.simulate import read_pool

    path = Path(__file__).resolve().parents[2] / "src/preheat/bench/autoscaling-pool.yaml"
    cfg = pool_config(read_pool(path))
    ref = _autoscaling_pool(2, 0, 300.0, 99.0)
    assert cfg.autoscaling == ref.autoscaling
    assert cfg.replicas == ref.replicas


def _compare_fixed(tmp_path: Path, knob: str, *extra: str) -> tuple[int, Path]:
    """``preheat simulate --compare fixed --knob KNOB`` on the light trace of ``_files``,
    one process; the exit code and the comparison's folder."""
    from preheat.cli import main

    pool, trace = _files(tmp_path)
    out = tmp_path / "cmp"
    rc = main(
        [
            "simulate", "--pool", str(pool), "--trace", str(trace), "--out", str(out),
            "--compare", "fixed", "--knob", knob, "--jobs", "1", *extra,
        ]
    )  # fmt: skip
    return rc, out


def test_cli_compare_runs_the_fixed_sizes_its_sweep_skipped_under_the_hindsight_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Swept at 3 pods only, where one pod reaches the target on this light trace: the
    reference is found by bisecting 0..3 (1 pod), not left at 3."""
    rc, out = _compare_fixed(tmp_path, "fixed=3")
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "also running 1 pod (the gap under it)" in text
    assert "hindsight-best fixed pool: 1 pod " in text
    assert "CAUTION" not in text
    doc = json.loads((out / "compare.json").read_text())
    assert [(p["setting"], p["knob"]) for p in doc["points"]] == [("1 pod", 1.0), ("3 pods", 3.0)]
    assert (out / "fixed_1_pod").is_dir()


def test_cli_compare_no_probe_runs_only_the_sizes_given_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same sweep with --no-probe: 3 pods only, and the summary's CAUTION names the
    sizes under it that were not run (a day-long trace's hour per run is the user's call)."""
    rc, out = _compare_fixed(tmp_path, "fixed=3", "--no-probe")
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "also running" not in text
    assert "CAUTION: 2 pods not run" in text
    doc = json.loads((out / "compare.json").read_text())
    assert [p["setting"] for p in doc["points"]] == ["3 pods"]


def test_cli_compare_writes_each_run_as_it_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comparison that fails (or is stopped) after its first run keeps that run's folder
    and has printed its point: an hour-long run is not lost with a later one."""
    from preheat.core.errors import ErrorCode, PreheatError
    from preheat.simulate import main as sim_main

    real = sim_main._run_job
    calls: list[str] = []

    def second_fails(job: sim_main._Job, trace: object = None) -> sim_main._Result:
        calls.append(job.label)
        if len(calls) == 2:
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, "stopped")
        return real(job, trace)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_main, "_run_job", second_fails)
    rc, out = _compare_fixed(tmp_path, "fixed=1,3", "--no-probe")
    text = capsys.readouterr()
    assert rc != 0
    assert "stopped" in text.err
    assert len(calls) == 2
    assert (out / "fixed_1_pod" / "meta.json").is_file()
    assert not (out / "fixed_3_pods").exists()
    assert "  fixed 1 pod: " in text.out
    assert "% on " in text.out.split("  fixed 1 pod: ")[1].splitlines()[0]


def test_a_forecast_history_file_is_the_days_windows_ending_at_zero(tmp_path: Path) -> None:
    from preheat.simulate.compare import history_samples, read_schedule

    f = tmp_path / "day.json"
    f.write_text(json.dumps({"rates_rps": [1.0, 2.0, 3.0], "window_s": 10.0}))
    assert history_samples(read_schedule(f, "--forecast-history")) == (
        (-30.0, 1.0),
        (-20.0, 2.0),
        (-10.0, 3.0),
    )
    f.write_text(json.dumps({"rates_rps": [1.0], "window_s": 0}))
    with pytest.raises(SimInputError, match=r"--forecast-history .*window_s must be"):
        read_schedule(f, "--forecast-history")
