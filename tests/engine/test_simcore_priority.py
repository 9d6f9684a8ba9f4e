"""The sim core's ``scheduling_policy="priority"``, as vLLM 0.32's v1 scheduler does it
(``vllm/v1/core/sched/scheduler.py`` and ``request_queue.py``): waiting requests are
admitted by (priority, arrival), lower first; when KV runs out the running request with the
largest (priority, arrival) is preempted, not the newest; a waiting request never preempts
a running one by itself. The default stays FCFS."""

from __future__ import annotations

import argparse

import pytest

from preheat.api.pool import to_config
from preheat.core.manifests import BuildOptions, worker_args
from preheat.engine.base import EngineRequest, Sampling
from preheat.engine.costmodel import CostModel
from preheat.engine.sim import SimConfig
from preheat.engine.simcore import CoreConfig, Emissions, Finish, SimCore, TokenRun
from preheat.worker.engines import sim_options

COST = CostModel.default()


def req(rid: str, prompt: range, max_tokens: int, priority: int) -> EngineRequest:
    return EngineRequest(rid, tuple(prompt), Sampling(max_tokens=max_tokens), priority=priority)


def run_all(core: SimCore) -> Emissions:
    runs: list[TokenRun] = []
    fins: list[Finish] = []
    while (t := core.next_event_time()) is not None:
        em = core.advance(t)
        runs += em.runs
        fins += em.finishes
    return Emissions(tuple(runs), tuple(fins))


def fin(em: Emissions, rid: str) -> Finish:
    return next(f for f in em.finishes if f.request_id == rid)


def first_token(em: Emissions, rid: str) -> float:
    return min(r.t_first for r in em.runs if r.request_id == rid)


@pytest.mark.parametrize(("policy", "first"), [("priority", "hi"), ("fcfs", "lo-2")])
def test_waiting_requests_are_admitted_by_priority_then_arrival(policy: str, first: str) -> None:
    core = SimCore(CoreConfig(max_num_seqs=1, scheduling_policy=policy), COST)
    core.add(req("lo-1", range(0, 64), 20, priority=2), 0.0)
    core.add(req("lo-2", range(100, 164), 20, priority=2), 0.001)
    core.add(req("hi", range(200, 264), 20, priority=0), 0.002)
    em = run_all(core)
    second = "lo-2" if first == "hi" else "hi"
    assert first_token(em, "lo-1") < first_token(em, first) < first_token(em, second)


def test_a_waiting_high_priority_request_does_not_preempt_a_running_one() -> None:
    # vLLM admits waiting requests only into free slots, budget and KV: the running
    # low-priority request keeps its slot until it finishes
    core = SimCore(CoreConfig(max_num_seqs=1, scheduling_policy="priority"), COST)
    core.add(req("lo", range(0, 64), 50, priority=2), 0.0)
    core.add(req("hi", range(100, 164), 5, priority=0), 0.01)
    em = run_all(core)
    assert fin(em, "lo").num_preemptions == 0
    assert first_token(em, "hi") > fin(em, "lo").time - 1e-9


@pytest.mark.parametrize(
    ("policy", "victim", "kept"),
    [("priority", "old-batch", "new-chat"), ("fcfs", "new-chat", "old-batch")],
)
def test_out_of_kv_the_lowest_priority_running_request_is_preempted(
    policy: str, victim: str, kept: str
) -> None:
    core = SimCore(CoreConfig(num_gpu_blocks=10, scheduling_policy=policy), COST)
    core.add(req("old-batch", range(48), 60, priority=2), 0.0)
    core.add(req("new-chat", range(100, 148), 60, priority=0), 0.0)  # 2 x 7 blocks > 10
    em = run_all(core)
    assert fin(em, victim).num_preemptions >= 1
    assert fin(em, kept).num_preemptions == 0
    for rid in ("old-batch", "new-chat"):  # everyone still finishes, whole
        assert fin(em, rid).usage.completion_tokens == 60
    assert core.kv_cache_usage == 0.0


