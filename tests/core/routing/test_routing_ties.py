"""The preheat policy between endpoints it cannot tell apart: the rtt scorer's dead-band,
the queue's wait for the decode step in progress, and ties going to the endpoint picked
least recently. Tables of cases where each must and must not change the pick (cost: 0.1 ms
per new token, ``routingkit.LinearCost``)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from routingkit import COST, make_ctx, make_endpoint, make_request, picked

from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.plugins.queue import queue_wait_ms
from preheat.core.routing.plugins.registry import SCORERS
from preheat.core.routing.scheduler import schedule
from preheat.core.routing.types import Endpoint

CFG = SchedulerConfig()
REQ = make_request(prompt_tokens=1024)


# --- rtt: the dead-band ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("rtts", "band", "expected"),
    [
        # loopback noise: 3 and 8 ms are the same distance
        ((3.0, 8.0), 5.0, (3.0, 3.0)),
        # beyond the band only the excess counts
        ((3.0, 9.5), 5.0, (3.0, 4.5)),
        # a remote region keeps nearly all of its distance
        ((1.0, 81.0), 5.0, (1.0, 76.0)),
        # no band: the RTTs themselves
        ((3.0, 8.0), 0.0, (3.0, 8.0)),
        ((4.0,), 5.0, (4.0,)),
    ],
)
def test_rtt_score_has_a_dead_band(
    rtts: tuple[float, ...], band: float, expected: tuple[float, ...]
) -> None:
    eps = tuple(make_endpoint(f"w-{i}", rtt_ms=r) for i, r in enumerate(rtts))
    cfg = dataclasses.replace(CFG, rtt_deadband_ms=band)
    scored = SCORERS["rtt"].score(ScoreInput(make_ctx(eps, REQ), eps, COST, cfg))
    assert scored == {e.id: pytest.approx(x) for e, x in zip(eps, expected, strict=True)}


def _first(endpoints: list[Endpoint], config: SchedulerConfig = CFG) -> str | None:
    d, _ = schedule(make_ctx(endpoints, REQ), config, COST, SchedulerState())
    return picked(d)


def _pair(near_ms: float, far_ms: float, *, running: int = 0, decoding: int = 0) -> list[Endpoint]:
    """w-near (busier) at ``near_ms``, an idle w-far at ``far_ms``."""
    near = make_endpoint("w-near", rtt_ms=near_ms, running=running, decoding=decoding)
    return [near, make_endpoint("w-far", rtt_ms=far_ms)]


@pytest.mark.parametrize(
    ("endpoints", "band", "expected"),
    [
        # must change the pick: 20 sequences running on the fastest-pinging worker (0.75 ms
        # of weighted queue) outweigh 4 ms of RTT inside the band; without the band they do not
        (_pair(3.0, 7.0, running=20), 5.0, "w-far"),
        (_pair(3.0, 7.0, running=20), 0.0, "w-near"),
        # must not: a remote region (60 ms) does not take a request from a local worker
        # with one request decoding (a weighted 8.7 ms)
        (_pair(1.0, 61.0, decoding=1), 5.0, "w-near"),
        # nor from one 6 ms closer with 20 running: 1 ms beyond the band still counts
        (_pair(3.0, 9.0, running=20), 5.0, "w-near"),
    ],
)
def test_rtt_inside_the_band_does_not_decide(
    endpoints: list[Endpoint], band: float, expected: str
) -> None:
    assert _first(endpoints, dataclasses.replace(CFG, rtt_deadband_ms=band)) == expected


def test_predicted_ttft_keeps_the_measured_rtt() -> None:
    near, far = make_endpoint("w-near", rtt_ms=3.0, decoding=1), make_endpoint("w-far", rtt_ms=7.0)
    d, _ = schedule(make_ctx([near, far], REQ), CFG, COST, SchedulerState())
    assert picked(d) == "w-far"
    assert d.predicted_ttft_ms == pytest.approx(7.0 + 102.4)  # rtt + prefill, idle queue
    assert "rtt 7," in d.explanation


# --- queue: the decode step in progress ------------------------------------------------
PER_SEQ = CFG.decode_seq_ms + CFG.decode_kv_ms_per_token * (1024 + CFG.typical_output_tokens / 2)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        # idle: the prefill starts at once
        (make_endpoint(), 0.0),
        # two of ours decoding: half a decode step (its fixed part and their share)
        (make_endpoint(decoding=2), 0.5 * (CFG.chunk_shared_ms + 2 * PER_SEQ)),
        # the engine's running count (a refresh old) adds its small per-sequence term only
        (make_endpoint(running=10), 10 * 0.05),
        # a prefill of ours ahead: waiting for the step is inside the typical prefill
        (make_endpoint(decoding=2, in_flight=1), 102.4),
        # all slots taken, nothing ahead: the slot wait and the step in progress
        (
            make_endpoint(running=4, decoding=4, max_num_seqs=4),
            50 + 4 * 0.05 + 0.5 * (CFG.chunk_shared_ms + 4 * PER_SEQ),
        ),
    ],
)
def test_queue_waits_for_the_step_in_progress(endpoint: Endpoint, expected: float) -> None:
    assert queue_wait_ms(endpoint, COST, CFG) == pytest.approx(expected)


def test_an_idle_worker_is_preferred_to_a_decoding_one_with_everything_else_equal() -> None:
    # without the decode-interference term, only the step in progress tells them apart
    off = dataclasses.replace(
        CFG, scorers=tuple((n, w) for n, w in CFG.scorers if n != "decode-interference")
    )
    busy, idle = make_endpoint("w-a", decoding=1), make_endpoint("w-b")
    assert _first([busy, idle], off) == "w-b"
    assert _first([idle, busy], off) == "w-b"


# --- ties: the endpoint picked least recently --------------------------------------------
def _sequence(endpoints: list[Endpoint], n: int, config: SchedulerConfig = CFG) -> list[str]:
    state = SchedulerState()
    out: list[str] = []
    for i in range(n):
        ctx = make_ctx(endpoints, make_request(request_id=f"r-{i}"))
        d, state = schedule(ctx, config, COST, state)
        p = picked(d)
        assert p is not None
        out.append(p)
    return out


def test_identical_endpoints_take_turns() -> None:
    eps = [make_endpoint(f"w-{i}") for i in range(3)]
    seq = _sequence(eps, 9)
    assert Counter(seq) == {"w-0": 3, "w-1": 3, "w-2": 3}
    assert seq[3:6] == seq[:3]  # a fixed rotation
    assert seq[6:] == seq[:3]


def test_totals_within_the_margin_are_a_tie() -> None:
    # 0.3 ms apart (< tie_margin_ms 0.5): they take turns; 1 ms apart: the better one, always
    close = [make_endpoint("w-0", rtt_ms=1.0), make_endpoint("w-1", rtt_ms=1.3)]
    nb = dataclasses.replace(CFG, rtt_deadband_ms=0.0)
    assert Counter(_sequence(close, 4, nb)) == {"w-0": 2, "w-1": 2}
    apart = [make_endpoint("w-0", rtt_ms=1.0), make_endpoint("w-1", rtt_ms=2.0)]
    assert _sequence(apart, 4, nb) == ["w-0"] * 4
    # and no margin: only equal totals are tied
    assert _sequence(close, 4, dataclasses.replace(nb, tie_margin_ms=0.0)) == ["w-0"] * 4


def test_a_session_keeps_its_endpoint_whatever_the_turns() -> None:
    eps = [make_endpoint(f"w-{i}") for i in range(3)]
    state = SchedulerState()
    seen = set()
    for i in range(6):
        ctx = make_ctx(eps, make_request(request_id=f"r-{i}", session="alice"))
        d, state = schedule(ctx, CFG, COST, state)
        seen.add(picked(d))
    assert len(seen) == 1


def test_the_turns_record_forgets_endpoints_that_left() -> None:
    state = SchedulerState(decisions=10, last_picked={f"gone-{i}": i for i in range(10)})
    eps = [make_endpoint("w-0"), make_endpoint("w-1")]
    _, state = schedule(make_ctx(eps, REQ), CFG, COST, state)
    assert set(state.last_picked) <= {"w-0", "w-1"}
    assert state.decisions == 11
