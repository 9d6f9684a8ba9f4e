"""The diurnal trace: a day of a ServeGen rate curve rescaled to a peak, and the hourly
schedule an SRE would set from the day before."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from preheat.workload.diurnal import DiurnalSpec, day_curves, diurnal_trace, hourly_schedule

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _rates(days: int) -> list[float]:
    # day d: 10 at night, 10 * (d + 2) at noon (windows 66-77)
    out: list[float] = []
    for d in range(days):
        out += [10.0 * (d + 2) if 66 <= w < 78 else 10.0 for w in range(144)]
    return out


def test_the_day_is_rescaled_to_its_peak_and_the_reference_by_the_same_factor() -> None:
    day, ref = day_curves(_rates(3), DiurnalSpec(day=2, reference_day=1, peak_rps=80.0))
    assert max(day.rates_rps) == pytest.approx(80.0)  # 40 -> 80: x2
    assert min(day.rates_rps) == pytest.approx(20.0)
    assert max(ref.rates_rps) == pytest.approx(60.0)  # the day before, 30 x 2
    assert day.first_window == 288
    assert len(day.rates_rps) == len(ref.rates_rps) == 144


def test_a_day_past_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="day 3 needs 576 windows"):
        day_curves(_rates(3), DiurnalSpec(day=3, reference_day=2))


@pytest.mark.parametrize(
    ("per_pod", "expected_noon", "expected_night"),
    [(10.0, 4, 2), (25.0, 2, 1), (100.0, 1, 1)],
)
def test_hourly_schedule_is_each_hours_busiest_window_over_one_pods_rate(
    per_pod: float, expected_noon: int, expected_night: int
) -> None:
    _, ref = day_curves(_rates(2), DiurnalSpec(day=1, reference_day=0, peak_rps=60.0))
    sizes = hourly_schedule(ref.rates_rps, per_pod)
    assert len(sizes) == 24
    assert sizes[11] == expected_noon  # windows 66-71: 40 req/s
    assert sizes[0] == expected_night  # 20 req/s


def test_hourly_schedule_rejects_a_rate_of_zero() -> None:
    with pytest.raises(ValueError, match="per_pod_rps"):
        hourly_schedule([1.0], 0.0)


@pytest.mark.needs_shared(DATA / "azure_llm_2023_conv.csv")
def test_the_diurnal_trace_follows_the_curve_with_azure_sizes(tmp_path: Path) -> None:
    servegen = tmp_path / "rates.csv"
    lines = ["workload,window_start_s,total_rate_rps,active_clients"]
    lines += [f"w,{600 * i},{r},1" for i, r in enumerate(_rates(2))]
    servegen.write_text("\n".join(lines) + "\n")
    spec = DiurnalSpec(workload="w", day=1, reference_day=0, peak_rps=4.0, window_s=6.0)
    reqs, day, ref = diurnal_trace(spec, servegen, DATA / "azure_llm_2023_conv.csv")
    again, _, _ = diurnal_trace(spec, servegen, DATA / "azure_llm_2023_conv.csv")
    assert reqs == again  # deterministic given the seed
    # 144 windows of 6 s: noon (12 windows) at 30 -> 4 req/s, the rest at 10 -> 4/3 req/s
    expected = 6.0 * (12 * 4.0 + 132 * 4.0 / 3.0)
    assert abs(len(reqs) - expected) < 4 * expected**0.5
    assert all(0 <= r.arrival_s < 144 * 6.0 for r in reqs)
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in reqs)
    assert json.loads(json.dumps(ref.rates_rps)) == list(ref.rates_rps)
    assert max(day.rates_rps) == pytest.approx(4.0)


@pytest.mark.needs_shared(DATA / "azure_llm_2023_conv.csv")
@pytest.mark.parametrize("hours", [0.5, 2.0, 13.0 / 6.0])
def test_the_days_first_hours_are_the_whole_days_first_requests(
    tmp_path: Path, hours: float
) -> None:
    servegen = tmp_path / "rates.csv"
    lines = ["workload,window_start_s,total_rate_rps,active_clients"]
    lines += [f"w,{600 * i},{r},1" for i, r in enumerate(_rates(2))]
    servegen.write_text("\n".join(lines) + "\n")
    azure = DATA / "azure_llm_2023_conv.csv"
    whole = DiurnalSpec(workload="w", day=1, reference_day=0, peak_rps=4.0, window_s=6.0)
    reqs, day, ref = diurnal_trace(whole, servegen, azure)
    part, part_day, part_ref = diurnal_trace(replace(whole, hours=hours), servegen, azure)
    until = hours * 6 * 6.0  # six 6-s windows an hour
    assert part == [r for r in reqs if r.arrival_s < until]  # sizes too: the same start
    assert 0 < len(part) < len(reqs)
    assert (part_day, part_ref) == (day, ref)  # the curves stay whole (the schedule, the plot)


@pytest.mark.parametrize("hours", [0.0, -1.0, 24.5, float("nan")])
def test_hours_outside_the_day_are_refused(hours: float) -> None:
    with pytest.raises(ValueError, match="hours must be within"):
        DiurnalSpec(hours=hours)
