"""The sim core with injected time: calibration, prefix cache, batching, KV, determinism."""

from __future__ import annotations

import itertools
import math

import pytest

from preheat.engine.base import CacheEvent, CacheEventKind, EngineRequest, FinishReason, Sampling
from preheat.engine.costmodel import (
    PACKAGED_LEVERS,
    PACKAGED_MIXED,
    CostModel,
    load_calibration,
)
from preheat.engine.simcore import CoreConfig, Emissions, Finish, SimCore, TokenRun

CAL = load_calibration()
LEVERS = load_calibration(packaged=PACKAGED_LEVERS)
MIXED = load_calibration(packaged=PACKAGED_MIXED)
COST = CostModel.default()


def req(
    rid: str, prompt: list[int] | range, max_tokens: int = 1, seed: int | None = None
) -> EngineRequest:
    return EngineRequest(rid, tuple(prompt), Sampling(max_tokens=max_tokens, seed=seed))


def run_all(core: SimCore) -> Emissions:
    """Advance event by event until idle; everything emitted."""
    runs: list[TokenRun] = []
    fins: list[Finish] = []
    while (t := core.next_event_time()) is not None:
        em = core.advance(t)
        runs += em.runs
        fins += em.finishes
    return Emissions(tuple(runs), tuple(fins))


def finish_of(em: Emissions, rid: str) -> Finish:
    return next(f for f in em.finishes if f.request_id == rid)


def token_times(em: Emissions, rid: str) -> list[float]:
    return [
        r.t_first + j * r.dt
        for r in em.runs
        if r.request_id == rid
        for j in range(len(r.token_ids))
    ]


# --- acceptance: the core's prefill and decode times hold to the calibration table -------


# Prefills: a chunk alone in its step (mixed_step_h100.json, batch 0, graph-replayed) and the
# older file's compute-bound prefills (>= 2,048 tokens); decode steps: the graph-replayed
# bf16 rows (levers_h100.json part 1, mixed_step_h100.json "decode vs context") whose KV
# fits the default cache and context length. docs/proposals/0012 says why the older file's
# shorter prefills (eager, launch-bound) and decode steps (RoPE per layer) are no longer
# the model.
PREFILLS = [(r["chunk"], r["chunk_cached"], r["ms"]) for r in MIXED["mixed"] if r["batch"] == 0] + [
    (p["new"], p["cached"], p["ms"])
    for p in CAL["prefill"]
    if p["cached"] == 0 and p["new"] >= 2048
]
DECODES = [
    (r["batch"], r["context"], r["ms"]) for r in LEVERS["fp8"]["decode"] if r["mode"] == "bf16"
] + [
    (r["batch"], r["context"], r["ms"])
    for r in MIXED["context"]
    if "ms" in r
    and r["batch"] * (r["context"] + 64) <= CoreConfig().num_gpu_blocks * 16
    and r["context"] + 64 <= CoreConfig().max_model_len
]


@pytest.mark.parametrize(("new", "cached", "ms"), PREFILLS)
def test_core_prefill_time_matches_calibration(new: int, cached: int, ms: float) -> None:
    core = SimCore(CoreConfig(), COST)
    prefix = list(range(cached))
    if cached:  # build the cache by running the C-token prefix first
        core.add(req("prefix", prefix), 0.0)
        run_all(core)
    core.add(req("r", prefix + list(range(10**6, 10**6 + new))), 100.0)
    fin = finish_of(run_all(core), "r")
    assert fin.usage.cached_tokens == cached
    ttft_minus_queue = fin.timing.ttft_s - fin.timing.queue_s
    assert ttft_minus_queue * 1000 == pytest.approx(ms, rel=0.10)


@pytest.mark.parametrize(("batch", "context", "ms"), DECODES)
def test_core_decode_step_matches_calibration(batch: int, context: int, ms: float) -> None:
    core = SimCore(CoreConfig(), COST)  # the default config, decode stretches included
    for i in range(batch):
        core.add(req(f"r{i}", range(i * 10**5, i * 10**5 + context), max_tokens=48), 0.0)
    em = run_all(core)
    all_first = max(token_times(em, f"r{i}")[0] for i in range(batch))
    times = token_times(em, "r0")
    step = next(b - a for a, b in itertools.pairwise(times) if a >= all_first)
    assert step * 1000 == pytest.approx(ms, rel=0.10)


# --- prefix cache -------------------------------------------------------------------------


