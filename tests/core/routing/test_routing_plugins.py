"""Table tests of each routing plugin, from literal endpoints (cost: 0.1 ms per new token)."""

from __future__ import annotations

import pytest
from routingkit import COST, NOW, make_ctx, make_endpoint, make_request

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.hashing import hash64, load_capacity, rendezvous
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.plugins.kv_pressure import kv_pressure_ms
from preheat.core.routing.plugins.prefix import cached_blocks, prefill_ms
from preheat.core.routing.plugins.queue import queue_wait_ms
from preheat.core.routing.plugins.registry import FILTERS, SCORERS
from preheat.core.routing.plugins.rtt import rtt_ms
from preheat.core.routing.types import Endpoint

CFG = SchedulerConfig()
TYPICAL = 102.4  # COST.prefill_ms(1024)


# --- queue -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        (make_endpoint(), 0.0),
        (make_endpoint(running=10), 10 * 0.05),
        (make_endpoint(queue=1), TYPICAL),
        # our in-flight request is among the engine's waiting ones: counted once
        (make_endpoint(queue=2, in_flight=1), 2 * TYPICAL),
        # the engine's count lags (a fresh request of ours not in it yet)
        (make_endpoint(queue=0, in_flight=3), 3 * TYPICAL),
        # a faster engine than the cost model: its observed TTFT is the per-request cost
        (make_endpoint(queue=2, observed_ttft_ms=40.0), 80.0),
        # a slower observed TTFT (it includes queueing) does not multiply the queue again
        (make_endpoint(queue=2, observed_ttft_ms=1e5), 2 * TYPICAL),
        # 4 slots, 3 running + 2 waiting: we are request 6, two beyond the slots
        (make_endpoint(queue=2, running=3, max_num_seqs=4), 2 * TYPICAL + 2 * 50 + 3 * 0.05),
        # all slots taken, nothing waiting: wait for one slot
        (make_endpoint(running=4, max_num_seqs=4), 50 + 4 * 0.05),
        # this router's requests ahead cost their own prompts' prefill (3 of 4,096 tokens
        # each), not the typical prompt's
        (make_endpoint(in_flight=3, in_flight_tokens=3 * 4096), 3 * 409.6),
        (make_endpoint(in_flight=2, in_flight_tokens=200), 2 * 10.0),
        # ... at the engine's speed as its observed TTFT says (40 of the typical 102.4 ms)
        (
            make_endpoint(in_flight=2, in_flight_tokens=2 * 2048, observed_ttft_ms=40.0),
            2 * 204.8 * 40.0 / TYPICAL,
        ),
        # the engine's count prices at the typical prompt where it is the larger queue
        (make_endpoint(queue=5, in_flight=1, in_flight_tokens=4096), 5 * TYPICAL),
        (make_endpoint(queue=2, in_flight=2, in_flight_tokens=2 * 4096), 2 * 409.6),
    ],
)
def test_queue_wait(endpoint: Endpoint, expected: float) -> None:
    assert queue_wait_ms(endpoint, COST, CFG) == pytest.approx(expected)


# --- prefix ----------------------------------------------------------------------------
REQ = make_request(prompt_tokens=1024)  # blocks 1..64


@pytest.mark.parametrize(
    ("endpoint", "history", "blocks", "ms"),
    [
        (make_endpoint(), {}, 0, 102.4),
        (make_endpoint(cached_blocks=range(1, 33)), {}, 32, 51.2),
        # a gap: only the leading run counts
        (make_endpoint(cached_blocks=[1, 2, 3, 5, 6]), {}, 3, (1024 - 48) * 0.1),
        # not the first block: nothing
        (make_endpoint(cached_blocks=range(2, 65)), {}, 0, 102.4),
        # the whole prompt: one token is still computed
        (make_endpoint(cached_blocks=range(1, 100)), {}, 64, 0.1),
        # approximate, from history, when the endpoint publishes no cache
        (make_endpoint(), {"w-0": 16}, 16, (1024 - 256) * 0.1),
        # precise wins over history
        (make_endpoint(cached_blocks=[]), {"w-0": 16}, 0, 102.4),
        # history longer than the prompt is capped
        (make_endpoint(), {"w-0": 500}, 64, 0.1),
    ],
)
def test_prefix(endpoint: Endpoint, history: dict[str, int], blocks: int, ms: float) -> None:
    ctx = make_ctx([endpoint], REQ, history=history)
    assert cached_blocks(endpoint, ctx) == blocks
    assert prefill_ms(endpoint, ctx, COST) == pytest.approx(ms)


# --- rtt -------------------------------------------------------------------------------
TABLE = {"eu": {"us": 80.0, "eu": 0.5}}


