"""The simulator: reproducible, every request accounted for, policies imported from core."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from preheat.api.poolfile import PoolFileError
from preheat.core import autoscaling as core_autoscaling
from preheat.core.autoscaling import Context, Decision, PolicyState
from preheat.core.autoscaling.forecast import SHORTFALL_EDGES, learn, shortfall
from preheat.core.pool import PoolConfig
from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins import registry
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.scheduler import schedule
from preheat.core.routing.types import PrefillCost, RouteDecision, RoutingContext
from preheat.report.record import count_outcomes, read_run, write_run
from preheat.simulate import (
    SimInputError,
    SimOptions,
    Startup,
    parse_sweep,
    pool_config,
    simulate,
    spec_document,
)
from preheat.simulate.options import RouteFn
from preheat.workload.traces import TraceOptions, TraceRequest, load_trace

MOONCAKE = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake_conversation_trace.jsonl"
)


def _pool(**replicas: int | str) -> PoolConfig:
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 2, "max": 2},
    }
    spec["replicas"].update(replicas)
    return pool_config(spec_document("p", spec))


def _trace(n: int = 60, rate: float = 4.0) -> list[TraceRequest]:
    """Sessions of a few turns sharing a system prompt and their own history."""
    out = []
    for i in range(n):
        s = i % 7
        turn = i // 7
        blocks = (0, 1000 + s, *(2000 + 10 * s + k for k in range(turn)), 5000 + i)
        tokens = 64 * (len(blocks) - 1) + 40
        out.append(
            TraceRequest(
                arrival_s=i / rate,
                input_tokens=tokens,
                output_tokens=8 + (i * 13) % 40,
                session_id=f"s{s}",
                prefix_block_ids=blocks,
                block_tokens=64,
                index=i,
            )
        )
    return out


def _canon(run: Any) -> str:
    data = dataclasses.asdict(run)
    data["meta"].pop("started_at")
    return json.dumps(data, sort_keys=True)


def test_same_seed_gives_the_same_report() -> None:
    pool, trace = _pool(), _trace()
    a, _ = simulate(pool, trace, SimOptions(seed=3))
    b, _ = simulate(pool, trace, SimOptions(seed=3))
    assert _canon(a) == _canon(b)
    assert a.meta.simulated


def test_every_request_is_accounted_for_and_the_record_round_trips(tmp_path: Path) -> None:
    trace = _trace(80, rate=40.0)
    # one request longer than the context window: an error, not a silent drop
    trace.append(dataclasses.replace(trace[-1], input_tokens=40_000, index=80, arrival_s=1.0))
    pool = pool_config(
        spec_document(
            "p",
            {
                "model": {"name": "m"},
                "engine": {"kind": "sim", "args": {"maxModelLen": 4096, "maxNumSeqs": 4}},
                "replicas": {"min": 1, "max": 1},
            },
        )
    )
    run, stats = simulate(pool, trace, SimOptions(ttft_deadline_ms=400.0))
    counts = count_outcomes(run.requests)
    assert sum(counts.values()) == len(trace) == stats.requests
    assert sorted(r.request_id for r in run.requests) == sorted(f"req-{i}" for i in range(81))
    assert counts["error"] == 1  # the over-long prompt
    assert counts["rejected"] > 0  # 40 req/s on one 4-slot replica with a 400 ms deadline
    assert counts["ok"] > 0
    bad = next(r for r in run.requests if r.outcome == "error")
    assert "context length" in bad.error
    for r in run.requests:
        if r.outcome == "ok":
            assert r.ttft_ms > 0
            assert r.e2e_ms >= r.ttft_ms
            assert len(r.itl_values()) == r.output_tokens - 1
    write_run(tmp_path / "run", run)
    back = read_run(tmp_path / "run")
    assert back.meta.simulated
    assert len(back.requests) == len(run.requests)


def test_prefix_cache_hits_on_shared_prompts() -> None:
    run, _ = simulate(_pool(), _trace(), SimOptions())
    ok = [r for r in run.requests if r.outcome == "ok"]
    assert len(ok) == 60
    assert sum(r.cached_tokens for r in ok) > 0.3 * sum(r.prompt_tokens for r in ok)


def _prefer_p2(self: object, inp: ScoreInput) -> Mapping[str, float]:
    """A queue scorer that makes endpoint p-2 look 10 s faster than any other."""
    return {e.id: (-10_000.0 if e.id == "p-2" else 0.0) for e in inp.endpoints}


def test_a_routing_change_in_core_shows_up_in_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool, trace = _pool(min=3, max=3), _trace()
    before, _ = simulate(pool, trace, SimOptions())
    served = {r.endpoint for r in before.requests}
    assert len(served) > 1
    # change the policy in preheat.core only: the queue plugin the registry holds
    monkeypatch.setattr(type(registry.SCORERS["queue"]), "score", _prefer_p2)
    after, _ = simulate(pool, trace, SimOptions())
    assert {r.endpoint for r in after.requests} == {"p-2"}


def test_an_autoscaling_change_in_core_shows_up_in_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 4, "warmStandby": 1},
        "autoscaling": {"objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 500}]},
    }
    pool = pool_config(spec_document("p", spec))
    trace = _trace(120, rate=2.0)
    opts = SimOptions(startup=Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0))
    calm, _ = simulate(pool, trace, opts)
    assert not [e for e in calm.events if e.kind == "scale_up"]
    real_decide = core_autoscaling.decide

    def eager(ctx: Context) -> tuple[Decision, PolicyState]:
        d, s = real_decide(ctx)
        want = min(ctx.replicas.max, ctx.replicas.desired + 1)
        return dataclasses.replace(d, active=want, standby=d.standby), s

    monkeypatch.setattr(core_autoscaling, "decide", eager)
    scaled, _ = simulate(pool, trace, opts)
    ups = [e for e in scaled.events if e.kind == "scale_up"]
    assert ups
    assert ups[-1].to_replicas == 4
    # the warm standby is promoted first, then new pods start behind it
    kinds = [e.kind for e in scaled.events]
    assert kinds.index("promote") < kinds.index("start")
    assert max(s.active for s in scaled.replicas) == 4


def test_set_and_sweep_errors_name_the_bad_key() -> None:
    pf = spec_document("p", {"model": {"name": "m"}, "replicas": {"max": 2}})
    with pytest.raises(
        SimInputError, match=r"unknown key 'scaleDwn' in autoscaling; known: .*scaleDown"
    ):
        pool_config(pf, [("autoscaling.scaleDwn.stabilization", "600s")])
    with pytest.raises(PoolFileError, match=r"stabilization.*600 seconds"):
        pool_config(pf, [("autoscaling.scaleDown.stabilization", "600 seconds")])
    cfg = pool_config(pf, [("autoscaling.scale_down.stabilization", "600s")])
    assert cfg.autoscaling.scale_down.stabilization_s == 600.0
    with pytest.raises(SimInputError, match="KEY=V1,V2"):
        parse_sweep("replicas.max=")
    with pytest.raises(SimInputError, match="unknown key 'maxx'"):
        parse_sweep("replicas.maxx=1,2")
    assert parse_sweep("replicas.max=2, 4") == ("replicas.max", ("2", "4"))


def test_set_reaches_a_list_element_by_its_index() -> None:
    # an objective's target could be set only by rewriting the whole list: `--set
    # autoscaling.objectives.0.targetMs=400` was "unknown key '0' in autoscaling.objectives"
    objectives = [
        {"signal": "ttft", "percentile": 99, "targetMs": 300},
        {"signal": "queueDepth", "perReplica": 4},
    ]
    pf = spec_document(
        "p",
        {"model": {"name": "m"}, "replicas": {"max": 2}, "autoscaling": {"objectives": objectives}},
    )
    cfg = pool_config(pf, [("autoscaling.objectives.0.targetMs", "450")])
    assert [o.target for o in cfg.autoscaling.objectives] == [450.0, 4.0]
    assert pf.spec is not None
    assert pf.spec["autoscaling"]["objectives"][0]["targetMs"] == 300  # the file is not changed
    assert parse_sweep("autoscaling.objectives.0.targetMs=200,400")[1] == ("200", "400")
    with pytest.raises(SimInputError, match=r"has 2 element\(s\) in this pool \(indices 0-1\)"):
        pool_config(pf, [("autoscaling.objectives.2.targetMs", "1")])
    with pytest.raises(SimInputError, match=r"is a list: the next part is an element's index"):
        parse_sweep("autoscaling.objectives.first.targetMs=1,2")
    with pytest.raises(SimInputError, match=r"unknown key 'tgt' in autoscaling.objectives.0"):
        pool_config(pf, [("autoscaling.objectives.0.tgt", "1")])
    bare = spec_document("p", {"model": {"name": "m"}, "replicas": {"max": 2}})
    with pytest.raises(SimInputError, match=r"is empty in this pool; --set autoscaling.objec"):
        pool_config(bare, [("autoscaling.objectives.0.targetMs", "1")])


@pytest.mark.needs_shared(MOONCAKE)
def test_mooncake_slice_runs_with_its_real_lengths() -> None:
    trace = load_trace(MOONCAKE, TraceOptions(max_requests=150, max_input_tokens=30_000))
    # no default TTFT target: the router's 2 s would refuse a few of the slice's burst of
    # long prompts, as live (test_simulate_demand.py holds admission)
    run, stats = simulate(_pool(min=4, max=4), trace, SimOptions(default_ttft_target_ms=0.0))
    counts = count_outcomes(run.requests)
    assert counts["ok"] == 150
    assert stats.schedule_calls == 150
    hit = sum(r.cached_tokens for r in run.requests) / sum(r.prompt_tokens for r in run.requests)
    assert 0.02 < hit < 0.9  # the shared system prompt (trace block 0) hits from the 2nd


def _write_pool(tmp_path: Path) -> Path:
    p = tmp_path / "pool.yaml"
    p.write_text(
        "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: t}\n"
        "spec: {model: {name: m}, engine: {kind: sim}, replicas: {min: 1, max: 2}}\n"
    )
    return p


def _write_trace(tmp_path: Path, n: int = 12) -> Path:
    p = tmp_path / "trace.jsonl"
    lines = [
        json.dumps(
            {
                "timestamp_ms": 250 * i,
                "input_tokens": 600,
                "output_tokens": 5,
                "prefix_block_ids": [0, 1 + i % 3],
            }
        )
        for i in range(n)
    ]
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "replicas.maxx=3"], "unknown key 'maxx' in replicas; known: desired, max, min"),
        (["--set", "replicas.max"], "expected KEY=VALUE"),
        (["--set", "replicas.max=-1"], "replicas.max"),
        (["--sweep", "autoscaling.window=10s,ten"], "autoscaling.window=ten"),
        (["--sweep", "nope=1,2"], "unknown key 'nope' in the pool spec"),
        # numbers out of range: each ran (a negative deadline, a NaN start-up time) or
        # failed late with an internal name (the objective), or hung (a token budget of 0)
        (
            ["--ttft-objective-ms", "-1"],
            "ttft_objective_ms (--ttft-objective-ms) must be >= 0 and finite, got -1.0",
        ),
        (
            ["--ttft-deadline-ms", "nan"],
            "ttft_deadline_ms (--ttft-deadline-ms) must be > 0 and finite, got nan",
        ),
        (
            ["--image-pull-s", "-1", "--promote-s", "inf"],
            "startup.image_pull_s (--image-pull-s) must be >= 0 and finite, got -1.0; "
            "startup.promote_s (--promote-s) must be >= 0 and finite, got inf",
        ),
        (["--jobs", "-1"], "--jobs must be >= 0"),
        (
            ["--engine-option", "max_num_batched_tokens=0", "--engine-option", "num_gpu_blocks=0"],
            "sim engine options: num_gpu_blocks must be >= 1, got 0; "
            "max_num_batched_tokens must be >= 1, got 0",
        ),
        (["--engine-option", "time_scale=0"], "time_scale must be > 0 and finite, got 0.0"),
        (
            ["--set", "engine.args.numGpuBlocks=1000000000"],
            "spec.engine.args.numGpuBlocks: input should be less than or equal to 10000000",
        ),
    ],
)
def test_cli_bad_set_and_sweep_exit_2_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    from preheat.cli import main

    argv = ["simulate", "--pool", str(_write_pool(tmp_path)), "--trace"]
    rc = main([*argv, str(_write_trace(tmp_path)), "--out", str(tmp_path / "run"), *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("engine_flag", "engine_message"),
    [
        ("max_num_seqs=0", "sim engine options: max_num_seqs must be >= 1, got 0"),
        ("nope=1", "unknown sim engine option 'nope'"),
    ],
)
def test_every_layers_problem_is_listed_at_once_before_the_trace_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine_flag: str, engine_message: str
) -> None:
    """A bad pool field, a bad flag and a bad engine option in one command: all three
    refused together, and before the trace is read (it does not exist here). They were
    refused one layer at a time: the pool's problems alone, then the flags'."""
    from preheat.cli import main

    flags = ["--set", "replicas.min=-1", "--ttft-deadline-ms", "-1"]
    flags += ["--engine-option", engine_flag]
    argv = ["simulate", "--pool", str(_write_pool(tmp_path)), "--trace"]
    rc = main([*argv, str(tmp_path / "absent.jsonl"), "--out", str(tmp_path / "run"), *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert "spec.replicas.min: input should be greater than or equal to 0" in err
    assert "ttft_deadline_ms (--ttft-deadline-ms) must be > 0 and finite, got -1.0" in err
    assert engine_message in err
    assert "absent.jsonl" not in err
    assert not (tmp_path / "run").exists()


def test_cli_sweep_prints_the_trade_off_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    argv = ["simulate", "--pool", str(_write_pool(tmp_path)), "--trace"]
    rc = main(
        [
            *argv,
            str(_write_trace(tmp_path)),
            "--out",
            str(tmp_path / "sweep"),
            "--sweep",
            "replicas.min=1,2",
            "--no-plots",
            "--jobs",
            "1",
            "--ttft-objective-ms",
            "500",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "SLO" in out
    assert "GPU-h" in out
    assert "replicas.min=1" in out
    assert "replicas.min=2" in out
    for v in ("1", "2"):
        run = read_run(tmp_path / "sweep" / f"replicas.min={v}")
        assert run.meta.simulated
        assert len(run.requests) == 12


def test_a_pool_at_zero_wakes_and_held_requests_are_served_or_time_out() -> None:
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 0, "max": 2, "desired": 0},
        "autoscaling": {"objectives": [{"signal": "queueDepth", "perReplica": 4}]},
    }
    pool = pool_config(spec_document("z", spec))
    trace = _trace(30, rate=10.0)
    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0, promote_s=0.5)
    run, _ = simulate(pool, trace, SimOptions(startup=fast, autoscale_interval_s=2.0))
    kinds = [e.kind for e in run.events]
    assert "scale_up" in kinds
    assert "start" in kinds
    assert "ready" in kinds
    assert "waking" in next(e.reason for e in run.events if e.kind == "scale_up")
    counts = count_outcomes(run.requests)
    assert sum(counts.values()) == 30
    assert counts["ok"] == 30  # held at the router (10 s) until the first pod is active
    first = min(run.requests, key=lambda r: r.t_s)
    # served only after the wake decision (t=2 s), a 3 s start and a 0.5 s promotion
    assert first.ttft_ms > 5500
    # a slower start than the router's hold: the first requests time out, as live
    slow = Startup(image_pull_s=12.0, load_s=1.0, warmup_s=1.0)
    run2, _ = simulate(pool, trace, SimOptions(startup=slow, autoscale_interval_s=2.0))
    c2 = count_outcomes(run2.requests)
    assert sum(c2.values()) == 30
    assert c2["error"] > 0
    assert all("no routable endpoint" in r.error for r in run2.requests if r.outcome == "error")


def test_the_forecast_looks_as_far_ahead_as_the_pods_took_to_start() -> None:
    """``autoscaling.predictive.horizon`` unset: until a pod has started, 60 s; once the
    first (woken from zero) is warm, the 3 s its start took (1 s pull, 1 s load, 1 s
    warm-up): the pods' measured cold start, plus the 2-s evaluation interval and half the
    demand window, which the run's figures name."""
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 0, "max": 2, "desired": 0},
        "autoscaling": {
            "objectives": [{"signal": "queueDepth", "perReplica": 4}],
            "predictive": {"enabled": True},
        },
    }
    pool = pool_config(spec_document("z", spec))
    horizons: list[tuple[float, float, str, float]] = []  # (now, horizon, basis, window)

    def decide(ctx: Context) -> tuple[Decision, PolicyState]:
        decision, state = core_autoscaling.decide(ctx)
        if decision.forecast is not None and ctx.signals.demand is not None:
            f, w = decision.forecast, ctx.signals.demand.window_s
            horizons.append((ctx.now, f.horizon_s, f.basis, w))
        return decision, state

    fast = Startup(image_pull_s=1.0, load_s=1.0, warmup_s=1.0, promote_s=0.5)
    options = SimOptions(startup=fast, autoscale_interval_s=2.0, autoscale=decide)
    run, _ = simulate(pool, _trace(300, rate=10.0), options)
    ready = min(e.t_s for e in run.events if e.kind == "ready")
    before = {h for t, h, _, _ in horizons if t < ready}
    # each horizon: 3 s, the time since the last forecast (the interval, up to a window)
    # and half the window
    after = [
        (h, b, min(t - last, w) + w / 2.0)
        for (last, *_), (t, h, b, w) in itertools.pairwise(horizons)
        if t > ready
    ]
    assert before <= {60.0}
    assert after, horizons
    for h, b, lead in after:
        assert h == pytest.approx(3.0 + lead), horizons
        assert b.startswith("the pods' cold start 3 s + "), b
    assert "+ 2 s to the next evaluation + " in after[-1][1]
    fc = run.meta.extra["forecast"]
    assert isinstance(fc, dict)
    assert fc["horizon_s"] == pytest.approx(after[-1][0])
    assert fc["horizon_basis"] == after[-1][1]


