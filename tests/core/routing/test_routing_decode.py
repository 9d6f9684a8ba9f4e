"""The ``decode-interference`` scorer: a table from literal endpoints, and the scheduler
moving a request off a busy endpoint when its neighbours' cost outweighs the cache win (and
not when it does not). Cost: 0.1 ms per new token (``routingkit.LinearCost``)."""

from __future__ import annotations

import dataclasses

import pytest
from routingkit import COST, make_ctx, make_endpoint, make_request, picked

from preheat.api.routing import load_routing_config
from preheat.core.errors import PreheatError
from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import DEFAULT_SCORERS, SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.plugins.decode import interference_ms, neighbours
from preheat.core.routing.plugins.registry import SCORERS
from preheat.core.routing.scheduler import predict_ttft_ms, schedule
from preheat.core.routing.types import Endpoint, RequestInfo
from preheat.engine.costmodel import CostModel

# round numbers: a chunk inside a decode step costs its prefill less 10 ms; one more
# sequence adds 0.5 ms per step whatever its context; neighbours decode 100 more tokens
CFG = SchedulerConfig(
    chunk_shared_ms=10.0, decode_seq_ms=0.5, decode_kv_ms_per_token=0.0, typical_output_tokens=100
)
REQ = make_request(prompt_tokens=1024)  # blocks 1..64, no max_tokens: overlap 100
PER = (102.4 - 10.0) + 100 * 0.5  # per neighbour, nothing cached: 142.4 ms


@pytest.mark.parametrize(
    ("endpoint", "req", "cfg", "expected"),
    [
        # nobody decoding there: nobody to slow down
        (make_endpoint(), REQ, CFG, 0.0),
        # this router's requests there, waiting for a first token or decoding
        (make_endpoint(in_flight=2, decoding=3), REQ, CFG, 5 * PER),
        # the engine's gauges (as old as the last refresh) are not counted
        (make_endpoint(running=10, queue=3), REQ, CFG, 0.0),
        # half the prompt cached there: a smaller chunk rides in the neighbours' steps
        (make_endpoint(decoding=2, cached_blocks=range(1, 33)), REQ, CFG, 2 * (41.2 + 50.0)),
        # the whole prompt cached: one token is computed, its chunk hides in the step
        (make_endpoint(decoding=2, cached_blocks=range(1, 65)), REQ, CFG, 2 * 50.0),
        # no more neighbours than sequence slots
        (make_endpoint(decoding=10, max_num_seqs=4), REQ, CFG, 4 * PER),
        # chunked prefill: four 256-token chunks each pay their own step
        (
            make_endpoint(decoding=1),
            REQ,
            dataclasses.replace(CFG, chunk_tokens=256),
            4 * (25.6 - 10.0) + 50.0,
        ),
        # a request that stops after 20 tokens decodes beside them for 20 steps only
        (
            make_endpoint(decoding=1),
            make_request(prompt_tokens=1024, max_tokens=20),
            CFG,
            92.4 + 10,
        ),
        # ... and one that asks for more than the neighbours' typical rest, for 100
        (make_endpoint(decoding=1), make_request(prompt_tokens=1024, max_tokens=900), CFG, PER),
        # its KV read grows every step by its context (prompt + half the overlap)
        (
            make_endpoint(decoding=1),
            REQ,
            dataclasses.replace(CFG, decode_kv_ms_per_token=0.001),
            92.4 + 100 * (0.5 + 0.001 * (1024 + 50)),
        ),
    ],
)
def test_interference(
    endpoint: Endpoint, req: RequestInfo, cfg: SchedulerConfig, expected: float
) -> None:
    ctx = make_ctx([endpoint], req)
    assert interference_ms(endpoint, ctx, COST, cfg) == pytest.approx(expected)
    scored = SCORERS["decode-interference"].score(ScoreInput(ctx, (endpoint,), COST, cfg))
    assert scored == {endpoint.id: pytest.approx(expected)}


def test_neighbours_are_this_routers_open_requests() -> None:
    assert neighbours(make_endpoint(in_flight=1, decoding=4, running=50)) == 5
    assert neighbours(make_endpoint(in_flight=-1, decoding=2)) == 2


