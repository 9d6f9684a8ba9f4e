"""Property test: for random load curves the policy stays within [min, max], respects the
cooldowns, never scales down on stale data and never flaps."""

from __future__ import annotations

from autoscalingkit import Driver, config, signals
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.autoscaling import Cause, Direction

tick = st.tuples(
    st.floats(1.0, 30.0),  # seconds since the previous tick
    st.one_of(st.none(), st.floats(0.0, 3000.0)),  # ttft p95 ms; None: stale
)


@settings(max_examples=200)
@given(
    curve=st.lists(tick, min_size=1, max_size=80),
    lo=st.integers(1, 3),
    span=st.integers(0, 8),
    up=st.tuples(st.floats(0, 60), st.floats(0, 60), st.integers(1, 5)),
    down=st.tuples(st.floats(0, 300), st.floats(0, 200), st.integers(1, 5)),
    panic=st.booleans(),
)
def test_bounds_cooldowns_no_flapping(
    curve: list[tuple[float, float | None]],
    lo: int,
    span: int,
    up: tuple[float, float, int],
    down: tuple[float, float, int],
    panic: bool,
) -> None:
    d = Driver(cfg=config(up=up, down=down, panic=(panic, 2.0, 10.0)), min_=lo, max_=lo + span)
    d.desired = lo
    now = 0.0
    last_scale: float | None = None
    last_up: float | None = None
    for dt, ttft in curve:
        now += dt
        sig = signals(now, 0.0 if ttft is None else ttft, stale=ttft is None)
        before = d.desired
        dec = d.tick(now, sig)
        assert lo <= dec.active <= lo + span
        if ttft is None:
            assert dec.active == before
        if dec.direction is Direction.DOWN:
            assert last_scale is None or now - last_scale >= down[1]
            # no up-then-down within the down window: that would be a flap (an up exactly
            # at the window's edge may fall either side of it by a float rounding: the
            # window keeps t >= now - window, and now - t can round to the window itself)
            assert last_up is None or now - last_up > down[0] - 1e-9
        if dec.direction is Direction.UP:
            if dec.cause is not Cause.PANIC:
                assert last_scale is None or now - last_scale >= up[1]
            last_up = now
        if dec.direction is not Direction.HOLD:
            last_scale = now