def test_network_rtt_is_on_the_ttft_and_in_the_routers_view(tmp_path: Path) -> None:
    from preheat.simulate import Network, load_network

    net_file = tmp_path / "net.yaml"
    net_file.write_text("rttMs: {us-east-1: {eu-west-1: 200}}\nlocalMs: 1\nrouterOverheadMs: 0\n")
    net = load_network(net_file)
    assert net.rtt_ms("eu-west-1", "us-east-1") == 200.0
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "topology": {"zones": ["us-east-1a", "eu-west-1a"]},
        "replicas": {"min": 2, "max": 2},
    }
    pool = pool_config(spec_document("g", spec))
    trace = _trace(40, rate=2.0)
    local, _ = simulate(pool, trace, SimOptions(network=net, client_regions=(("eu-west-1", 1.0),)))
    # a light load: the router keeps eu clients on the eu pod (the 200 ms RTT is in its
    # view, beyond the sessions' 150 ms hotspot margin)
    assert {r.endpoint for r in local.requests} == {"g-1"}
    assert {r.region for r in local.requests} == {"eu-west-1"}
    assert all(r.stages_ms["network"] == 1.0 for r in local.requests)
    far = Network(region_rtt_ms={"us-east-1": {"eu-west-1": 80.0}}, router_overhead_ms=0.0)
    # a pool only in us-east: every eu request pays the 80 ms RTT
    one = pool_config(spec_document("g", {**spec, "topology": {"zones": ["us-east-1a"]}}))
    remote, _ = simulate(one, trace, SimOptions(network=far, client_regions=(("eu-west-1", 1.0),)))
    for a, b in zip(
        sorted(local.requests, key=lambda r: r.t_s),
        sorted(remote.requests, key=lambda r: r.t_s),
        strict=True,
    ):
        assert b.stages_ms["network"] == 80.0
        assert b.ttft_ms > a.ttft_ms + 30.0  # one RTT more, less the 1 ms local one
    bad = tmp_path / "bad.yaml"
    bad.write_text("rttMs: {a: {b: -1}}\nfoo: 1\n")
    with pytest.raises(SimInputError, match=r"unknown key 'foo'.*rttMs.a.b must be a number >= 0"):
        load_network(bad)