def test_the_default_config_enables_it_with_a_small_weight() -> None:
    assert dict(DEFAULT_SCORERS)["decode-interference"] == pytest.approx(0.05)


# --- the trade-off in the scheduler, with the default config --------------------------------
# w-busy holds the first half of the prompt (prefill 51.2 ms there against 102.4 ms on the
# idle w-idle: a 51.2 ms TTFT win); each request decoding on w-busy pays
# (51.2 - 6.54) + 256 * (0.0096 + 4.25e-5 * (1024 + 128)) = 59.7 ms for the placement, weighted
# 0.05: 2.98 ms each; and a request reaching w-busy waits for the decode step in progress
# (queue: half of 6.54 + 0.0586 ms per sequence, weighted 0.75: 2.45 ms + 0.02 ms each), so
# 17 neighbours or more outweigh the cache win.


def _pick(decoding: int, config: SchedulerConfig) -> str | None:
    busy = make_endpoint("w-busy", decoding=decoding, cached_blocks=range(1, 33))
    idle = make_endpoint("w-idle")
    d, _ = schedule(make_ctx([busy, idle], REQ), config, COST, SchedulerState())
    return picked(d)


@pytest.mark.parametrize(
    ("decoding", "expected"),
    [
        (0, "w-busy"),  # nobody to slow down: the cache wins
        (10, "w-busy"),  # 30 + 2.7 ms of weighted neighbour latency and step < 51 ms saved
        (16, "w-busy"),  # 47.7 + 2.8 ms < 51 ms
        (17, "w-idle"),  # 50.7 + 2.8 ms > 51 ms: the neighbours' cost outweighs the cache win
        (200, "w-idle"),
    ],
)
def test_a_busy_endpoint_keeps_the_request_only_while_the_cache_win_is_larger(
    decoding: int, expected: str
) -> None:
    # the trade itself, without the bound on what it may cost the request (below)
    assert _pick(decoding, SchedulerConfig(steer_budget_ms=None)) == expected


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        # the idle endpoint's weighted predicted TTFT is 44.4 ms over the busy one's: 51.2 ms
        # more prefill, less the busy one's wait for its step in progress (9.1 ms x 0.75)
        (None, "w-idle"),  # no bound: 200 neighbours outweigh the cache win
        (60.0, "w-idle"),  # within 60
        (25.0, "w-busy"),  # the default: more than the request may give up
        (0.0, "w-busy"),
    ],
)
def test_the_steering_budget_bounds_what_the_neighbours_may_cost_the_request(
    budget: float | None, expected: str
) -> None:
    assert SchedulerConfig().steer_budget_ms == 25.0
    assert _pick(200, SchedulerConfig(steer_budget_ms=budget)) == expected


def test_within_the_budget_the_neighbours_still_steer() -> None:
    # a 256-token cached prefix saves 25.6 ms of prefill (76.8 against 102.4) less the wait
    # for the busy endpoint's decode step (half of 6.54 + 200 * 0.0586 ms, weighted 0.75):
    # it is about 19 ms ahead, within the default 25 ms, so the neighbours still decide
    busy = make_endpoint("w-busy", decoding=200, cached_blocks=range(1, 17))
    idle = make_endpoint("w-idle")
    ctx = make_ctx([busy, idle], REQ)
    d, _ = schedule(ctx, SchedulerConfig(), COST, SchedulerState())
    assert picked(d) == "w-idle"
    ttft = {
        c.endpoint.id: predict_ttft_ms(c.endpoint, ctx, COST, SchedulerConfig())
        for c in d.candidates
    }
    assert 0 < ttft["w-idle"] - ttft["w-busy"] <= 25.0
    ahead = {c.endpoint.id: c.total_ms - c.terms["decode-interference"] for c in d.candidates}
    assert ahead["w-idle"] - ahead["w-busy"] == pytest.approx(25.6 - 0.75 * 9.128, abs=0.05)
    off = SchedulerConfig(
        scorers=tuple((n, w) for n, w in DEFAULT_SCORERS if n != "decode-interference")
    )
    assert picked(schedule(ctx, off, COST, SchedulerState())[0]) == "w-busy"


