"""status.policyHistory: the policy's memory as the pool's status carries it (pure)."""

from __future__ import annotations

from dataclasses import replace

from preheat.api.pool import InferencePoolStatus
from preheat.core.autoscaling import Direction
from preheat.core.autoscaling.forecast import SHORTFALL_EDGES, Forecast
from preheat.core.autoscaling.memory import Memory
from preheat.operator.policy_history import FIELD, from_status, to_status

WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_round_trip_in_rfc3339_and_valid_against_the_status_schema() -> None:
    mem = Memory(WALL, ((WALL + 15.25, 6), (WALL + 30.5, 3)), WALL + 15.25, Direction.UP)
    doc = to_status(mem)
    assert doc == {
        "since": "2027-01-15T08:00:00.000Z",
        "recommendations": [
            {"time": "2027-01-15T08:00:15.250Z", "replicas": 6},
            {"time": "2027-01-15T08:00:30.500Z", "replicas": 3},
        ],
        "lastScaleTime": "2027-01-15T08:00:15.250Z",
        "lastScaleDirection": "up",
    }
    InferencePoolStatus.model_validate({FIELD: doc})  # the CRD's status schema takes it
    assert from_status({FIELD: doc}) == mem


def test_no_scale_yet_writes_no_last_scale() -> None:
    doc = to_status(Memory(WALL, ((WALL, 2),)))
    assert "lastScaleTime" not in doc
    assert from_status({FIELD: doc}) == Memory(WALL, ((WALL, 2),))


def test_a_status_without_or_with_an_unreadable_history_gives_none() -> None:
    assert from_status(None) is None
    assert from_status({"replicas": {}}) is None
    good = to_status(Memory(WALL, ((WALL, 2),)))
    for bad in (
        {**good, "since": "yesterday"},
        {**good, "since": "2027-01-15T08:00:00"},  # no zone: whose clock?
        {**good, "recommendations": [{"time": good["since"]}]},
        {**good, "recommendations": "6"},
        {**good, "lastScaleTime": good["since"], "lastScaleDirection": "sideways"},
        "6 replicas",
    ):
        assert from_status({FIELD: bad}) is None, bad


def test_the_forecast_round_trips_and_a_bad_one_is_dropped_alone() -> None:
    season = tuple(float(i) - 11.5 for i in range(24))
    f = Forecast(t=WALL + 30.5, level=41.5, trend=0.002, season=season, since=WALL - 86_400.0,
                 error=0.12, epoch=WALL - 3_600.0, base=48.0)  # fmt: skip
    mem = Memory(WALL, ((WALL + 30.5, 3),), forecast=f, forecast_period_s=86_400.0)
    doc = to_status(mem)
    assert doc["forecast"] == {
        "time": "2027-01-15T08:00:30.500Z",
        "since": "2027-01-14T08:00:00.000Z",
        "seasonStart": "2027-01-15T07:00:00.000Z",
        "periodSeconds": 86_400.0,
        "level": 41.5,
        "trend": 0.002,
        "base": 48.0,
        "season": list(season),
        "error": 0.12,
    }
    InferencePoolStatus.model_validate({FIELD: doc})  # the CRD's status schema takes it
    assert from_status({FIELD: doc}) == mem
    for bad in (
        {**doc["forecast"], "level": "high"},
        {**doc["forecast"], "season": 3.0},
        {**doc["forecast"], "trend": float("nan")},
        {**doc["forecast"], "periodSeconds": None},
        {k: v for k, v in doc["forecast"].items() if k != "seasonStart"},
    ):
        # the forecast starts again; the scale-down window and cooldowns are kept
        assert from_status({FIELD: {**doc, "forecast": bad}}) == replace(
            mem, forecast=None, forecast_period_s=0.0
        ), bad