def test_without_watch_cache_the_router_routes_on_its_prefix_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from preheat.core.routing.history import PrefixHistory

    pool = _pool(min=3, max=3)
    # no sessions: only a prefix view keeps a conversation's turns together
    trace = [dataclasses.replace(t, session_id="") for t in _trace()]

    def hit(run: Any) -> float:
        return float(
            sum(r.cached_tokens for r in run.requests) / sum(r.prompt_tokens for r in run.requests)
        )

    precise, _ = simulate(pool, trace, SimOptions())
    history, _ = simulate(pool, trace, SimOptions(watch_cache=False))
    assert hit(history) > 0.6
    assert abs(hit(history) - hit(precise)) < 0.1
    # the simulator's router uses core's PrefixHistory: blind it and the hits fall
    monkeypatch.setattr(PrefixHistory, "match", lambda self, hashes, now: {})
    blind, _ = simulate(pool, trace, SimOptions(watch_cache=False))
    assert hit(blind) < hit(history) - 0.1


def test_cli_prints_the_latency_budget_of_the_simulated_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    rc = main(
        ["simulate", "--pool", str(_write_pool(tmp_path)), "--trace",
         str(_write_trace(tmp_path)), "--out", str(tmp_path / "one"), "--no-plots"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "latency budget" in out
    rows = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert {"router", "network", "queue", "prefill", "decode"} <= rows
    assert "TTFT tail (slowest 5%" in out


def test_a_new_pool_holds_its_starting_size_for_one_scale_down_window() -> None:
    """The simulator's pool, like the operator's and preheat up's, is new at t=0: its
    starting size (``replicas.desired``) holds until the policy has seen one whole
    scale-down window, however far under target the first windows are (proposal 0007,
    revised twice; before, a pool seen from its creation scaled down on its first)."""
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 4, "desired": 3},
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 500}],
            "scaleDown": {"stabilization": "60s", "cooldown": "5s", "maxStep": 4},
        },
    }
    pool = pool_config(spec_document("p", spec))
    trace = _trace(300, rate=2.0)  # 150 s of light load: one pod is plenty
    run, _ = simulate(pool, trace, SimOptions(autoscale_interval_s=5.0))
    downs = [e for e in run.events if e.kind == "scale_down"]
    assert downs, [e.kind for e in run.events]
    assert downs[0].t_s >= 60.0, downs[0]
    assert downs[0].from_replicas == 3
    held = [s for s in run.replicas if s.t_s < 60.0]
    assert held
    assert all(s.active == 3 for s in held)