def test_without_the_term_the_cache_wins_however_many_decode_there() -> None:
    off = SchedulerConfig(
        scorers=tuple((n, w) for n, w in DEFAULT_SCORERS if n != "decode-interference")
    )
    assert _pick(200, off) == "w-busy"
    zero = SchedulerConfig(
        scorers=tuple((n, 0.0 if n == "decode-interference" else w) for n, w in DEFAULT_SCORERS)
    )
    assert _pick(200, zero) == "w-busy"


def test_the_term_steers_but_is_not_part_of_the_predicted_ttft() -> None:
    busy = make_endpoint("w-busy", decoding=200, cached_blocks=range(1, 33))
    idle = make_endpoint("w-idle")
    cfg = SchedulerConfig(steer_budget_ms=None)
    d, _ = schedule(make_ctx([busy, idle], REQ), cfg, COST, SchedulerState())
    assert picked(d) == "w-idle"
    by_id = {c.endpoint.id: c for c in d.candidates}
    assert by_id["w-busy"].terms["decode-interference"] == pytest.approx(
        0.05 * 200 * ((51.2 - 6.54) + 256 * (0.0096 + 4.25e-5 * 1152))
    )
    assert by_id["w-idle"].terms["decode-interference"] == 0.0
    # the idle endpoint's prediction: rtt 1 + prefill 102.4 (no queue)
    assert d.predicted_ttft_ms == pytest.approx(103.4)
    assert "decode-interference" in d.explanation


def test_the_parameters_default_to_the_engine_cost_model() -> None:
    cm = CostModel.default()
    cfg = SchedulerConfig()
    assert cfg.chunk_shared_ms == pytest.approx(cm.step_fixed_ms, rel=0.01)
    assert cfg.decode_seq_ms == pytest.approx(cm.decode_b_ms, rel=0.01)
    assert cfg.decode_kv_ms_per_token == pytest.approx(cm.decode_c_ms, rel=0.01)


def test_the_router_config_sets_the_weight_and_parameters() -> None:
    cfg = load_routing_config(
        {
            "scorers": [{"name": "decode-interference", "weight": 0.2}],
            "chunkTokens": 2048,
            "chunkSharedMs": 6.5,
            "decodeSeqMs": 0.01,
            "decodeKvMsPerToken": 0.0001,
            "typicalOutputTokens": 64,
        }
    )
    assert cfg.scorers == (("decode-interference", 0.2),)
    assert (cfg.chunk_tokens, cfg.chunk_shared_ms, cfg.typical_output_tokens) == (2048, 6.5, 64)
    assert (cfg.decode_seq_ms, cfg.decode_kv_ms_per_token) == (0.01, 0.0001)
    with pytest.raises(PreheatError) as e:
        load_routing_config({"chunkTokens": 0, "decodeSeqMs": -1})
    assert "chunkTokens" in str(e.value)
    assert "decodeSeqMs" in str(e.value)


def test_the_budget_is_read_among_the_endpoints_the_deadline_admits() -> None:
    # w-a ranks first without the steering terms (0.75 x 100 ms queued + 6.4 ms prefill of
    # a mostly cached prompt = 81.4 ms, against w-b's 102.4) but is predicted at 107.4 ms,
    # over the 105 ms deadline; w-b (103.4 ms) is admitted: the budget (0 here) is read
    # among the admitted, so the request goes to w-b instead of being refused
    a = make_endpoint("w-a", in_flight=1, in_flight_tokens=1000, cached_blocks=range(1, 61))
    b = make_endpoint("w-b")
    ctx = make_ctx([a, b], make_request(deadline_ms=105.0))
    cfg = SchedulerConfig(steer_budget_ms=0.0)
    d, _ = schedule(ctx, cfg, COST, SchedulerState())
    assert picked(d) == "w-b"
    assert d.predicted_ttft_ms == pytest.approx(103.4)