@pytest.mark.parametrize(
    ("endpoint", "client_region", "client_zone", "expected"),
    [
        (make_endpoint(rtt_ms=3.5, region="us"), "eu", "", 3.5),  # measured wins
        (make_endpoint(region="us"), "eu", "", 80.0),  # table
        (make_endpoint(region="eu"), "us", "", 80.0),  # table, other direction
        (make_endpoint(region="eu"), "eu", "", 0.5),  # table, same region
        (make_endpoint(region="ap"), "eu", "", 60.0),  # pair missing: remote constant
        (make_endpoint(region="us", zone="a"), "us", "b", 2.0),  # cross-zone
        (make_endpoint(region="us", zone="a"), "us", "a", 1.0),  # same zone
        (make_endpoint(), "eu", "", 1.0),  # endpoint region unknown
        (make_endpoint(region="us"), "", "", 1.0),  # client region unknown
    ],
)
def test_rtt(endpoint: Endpoint, client_region: str, client_zone: str, expected: float) -> None:
    req = make_request(region=client_region, zone=client_zone)
    ctx = make_ctx([endpoint], req, region_rtt_ms=TABLE)
    assert rtt_ms(endpoint, ctx, CFG) == pytest.approx(expected)


# --- kv-pressure -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kv", "expected"),
    [(0.0, 0.0), (0.5, 0.0), (0.8, 0.0), (0.9, 125.0), (1.0, 500.0), (1.7, 500.0), (-1.0, 0.0)],
)
def test_kv_pressure(kv: float, expected: float) -> None:
    assert kv_pressure_ms(make_endpoint(kv=kv), CFG) == pytest.approx(expected)


# --- session ---------------------------------------------------------------------------
def test_hash64_is_stable_across_processes() -> None:
    # a literal: every router replica (and every Python run, unlike hash()) agrees
    assert hash64("session-1", "w-0") == hash64("session-1", "w-0")
    assert hash64("a") == 0x8942D57D484404F9
    assert hash64("ab", "c") != hash64("a", "bc")


THREE = [make_endpoint("w-0"), make_endpoint("w-1"), make_endpoint("w-2")]


def test_session_scorer_gives_the_bound_endpoint_the_margin_as_bonus() -> None:
    ctx = make_ctx(THREE, make_request(session="alice"))
    scores = SCORERS["session"].score(ScoreInput(ctx, ctx.endpoints, COST, CFG))
    bound = rendezvous("alice", THREE, 1.25)
    assert bound is not None
    assert scores == {e.id: (-150.0 if e.id == bound.id else 0.0) for e in THREE}


def test_session_scorer_is_zero_without_a_session() -> None:
    ctx = make_ctx(THREE, make_request())
    scores = SCORERS["session"].score(ScoreInput(ctx, ctx.endpoints, COST, CFG))
    assert set(scores.values()) == {0.0}


def test_rendezvous_spreads_sessions_and_moves_few_on_removal() -> None:
    sessions = [f"s-{i}" for i in range(300)]
    before = {s: rendezvous(s, THREE, 1.25) for s in sessions}
    counts = {e.id: sum(1 for b in before.values() if b == e) for e in THREE}
    assert min(counts.values()) > 60  # roughly even
    after = {s: rendezvous(s, THREE[:2], 1.25) for s in sessions}
    moved = [s for s in sessions if before[s] != after[s]]
    assert all(before[s] == THREE[2] for s in moved)  # only w-2's sessions moved


@pytest.mark.parametrize(
    ("loads", "floor", "capacity"),
    [((0, 0, 0), 1, 1), ((1, 0, 0), 1, 1), ((1, 0, 0), 4, 4), ((40, 0, 0), 4, 18)],
)
def test_load_capacity(loads: tuple[int, ...], floor: int, capacity: int) -> None:
    eps = [make_endpoint(f"w-{i}", running=n) for i, n in enumerate(loads)]
    assert load_capacity(eps, 1.25, floor) == capacity


def test_rendezvous_skips_an_endpoint_over_the_load_bound() -> None:
    bound = rendezvous("alice", THREE, 1.25, 4)
    assert bound is not None
    hot = [make_endpoint(e.id, running=40 if e.id == bound.id else 0) for e in THREE]
    moved = rendezvous("alice", hot, 1.25, 4)
    assert moved is not None
    assert moved.id != bound.id


# --- filters ---------------------------------------------------------------------------
def test_same_pool_filter() -> None:
    eps = (make_endpoint("a", pool="p"), make_endpoint("b", pool="q"))
    ctx = make_ctx(eps)
    f = FILTERS["same-pool"]
    assert f.filter(ScoreInput(ctx, eps, COST, CFG)) == eps
    assert f.filter(ScoreInput(ctx, eps, COST, SchedulerConfig(pool="q"))) == (eps[1],)


@pytest.mark.parametrize(
    ("ages", "kept"),
    [
        ((0.0, 4.9), ("a", "b")),
        ((0.0, 5.1), ("a",)),
        ((0.0, None), ("a",)),  # never refreshed counts as stale
        ((9.0, None), ("a", "b")),  # all stale: all kept (the scheduler penalises them)
    ],
)
def test_fresh_filter(ages: tuple[float | None, ...], kept: tuple[str, ...]) -> None:
    eps = tuple(make_endpoint(n, age_s=a) for n, a in zip("ab", ages, strict=True))
    ctx = make_ctx(eps, now=NOW)
    out = FILTERS["fresh"].filter(ScoreInput(ctx, eps, COST, CFG))
    assert tuple(e.id for e in out) == kept