def _recording(seen: list[RoutingContext]) -> RouteFn:
    """The scheduler, recording every routing context it is given in ``seen``."""

    def route(
        ctx: RoutingContext, cfg: SchedulerConfig, cost: PrefillCost, state: SchedulerState
    ) -> tuple[RouteDecision, SchedulerState]:
        seen.append(ctx)
        return schedule(ctx, cfg, cost, state)

    return route


def test_the_simulated_router_sees_the_step_clocks_the_live_one_reads_from_tokens() -> None:
    # one pod decoding a long request; later arrivals see its step clock: the last step
    # boundary (as its token reaches the router), the step, and the lag the live router
    # measures (its TTFT less the engine's: the router's overhead and one RTT)
    trace = [
        TraceRequest(arrival_s=0.0, input_tokens=64, output_tokens=400, index=0),
        *(
            TraceRequest(arrival_s=0.5 + 0.0013 * i, input_tokens=64, output_tokens=4, index=i)
            for i in range(1, 4)
        ),
    ]
    seen: list[RoutingContext] = []
    route = _recording(seen)

    for on in (True, False):
        seen.clear()
        opts = SimOptions(routing=SchedulerConfig(step_clock=on), route=route)
        run, _ = simulate(_pool(min=1, max=1), trace, opts)
        assert count_outcomes(run.requests)["ok"] == 4
        assert seen[0].step_clocks == {}  # nothing decoding yet
        if not on:
            assert all(ctx.step_clocks == {} for ctx in seen)
            continue
        net = opts.network
        clocks = [ctx.step_clocks[ctx.endpoints[0].id] for ctx in seen[1:]]
        for ctx, c in zip(seen[1:], clocks, strict=True):
            assert c.last_token_at <= ctx.now < c.last_token_at + c.step_ms / 1000.0
            assert 7.0 < c.step_ms < 9.0  # one sequence's decode step
            assert c.lag_ms == pytest.approx(net.router_overhead_ms + net.local_ms)
        # the same rhythm seen at three moments: boundaries a whole number of steps apart
        step_s = clocks[0].step_ms / 1000.0
        for c in clocks[1:]:
            k = (c.last_token_at - clocks[0].last_token_at) / step_s
            assert k == pytest.approx(round(k), abs=1e-6)