def test_equal_arrival_times_keep_the_order_received() -> None:
    """vLLM stamps each request's arrival as it comes in, so two never tie and its
    request-id tie-break is not reached in practice; requests given here at one instant
    (a trace's same-second rows) go in the order added, not by request id: with equal
    priorities the priority policy then admits and preempts exactly as FCFS does."""
    core = SimCore(CoreConfig(max_num_seqs=1, scheduling_policy="priority"), COST)
    for rid in ("z", "m", "a"):  # received in this order, at one instant
        core.add(req(rid, range(ord(rid) * 100, ord(rid) * 100 + 64), 10, priority=1), 0.0)
    em = run_all(core)
    assert first_token(em, "z") < first_token(em, "m") < first_token(em, "a")
    outcomes = {}
    for policy in ("priority", "fcfs"):
        core = SimCore(CoreConfig(num_gpu_blocks=10, scheduling_policy=policy), COST)
        core.add(req("b-old", range(48), 60, priority=0), 0.0)
        core.add(req("a-new", range(100, 148), 60, priority=0), 0.0)  # 2 x 7 blocks > 10
        em = run_all(core)
        outcomes[policy] = {f.request_id: f.num_preemptions for f in em.finishes}
    assert outcomes["priority"] == outcomes["fcfs"]
    assert outcomes["fcfs"]["a-new"] >= 1
    assert outcomes["fcfs"]["b-old"] == 0


def test_fcfs_is_the_default_and_a_bad_policy_is_refused() -> None:
    assert CoreConfig().scheduling_policy == "fcfs"
    with pytest.raises(ValueError, match="scheduling_policy must be one of fcfs, priority"):
        CoreConfig(scheduling_policy="lifo")


def test_a_replica_that_could_never_run_a_request_is_refused_with_every_reason() -> None:
    # a token budget of 0 spun the scheduler forever; 0 KV blocks divided by zero
    with pytest.raises(ValueError, match=r"^num_gpu_blocks must be >= 1") as e:
        CoreConfig(num_gpu_blocks=0, max_num_batched_tokens=0, eos_probability=-0.1)
    assert str(e.value) == (
        "num_gpu_blocks must be >= 1, got 0; max_num_batched_tokens must be >= 1, got 0; "
        "eos_probability must be within [0, 1], got -0.1"
    )
    # 10**12 blocks was a MemoryError, 10**9 took 8 GB; ids past 32 bits overflowed the hash
    with pytest.raises(ValueError, match=r"^num_gpu_blocks must be <= 10,000,000") as e:
        CoreConfig(num_gpu_blocks=10**9, vocab_size=2**40)
    assert "vocab_size must be <= 4,294,967,296 (token ids are 32-bit)" in str(e.value)


def test_abort_of_a_waiting_request_under_priority() -> None:
    core = SimCore(CoreConfig(max_num_seqs=1, scheduling_policy="priority"), COST)
    core.add(req("a", range(0, 64), 10, priority=1), 0.0)
    core.add(req("b", range(100, 164), 10, priority=0), 0.001)
    core.add(req("c", range(200, 264), 10, priority=2), 0.002)
    out = core.abort("b", 0.003)
    assert [f.request_id for f in out.finishes] == ["b"]
    assert core.num_waiting == 1
    em = run_all(core)
    assert {f.request_id for f in em.finishes} == {"a", "c"}


def test_a_sim_pool_with_classes_runs_its_workers_with_the_priority_policy() -> None:
    spec = {"model": {"name": "m"}, "engine": {"kind": "sim"}, "replicas": {"max": 1}}
    plain = worker_args(to_config(spec, name="p", namespace=""), BuildOptions())
    assert "scheduling_policy=priority" not in plain  # no classes: FCFS, as before
    classes = {"classes": [{"name": "chat", "ttftMs": 500, "priority": 0}]}
    argv = worker_args(
        to_config({**spec, "traffic": classes}, name="p", namespace=""), BuildOptions()
    )
    i = argv.index("--sim-opt")
    assert argv[i + 1] == "scheduling_policy=priority"
    opts = sim_options(argparse.Namespace(sim_opt=[argv[i + 1]]))
    assert SimConfig.from_options(opts).core_config().scheduling_policy == "priority"


@pytest.mark.parametrize("policy", ["priority", "fcfs"])
def test_waiting_requests_are_counted_by_priority(policy: str) -> None:
    """What the sim worker reports in ``WorkerStatus.waiting_by_priority`` (the router's
    priority-aware queue term): the waiting ones only, by the priority they were sent at."""
    core = SimCore(CoreConfig(max_num_seqs=1, scheduling_policy=policy), COST)
    core.add(req("run", range(0, 64), 20, priority=2), 0.0)
    core.advance(0.0)
    for i, p in enumerate((2, 2, 0, 1, 2)):
        core.add(req(f"w{i}", range(100 * (i + 1), 100 * (i + 1) + 64), 20, priority=p), 0.001)
    assert core.num_running == 1
    assert core.waiting_by_priority() == {0: 1, 1: 1, 2: 3}
    run_all(core)
    assert core.waiting_by_priority() == {}
