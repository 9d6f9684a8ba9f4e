"""StopMatcher: stop strings found across chunk boundaries, never sent."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preheat.worker.stops import StopMatcher


def run(stops: list[str], chunks: list[str]) -> tuple[str, bool]:
    m = StopMatcher(stops)
    out = ""
    for c in chunks:
        out += m.feed(c)
        if m.stopped:
            return out, True
    return out + m.flush(), False


@pytest.mark.parametrize(
    ("stops", "chunks", "expected", "stopped"),
    [
        ([], ["a", "b"], "ab", False),
        (["END"], ["abc", "deE", "N", "Dxyz"], "abcde", True),
        (["END"], ["abEN", "x"], "abENx", False),
        (["END"], ["abEN"], "abEN", False),  # held back, then flushed at the end
        (["x", "yz"], ["aay", "zx"], "aa", True),
        (["\n\n"], ["line\n", "\nnext"], "line", True),
        (["stop"], ["stop"], "", True),
    ],
)
def test_table(stops: list[str], chunks: list[str], expected: str, stopped: bool) -> None:
    assert run(stops, chunks) == (expected, stopped)


@given(
    text=st.text(alphabet="abcS", max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    stop=st.text(alphabet="abcS", min_size=1, max_size=4),
)
def test_same_as_cutting_the_whole_text(text: str, cuts: list[int], stop: str) -> None:
    points = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    chunks = [text[a:b] for a, b in itertools.pairwise(points)]
    i = text.find(stop)
    expected = (text[:i], True) if i >= 0 else (text, False)
    assert run([stop], chunks) == expected