def test_the_simulated_router_holds_each_prompts_tokens_until_its_first_token() -> None:
    # three long prompts sent at once to one pod, then a short one: the short one's router
    # sees the three ahead with their own 4,000 tokens each (the queue term prices them),
    # and nothing once every first token is back (Endpoint.in_flight_tokens, as the live
    # router keeps it)
    trace = [
        *(
            TraceRequest(arrival_s=0.001 * i, input_tokens=4000, output_tokens=4, index=i)
            for i in range(3)
        ),
        TraceRequest(arrival_s=0.004, input_tokens=64, output_tokens=4, index=3),
        TraceRequest(arrival_s=5.0, input_tokens=64, output_tokens=4, index=4),
    ]
    seen: list[RoutingContext] = []
    route = _recording(seen)

    run, _ = simulate(_pool(min=1, max=1), trace, SimOptions(route=route))
    assert count_outcomes(run.requests)["ok"] == 5
    held = [(c.endpoints[0].in_flight, c.endpoints[0].in_flight_tokens) for c in seen]
    assert held[0] == (0, 0)
    assert held[3] == (3, 12_000)
    assert held[4] == (0, 0)


def _step_days(**predictive: Any) -> tuple[PoolConfig, tuple[tuple[float, float], ...]]:
    """A pool forecasting 60 s ahead over 4-minute days (``predictive`` added to its
    ``autoscaling.predictive``), and six such days of history before t=0, each 2 req/s for
    its first half and 20 for its second."""
    period = 240.0
    spec: dict[str, Any] = {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 4, "desired": 1},
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 500}],
            "predictive": {"enabled": True, "horizon": "60s", "period": "4m", **predictive},
        },
    }
    history = tuple(
        (float(t), 20.0 if (t % period) >= period / 2 else 2.0)
        for t in range(int(-6 * period), 0, 5)
    )
    return pool_config(spec_document("p", spec)), history