def test_a_weekly_season_round_trips_and_a_bad_one_drops_the_forecast() -> None:
    week = tuple(float(i % 7) for i in range(168))
    f = Forecast(t=WALL, level=40.0, trend=0.0, season=(0.0,) * 24, since=WALL - 86_400.0,
                 epoch=WALL, base=40.0, week=week, week_since=WALL - 8 * 86_400.0)  # fmt: skip
    mem = Memory(WALL, ((WALL, 3),), forecast=f, forecast_period_s=86_400.0)
    doc = to_status(mem)
    assert doc["forecast"]["weekSince"] == "2027-01-07T08:00:00.000Z"
    assert doc["forecast"]["week"] == list(week)
    InferencePoolStatus.model_validate({FIELD: doc})
    assert from_status({FIELD: doc}) == mem
    without = to_status(replace(mem, forecast=replace(f, week=(), week_since=None)))
    assert "week" not in without["forecast"]
    assert "weekSince" not in without["forecast"]
    for bad in ({**doc["forecast"], "week": "x"}, {**doc["forecast"], "weekSince": 5}):
        assert from_status({FIELD: {**doc, "forecast": bad}}) == replace(
            mem, forecast=None, forecast_period_s=0.0
        ), bad


def test_the_shortfall_histogram_round_trips_and_a_bad_one_is_counted_again() -> None:
    counts = tuple(float(i) for i in range(len(SHORTFALL_EDGES)))
    f = Forecast(t=WALL, level=40.0, trend=0.0, season=(0.0,) * 24, since=WALL - 600.0,
                 epoch=WALL, base=40.0, shortfalls=counts)  # fmt: skip
    mem = Memory(WALL, ((WALL, 3),), forecast=f, forecast_period_s=86_400.0)
    doc = to_status(mem)
    assert doc["forecast"]["shortfalls"] == list(counts)
    InferencePoolStatus.model_validate({FIELD: doc})
    assert from_status({FIELD: doc}) == mem
    assert (
        "shortfalls" not in to_status(replace(mem, forecast=replace(f, shortfalls=())))["forecast"]
    )
    for odd in ([1.0, 2.0], [-1.0] * len(SHORTFALL_EDGES)):  # other buckets; a negative count
        kept = from_status({FIELD: {**doc, "forecast": {**doc["forecast"], "shortfalls": odd}}})
        assert kept == replace(mem, forecast=replace(f, shortfalls=())), odd  # the rest kept
    bad = {**doc["forecast"], "shortfalls": "many"}
    assert from_status({FIELD: {**doc, "forecast": bad}}) == replace(
        mem, forecast=None, forecast_period_s=0.0
    )


def test_a_time_read_back_and_moved_between_clocks_keeps_its_stamp() -> None:
    """A restart reads a stamp back and moves it onto the new process's clock and, at the
    next write, back onto the wall clock; the two clocks are read a few microseconds apart
    at each evaluation, so the time comes back a hair off its millisecond. It must be
    written as the same stamp, not a millisecond earlier (truncating moved the forecast's
    `since` at restarts)."""
    mem = Memory(WALL + 0.38, ((WALL + 0.38, 2),))
    stamp = to_status(mem)["since"]
    back = from_status({FIELD: to_status(mem)})
    assert back is not None
    for jitter in (-3e-6, -1e-7, 0.0, 2e-6):
        assert to_status(Memory(back.since + jitter, back.history))["since"] == stamp


def test_the_cold_start_round_trips_and_a_bad_one_is_dropped_alone() -> None:
    mem = Memory(WALL, ((WALL, 3),), cold_start_s=55.7)
    doc = to_status(mem)
    assert doc["coldStartSeconds"] == 55.7
    InferencePoolStatus.model_validate({FIELD: doc})  # the CRD's status schema takes it
    assert from_status({FIELD: doc}) == mem
    assert "coldStartSeconds" not in to_status(Memory(WALL, ((WALL, 3),)))
    for bad in (0, -3.0, "4m", float("inf"), float("nan"), None, True, [55.7]):
        # a restart then waits for a pod's start to measure it; the window is kept
        assert from_status({FIELD: {**doc, "coldStartSeconds": bad}}) == replace(
            mem, cold_start_s=None
        ), bad
