"""``python -m preheat.bench.overload load``: the runs it compares share no prompt, so no run
is served from the prefix cache an earlier run left on the workers."""

from __future__ import annotations

from preheat.bench.overload import run_request


def _words(side: str, rate: float, multiple: float, seed: int) -> set[str]:
    out: set[str] = set()
    for i in range(1, 6):
        out.update(run_request(side, rate, multiple, seed, i, 64, 4).prompt.split())
    return out


def test_no_two_runs_share_a_prompt_word() -> None:
    runs = [
        ("before", 13.5, 1.0, 100),
        ("after", 13.5, 1.0, 100),  # the other side of the same repeat
        ("before", 27.0, 2.0, 100),  # the next multiple
        ("before", 13.5, 1.0, 101),  # the next repeat
        ("sweep", 4.0, 0.0, 1),
        ("sweep", 6.0, 0.0, 1),  # the sweep's next step
    ]
    seen: set[str] = set()
    for run in runs:
        words = _words(*run)
        assert len(words) == 5 * 64  # distinct within the run too
        assert not words & seen, run
        seen |= words
    again = run_request("before", 13.5, 1.0, 100, 1, 64, 4)
    assert again == run_request("before", 13.5, 1.0, 100, 1, 64, 4)  # deterministic
    assert again.sampling.max_tokens == 4