def test_a_forecast_history_lets_the_first_evaluations_see_the_rise_it_learned() -> None:
    """``SimOptions.forecast_history`` (``--forecast-history``): the policy's forecast
    starts having learned the days before, with the pool's season
    (``autoscaling.predictive.period``), as a pool's forecast does that its status kept
    across restarts. Days of 2 req/s rising to 20 at the middle: with the history, the
    first evaluations' forecast sees the coming rise; without, it says what it sees."""
    pool, history = _step_days()
    trace = _trace(150, rate=2.0)  # the first 75 s of the next day: the quiet half
    outlooks: dict[bool, list[tuple[float, float]]] = {}
    for learned in (True, False):
        seen: list[tuple[float, float]] = []

        def decide(
            ctx: Context, seen: list[tuple[float, float]] = seen
        ) -> tuple[Decision, PolicyState]:
            decision, state = core_autoscaling.decide(ctx)
            if decision.forecast is not None:
                seen.append((ctx.now, decision.forecast.rate))
            return decision, state

        options = SimOptions(autoscale_interval_s=5.0, autoscale=decide,
                             forecast_history=history if learned else ())  # fmt: skip
        simulate(pool, trace, options)
        outlooks[learned] = seen
    # with the history: by t=60-75 s the forecast 60 s ahead is into the busy half (t >= 120)
    late = [r for t, r in outlooks[True] if 65.0 <= t <= 75.0]
    assert late, outlooks[True]
    assert min(late) > 8.0, outlooks[True]
    # without: no season yet, the forecast follows the 2 req/s it sees
    fresh = [r for t, r in outlooks[False] if 65.0 <= t <= 75.0]
    assert fresh, outlooks[False]
    assert max(fresh) < 5.0, outlooks[False]
    with pytest.raises(SimInputError, match="at or before t=0"):
        SimOptions(forecast_history=((5.0, 1.0),))