def test_same_4k_prompt_twice_prefills_only_the_uncached_remainder() -> None:
    core = SimCore(CoreConfig(), COST)
    prompt = list(range(4096))
    core.add(req("a", prompt), 0.0)
    first = finish_of(run_all(core), "a")
    q0, h0 = core.counters.prefix_cache_queries, core.counters.prefix_cache_hits
    core.add(req("b", prompt), 10.0)
    second = finish_of(run_all(core), "b")
    # vLLM computes at least the last prompt token, so the hit stops a block short.
    cached = (4096 - 1) // 16 * 16
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == cached == 4080
    assert first.timing.prefill_s == pytest.approx(COST.prefill_ms(4096, 0) / 1000)
    assert second.timing.prefill_s == pytest.approx(COST.prefill_ms(4096 - cached, cached) / 1000)
    assert core.counters.prefix_cache_queries - q0 == 4096
    assert core.counters.prefix_cache_hits - h0 == cached


def test_cache_events_name_blocks_by_chained_hash() -> None:
    from preheat.core.blocks import block_hashes

    events: list[CacheEvent] = []
    core = SimCore(CoreConfig(), COST, events.append)
    core.add(req("a", range(100)), 0.0)
    run_all(core)
    stored = {h for e in events if e.kind is CacheEventKind.STORED for h in e.block_hashes}
    assert stored == set(block_hashes(list(range(100)), 16))
    assert core.cached_blocks() == stored


def test_lru_eviction_drops_the_least_recently_used_unreferenced_blocks() -> None:
    events: list[CacheEvent] = []
    core = SimCore(CoreConfig(num_gpu_blocks=8), COST, events.append)
    prompts = {n: list(range(k * 1000, k * 1000 + 64)) for k, n in enumerate("ABC")}
    core.add(req("A", prompts["A"]), 0.0)
    run_all(core)
    core.add(req("B", prompts["B"]), 1.0)
    run_all(core)
    a_blocks = {h for e in events for h in e.block_hashes if e.kind is CacheEventKind.STORED}
    assert len(core.cached_blocks()) == 8  # 4 of A + 4 of B, all unreferenced
    core.add(req("C", prompts["C"]), 2.0)  # needs 4 blocks: A's are the oldest
    run_all(core)
    removed = {h for e in events if e.kind is CacheEventKind.REMOVED for h in e.block_hashes}
    from preheat.core.blocks import block_hashes

    a_hashes = set(block_hashes(prompts["A"], 16))
    b_hashes = set(block_hashes(prompts["B"], 16))
    assert removed == a_hashes
    assert b_hashes <= core.cached_blocks()
    assert not a_hashes & core.cached_blocks()
    assert a_blocks >= a_hashes
    # B still hits (3 blocks: the last prompt token is always computed); A does not.
    core.add(req("B2", prompts["B"]), 3.0)
    assert finish_of(run_all(core), "B2").usage.cached_tokens == 48
    core.add(req("A2", prompts["A"]), 4.0)
    assert finish_of(run_all(core), "A2").usage.cached_tokens == 0


# --- batching -------------------------------------------------------------------------------


def test_max_num_seqs_bounds_the_running_batch() -> None:
    core = SimCore(CoreConfig(max_num_seqs=2), COST)
    for i in range(5):
        core.add(req(f"r{i}", range(i * 100, i * 100 + 32), max_tokens=10), 0.0)
    core.next_token_time()  # plans the first iteration
    assert (core.num_running, core.num_waiting) == (2, 3)
    em = run_all(core)
    assert len(em.finishes) == 5
    # Later requests queue until earlier ones finish.
    assert finish_of(em, "r4").timing.queue_s > finish_of(em, "r1").timing.e2e_s * 0.99


def test_chunked_prefill_splits_a_long_prompt_over_the_token_budget() -> None:
    core = SimCore(CoreConfig(max_num_batched_tokens=256), COST)
    core.add(req("long", range(1000)), 0.0)
    fin = finish_of(run_all(core), "long")
    chunks = [(256, 0), (256, 256), (256, 512), (232, 768)]
    expect = sum(COST.step_ms([c], 0, 0) for c in chunks) / 1000
    assert fin.timing.prefill_s == pytest.approx(expect)


def test_token_budget_is_shared_by_prefills_in_one_iteration() -> None:
    core = SimCore(CoreConfig(max_num_batched_tokens=100), COST)
    core.add(req("a", range(80)), 0.0)
    core.add(req("b", range(1000, 1080)), 0.0)
    em = run_all(core)
    step1 = COST.step_ms([(80, 0), (20, 0)], 0, 0) / 1000
    assert finish_of(em, "a").timing.ttft_s == pytest.approx(step1)
    # b's second chunk starts at 20 computed tokens: cached-context term uses 20.
    step2 = COST.step_ms([(60, 20)], 0, 0) / 1000
    assert finish_of(em, "b").timing.ttft_s == pytest.approx(step1 + step2)


