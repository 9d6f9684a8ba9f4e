import pytest

from preheat.core.lifecycle import LifecycleState as S
from preheat.core.lifecycle import can_transition, transition_error


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        (S.LOADING, S.WARMING, True),
        (S.WARMING, S.STANDBY, True),
        (S.WARMING, S.ACTIVE, True),
        (S.STANDBY, S.ACTIVE, True),
        (S.ACTIVE, S.STANDBY, True),
        (S.ACTIVE, S.DRAINING, True),
        (S.DRAINING, S.STOPPED, True),
        (S.ACTIVE, S.ACTIVE, True),
        (S.LOADING, S.ACTIVE, False),
        (S.DRAINING, S.ACTIVE, False),
        (S.STOPPED, S.LOADING, False),
        (S.STANDBY, S.WARMING, False),
    ],
)
def test_transitions(src: S, dst: S, ok: bool):
    assert can_transition(src, dst) is ok
    assert (transition_error(src, dst) is None) is ok


def test_error_names_the_allowed_moves():
    msg = transition_error(S.DRAINING, S.ACTIVE)
    assert msg == "cannot go from draining to active; from draining a worker may go to stopped"