def test_a_learned_season_lets_the_pool_shed_what_the_unseen_window_held() -> None:
    """With ``autoscaling.predictive`` on and a season learned (``--forecast-history``), the
    scale-down window's unseen part (the run's start) holds no more than the forecast's
    peak over the window ahead needs (proposal 0019): a pool started at 4 pods in the quiet
    half of 40-minute days sheds within the first minute; without the history, or with
    predictive off, it holds its 4 for the window (proposal 0007)."""
    period = 2400.0
    history = tuple(
        (float(t), 20.0 if (t % period) >= period / 2 else 2.0)
        for t in range(int(-3 * period), 0, 15)
    )
    trace = _trace(150, rate=2.0)  # 75 s of the quiet half
    first_down: dict[tuple[bool, bool], float | None] = {}
    reasons: dict[tuple[bool, bool], str] = {}
    for enabled, learned in ((True, True), (True, False), (False, True)):
        spec: dict[str, Any] = {
            "model": {"name": "m"},
            "engine": {"kind": "sim"},
            "replicas": {"min": 1, "max": 4, "desired": 4},
            "autoscaling": {
                "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 500}],
                "scaleDown": {"maxStep": 4},
                "predictive": {"enabled": enabled, "horizon": "60s", "period": "40m"},
            },
        }
        pool = pool_config(spec_document("p", spec))
        options = SimOptions(autoscale_interval_s=5.0, forecast_history=history if learned else ())
        run, _ = simulate(pool, trace, options)
        downs = [e for e in run.events if e.kind == "scale_down"]
        first_down[enabled, learned] = downs[0].t_s if downs else None
        reasons[enabled, learned] = downs[0].reason if downs else ""
    shed = first_down[True, True]
    assert shed is not None, reasons
    assert shed < 60.0, first_down
    assert "the scale-down window holds no more" in reasons[True, True]
    assert first_down[True, False] is None, reasons  # no season: the window holds
    assert first_down[False, True] is None, reasons  # predictive off: the window holds