def test_decode_stretch_token_times_are_arithmetic_and_advance_is_partial() -> None:
    core = SimCore(CoreConfig(), COST)
    core.add(req("a", range(512), max_tokens=20), 0.0)
    ttft = COST.prefill_ms(512) / 1000
    dt = COST.decode_step_ms(1, 513) / 1000
    em = core.advance(ttft + 5.5 * dt)  # the middle of a decode stretch
    times = token_times(em, "a")
    assert len(times) == 6  # first token + 5 decode steps
    assert times[0] == pytest.approx(ttft)
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([dt] * 5, rel=0.01)
    rest = run_all(core)
    assert len(token_times(rest, "a")) == 14


def test_an_arrival_inside_a_stretch_replans_from_the_next_step_boundary() -> None:
    core = SimCore(CoreConfig(), COST)
    core.add(req("a", range(512), max_tokens=200), 0.0)
    ttft = COST.prefill_ms(512) / 1000
    dt = COST.decode_step_ms(1, 513) / 1000
    t_arrival = ttft + 3.4 * dt
    core.add(req("b", range(5000, 5100)), t_arrival)
    fin_b = finish_of(run_all(core), "b")
    # b waits only for the step in progress to end (0.6 dt), then prefills with a's decode.
    assert fin_b.timing.queue_s == pytest.approx(0.6 * dt, rel=0.05)
    assert fin_b.timing.prefill_s == pytest.approx(COST.step_ms([(100, 0)], 1, 517) / 1000)


# --- KV pressure, abort ---------------------------------------------------------------------


def test_preemption_when_kv_runs_out_and_everyone_still_finishes() -> None:
    core = SimCore(CoreConfig(num_gpu_blocks=10), COST)
    core.add(req("old", range(48), max_tokens=60), 0.0)
    core.add(req("new", range(100, 148), max_tokens=60), 0.0)  # 2 x 7 blocks > 10
    em = run_all(core)
    assert core.counters.num_preemptions >= 1
    assert finish_of(em, "new").num_preemptions >= 1  # the newest is preempted
    assert finish_of(em, "old").num_preemptions == 0
    for rid in ("old", "new"):
        assert finish_of(em, rid).usage.completion_tokens == 60
        assert len(token_times(em, rid)) == 60
    assert core.kv_cache_usage == 0.0


def test_abort_frees_the_sequence_and_its_blocks() -> None:
    core = SimCore(CoreConfig(), COST)
    core.add(req("a", range(300), max_tokens=1000), 0.0)
    core.advance(1.0)
    assert core.blocks_of("a") > 0
    assert core.kv_cache_usage > 0
    em = core.abort("a", 1.0)
    fin = finish_of(em, "a")
    assert fin.reason is FinishReason.ABORT
    assert not core.has_request("a")
    assert core.kv_cache_usage == 0.0
    assert core.next_event_time() is None
    assert core.abort("a", 2.0) == Emissions((), ())  # unknown now: a no-op


def test_abort_of_a_waiting_request() -> None:
    core = SimCore(CoreConfig(max_num_seqs=1), COST)
    core.add(req("a", range(32), max_tokens=50), 0.0)
    core.add(req("b", range(100, 132), max_tokens=50), 0.0)
    core.next_token_time()
    assert core.num_waiting == 1
    core.abort("b", 0.001)
    assert core.num_waiting == 0
    em = run_all(core)
    assert [f.request_id for f in em.finishes] == ["a"]


def test_rejects_what_can_never_run() -> None:
    from preheat.core.errors import ErrorCode, PreheatError

    core = SimCore(CoreConfig(max_model_len=100, num_gpu_blocks=4), COST)
    with pytest.raises(PreheatError) as e:
        core.add(req("a", range(90), max_tokens=20), 0.0)
    assert e.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(PreheatError):
        core.add(req("b", range(70), max_tokens=1), 0.0)  # 5 blocks > 4


# --- determinism ------------------------------------------------------------------------------


def workload(seed: int) -> Emissions:
    core = SimCore(CoreConfig(seed=seed, num_gpu_blocks=64, max_num_seqs=4), COST)
    runs: list[TokenRun] = []
    fins: list[Finish] = []
    for i in range(12):
        em = core.add(req(f"r{i}", range(i % 3 * 50, i % 3 * 50 + 40 + i), max_tokens=30), i * 0.05)
        runs += em.runs
        fins += em.finishes
    em = run_all(core)
    return Emissions((*runs, *em.runs), (*fins, *em.finishes))


def test_same_seed_gives_identical_emissions() -> None:
    a, b = workload(1), workload(1)
    assert a == b
    assert len(a.finishes) == 12
    c = workload(2)
    assert [r.token_ids for r in a.runs] != [r.token_ids for r in c.runs]
    assert [f.timing for f in a.finishes] == [f.timing for f in c.finishes]


