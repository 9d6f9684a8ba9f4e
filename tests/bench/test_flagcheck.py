"""The benchmarks' flag checks: ``preheat demo`` and ``preheat bench worker`` name every bad
flag at once and start nothing (each ended in a traceback, or sent 100,000 requests at once)."""

from __future__ import annotations

import pytest

from preheat.bench.flagcheck import FlagCheck
from preheat.cli import main


def test_each_check_names_its_flag() -> None:
    c = FlagCheck()
    c.number("--a", float("nan"), 0)
    c.number("--b", 5, 1, high=4)
    c.number("--c", 0, 0, strict=True)
    c.listed("--d", "1,x", int, 1)
    c.listed("--e", "", float, 0)
    c.listed("--f", "0.5,-1", float, 0, strict=True)
    c.names("--g", "a,zz", ("a", "b"))
    c.one_of("--h", 2, (0, 1))
    assert c.problems == [
        "--a must be >= 0 and finite, got nan",
        "--b must be >= 1 and <= 4 and finite, got 5",
        "--c must be > 0 and finite, got 0",
        "--d wants comma-separated ints, got '1,x'",
        "--e names nothing",
        "--f: every value must be > 0, got -1.0",
        "--g: unknown 'zz'; known: a, b",
        "--h must be 0 or 1, got 2",
    ]
    ok = FlagCheck()
    ok.number("--a", 1, 1, high=1)
    ok.listed("--d", "1, 2", int, 1)
    ok.names("--g", "b", ("a", "b"))
    assert ok.problems == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["demo", "--max-tokens", "-3", "--burst", "100000"],
            "preheat demo: --max-tokens must be >= 1 and finite, got -3; "
            "--burst must be >= 0 and <= 1,024 and finite, got 100000",
        ),
        (
            ["bench", "worker", "--rounds", "0", "--time-scales", "1,0"],
            "preheat bench worker: --rounds must be >= 1 and finite, got 0; "
            "--time-scales: every value must be > 0, got 0.0",
        ),
        (
            ["bench", "router", "--part", "policies", "--workers", "100000", "--rounds", "0"],
            "preheat bench router: --rounds must be >= 1 and finite, got 0; "
            "--workers must be within [1, ",
        ),
    ],
)
def test_a_bad_flag_starts_nothing(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert said in err
    assert out == ""  # no worker was started ("starting: preheat worker ...")


def test_a_cluster_bigger_than_the_machine_is_refused_before_any_process() -> None:
    # `preheat bench router --workers 100000` started that many worker processes at once
    from preheat.bench.workerproc import check_sim_workers, sim_worker_limit

    most, why = sim_worker_limit()
    assert 1 <= most <= 64  # preheat.local.capacity.MAX_WORKERS
    assert check_sim_workers("--workers", most) is None
    assert check_sim_workers("--workers", most + 1) == (
        f"--workers must be within [1, {most}] on this machine ({why}), got {most + 1}"
    )
    assert check_sim_workers("--workers", 0) is not None