def test_cli_forecast_history_is_read_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preheat.cli import main

    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: t}\n"
        "spec: {model: {name: m}, engine: {kind: sim}, replicas: {min: 1, max: 2},\n"
        "  autoscaling: {objectives: [{signal: ttft, percentile: 95, targetMs: 500}]}}\n"
    )
    day = tmp_path / "day.json"
    day.write_text(json.dumps({"rates_rps": [4.0] * 24, "window_s": 10.0}))
    argv = ["simulate", "--pool", str(pool), "--trace", str(_write_trace(tmp_path, 400))]
    flags = [
        "--autoscale-interval-s",
        "5",
        "--no-plots",
        "--set",
        "autoscaling.predictive.period=4m",
    ]
    rc = main([*argv, "--out", str(tmp_path / "run"), "--forecast-history", str(day), *flags])
    out = capsys.readouterr().out
    assert rc == 0
    assert (
        "started from 240 s of history before t=0 (--forecast-history), season period 240 s" in out
    )
    assert "headroom:" not in out  # none set
    keep = ["--set", "autoscaling.predictive.headroom=90"]
    keep += ["--set", "autoscaling.predictive.headroomMode=keep"]
    rc = main(
        [*argv, "--out", str(tmp_path / "kept"), "--forecast-history", str(day), *flags, *keep]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "  headroom: its p90 shortfall read" in out, out
    assert "(pods kept for forecast / (1 - it), none started for it)" in out, out
    rc = main([*argv, "--out", str(tmp_path / "run2"), "--forecast-history", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--forecast-history" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("mode", ["size", "keep"])
def test_a_forecast_history_teaches_the_headroom_from_the_first_evaluation(mode: str) -> None:
    """``autoscaling.predictive.headroom`` with ``--forecast-history``: the history is learned
    with a prediction at the pool's horizon after each window, as at an evaluation, so the
    forecast's shortfall (here: days whose rate jumps 2 -> 20 req/s, which a forecast 60 s
    ahead runs short of) is read from the first evaluation on, and the run's figures say it
    (and what the headroom did: ``headroomMode``)."""
    pool, history = _step_days(headroom=90, headroomMode=mode)
    reads: list[tuple[float, tuple[float, float] | None]] = []

    def decide(ctx: Context) -> tuple[Decision, PolicyState]:
        decision, state = core_autoscaling.decide(ctx)
        if decision.forecast is not None:
            reads.append((ctx.now, decision.forecast.headroom))
        return decision, state

    for learned in (True, False):
        reads.clear()
        options = SimOptions(autoscale_interval_s=5.0, autoscale=decide,
                             forecast_history=history if learned else ())  # fmt: skip
        run, _ = simulate(pool, _trace(150, rate=2.0), options)
        assert reads, run.meta.extra
        first = reads[0][1]
        fc = run.meta.extra["forecast"]
        assert isinstance(fc, dict)
        if learned:
            assert first is not None
            assert first[0] == 90.0
            # what the history alone teaches at the pool's horizon (a jump the season does
            # not place to the minute runs the forecast short), give or take a bucket: the
            # first evaluation also checks the history's last predictions against t=0's rate
            hw = SimOptions().tuning.smoothing(pool.autoscaling.predictive)
            taught = learn(None, history, hw, 60.0)
            assert taught is not None
            want = shortfall(taught, 0.9)
            assert want is not None
            assert want > 0.0
            edge = SHORTFALL_EDGES.index
            assert abs(edge(first[1]) - edge(want)) <= 1, (first, want)
            room = fc["headroom"]
            assert isinstance(room, dict)
            assert room["percentile"] == 90.0
            assert room["mode"] == mode
            assert room["evaluations"] == len(reads)
        else:
            assert first is None  # nothing checked yet: no headroom read