def test_sampling_seed_fixes_the_tokens_whatever_the_engine_seed() -> None:
    def tokens(engine_seed: int) -> tuple[int, ...]:
        core = SimCore(CoreConfig(seed=engine_seed), COST)
        core.add(req("x", range(20), max_tokens=8, seed=42), 0.0)
        return tuple(t for r in run_all(core).runs for t in r.token_ids)

    assert tokens(1) == tokens(2)


def test_eos_probability_stops_some_requests_early() -> None:
    core = SimCore(CoreConfig(eos_probability=0.2), COST)
    for i in range(20):
        core.add(req(f"r{i}", range(i * 100, i * 100 + 20), max_tokens=50), 0.0)
    em = run_all(core)
    reasons = {f.reason for f in em.finishes}
    assert FinishReason.STOP in reasons
    for f in em.finishes:
        n = f.usage.completion_tokens
        assert (n < 50) == (f.reason is FinishReason.STOP)
    assert math.isclose(core.kv_cache_usage, 0.0)


@pytest.mark.parametrize("scenario", range(25))
def test_random_workloads_finish_everything_and_free_all_blocks(scenario: int) -> None:
    """Under KV pressure, chunking, shared prefixes and aborts: no stall, no leak."""
    import random

    rng = random.Random(scenario)
    cfg = CoreConfig(
        num_gpu_blocks=rng.choice([12, 20, 40, 200]),
        max_num_seqs=rng.choice([1, 2, 4, 16]),
        max_num_batched_tokens=rng.choice([32, 64, 512]),
        max_model_len=4096,
        block_size=rng.choice([4, 16]),
    )
    core = SimCore(cfg, COST)
    t = 0.0
    want: dict[str, int] = {}
    aborted: set[str] = set()
    fins: list[Finish] = []
    runs: list[TokenRun] = []
    for i in range(30):
        t += rng.expovariate(20.0)
        cap = cfg.num_gpu_blocks * cfg.block_size  # KV capacity in tokens
        max_tok = rng.randint(1, min(40, cap // 4))
        n = rng.randint(1, cap // 2 - max_tok)
        base = rng.choice([0, 0, 10**6 * i])  # many share a prefix
        em = core.add(req(f"r{i}", range(base, base + n), max_tokens=max_tok), t)
        fins += em.finishes
        runs += em.runs
        want[f"r{i}"] = max_tok
        if rng.random() < 0.15:
            victim = f"r{rng.randrange(i + 1)}"
            em = core.abort(victim, t)
            fins += em.finishes
            runs += em.runs
            aborted |= {f.request_id for f in em.finishes if f.reason is FinishReason.ABORT}
    em = run_all(core)
    fins += em.finishes
    runs += em.runs
    assert {f.request_id for f in fins} == set(want)
    for f in fins:
        got = sum(len(r.token_ids) for r in runs if r.request_id == f.request_id)
        assert got == f.usage.completion_tokens
        if f.request_id not in aborted:
            assert f.reason is FinishReason.LENGTH
            assert got == want[f.request_id]
    assert core.kv_cache_usage == 0.0
    assert (core.num_running, core.num_waiting) == (0, 0)
    assert len(core.cached_blocks()) <= cfg.num_gpu_blocks


def test_step_rhythm_gives_the_last_step_boundary_and_the_step_in_progress() -> None:
    core = SimCore(CoreConfig(), COST)
    assert core.step_rhythm(0.0) is None  # idle: no step in progress
    core.add(req("a", range(64), max_tokens=50), 0.0)
    run_all_until = core.next_event_time()  # the prefill step's end: the first token
    assert run_all_until is not None
    em = core.advance(run_all_until)
    first = token_times(em, "a")[0]
    assert core.step_rhythm(first) is None  # not planned yet: a driver asks for the next
    assert core.next_event_time() is not None  # event after each change, which plans it
    rhythm = core.step_rhythm(first + 0.0001)
    assert rhythm is not None
    end, dt = rhythm
    assert end == pytest.approx(first)
    assert dt == pytest.approx(COST.decode_step_ms(1, 65) / 1000.0, rel=0.05)
    # two and a half steps later: the boundary two steps on, the same step (nothing changed)
    later = core.step_rhythm(first + 2.5 * dt)
    assert later is not None
    assert later[0] == pytest.approx(first + 2 * dt)
    assert later[1] == pytest.approx(dt)
    # asking plans and commits nothing: the tokens still come at the same times
    em2 = core.advance(first + 5 * dt + 1e-9)
    assert token_times(em2, "a")[0] == pytest.approx(first + dt)
