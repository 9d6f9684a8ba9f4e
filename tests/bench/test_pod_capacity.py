"""The autoscaler's capacity estimate against the sim engine's own pod (proposal 0014).

``pod_rate`` (a formula on the mean request) is held within 15% of the highest Poisson rate
at which one simulated pod (``SimCore`` on the default cost model) keeps its p99 TTFT
within the target, on two traces' request sizes. Measured in the test, not a number kept
here: the estimate is right at ``r`` within 15% of the measured rate ``m`` exactly when the
pod meets the target at ``r / 1.15`` (so ``m >= r / 1.15``) and misses it at ``r / 0.85``
(so ``m <= r / 0.85``).

Targets: about two to three times each mix's own p99 at a low rate (Azure conv: 125-170
ms, so 300 and 500 ms, the autoscaling pool's objectives; Mooncake conversation, prompts of
11k tokens: about 2.5 s, so 8 s). Below that the estimate is conservative on Mooncake (it
takes prompts as exponentially distributed; the trace's, clipped at 30k tokens, have a
lighter tail): 0.85x the measured rate at 5 s, 0.51x at 3 s (docs/proposals/0014).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from preheat.bench.pod_capacity import PodRun, run_pod
from preheat.core.autoscaling.capacity import pod_rate, predicted_ttft_ms
from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.types import Mix
from preheat.workload.traces import TraceOptions, TraceRequest, load_trace

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
AZURE = DATA / "azure_llm_2023_conv.csv"
MOONCAKE = DATA / "mooncake_conversation_trace.jsonl"
SECONDS = {"azure": 300.0, "mooncake": 600.0}  # about 4,000 and 700 requests measured


@cache
def _trace(name: str) -> list[TraceRequest]:
    if name == "azure":
        return load_trace(AZURE)
    # the simulated engine's context is 32k tokens: the simulator's own clip for this trace
    return load_trace(MOONCAKE, TraceOptions(max_input_tokens=30_000))


def _mix(run: PodRun) -> Mix:
    """What the autoscaler observes of the run's requests (the workers' counters' means)."""
    return Mix(run.requests, run.prompt_tokens, run.cached_tokens, run.output_tokens)


@pytest.mark.needs_shared(AZURE, MOONCAKE)
@pytest.mark.parametrize(
    ("name", "target_ms", "pods"),
    [("azure", 300.0, 1), ("azure", 500.0, 1), ("mooncake", 8000.0, 1), ("azure", 300.0, 4)],
)
def test_the_estimate_is_within_15_percent_of_the_simulated_pods_rate(
    name: str, target_ms: float, pods: int
) -> None:
    """One pod, and a pool of four sharing the arrivals (proposal 0015: a pool's shared
    queue takes more per pod than a lone pod at a tight target; rates per pod)."""
    trace, seconds = _trace(name), SECONDS[name] / (2 if pods > 1 else 1)
    # the mix the estimate reads: the requests a run near the estimate replays (the trace's
    # sizes drift along it; a faster run replays more of it)
    probe = run_pod(trace, 1.0 if name == "azure" else 0.5, seconds=seconds, pods=pods)
    first = pod_rate(ServiceCost(), _mix(probe), target_ms, 99.0, pods=pods)
    assert first > 0
    near = run_pod(trace, first, seconds=seconds, pods=pods)
    estimate = pod_rate(ServiceCost(), _mix(near), target_ms, 99.0, pods=pods)
    under = run_pod(trace, estimate / 1.15, seconds=seconds, pods=pods)
    over = run_pod(trace, estimate / 0.85, seconds=seconds, pods=pods)
    assert under.ttft_ms <= target_ms, (
        f"{name}, {pods} pod(s): p99 {target_ms:g} ms missed already at {under.rate:.2f} "
        f"req/s per pod ({under.ttft_ms:.0f} ms): the estimate {estimate:.2f} is over 15% "
        "above it"
    )
    assert over.ttft_ms > target_ms, (
        f"{name}, {pods} pod(s): p99 {target_ms:g} ms still met at {over.rate:.2f} req/s "
        f"per pod ({over.ttft_ms:.0f} ms): the estimate {estimate:.2f} is over 15% below it"
    )


@pytest.mark.needs_shared(AZURE)
def test_the_pod_run_sees_the_mix_and_a_rising_ttft() -> None:
    """The measurement itself: a higher rate gives a higher p99 and the same sizes."""
    trace = _trace("azure")
    slow, fast = (run_pod(trace, r, seconds=120.0) for r in (2.0, 18.0))
    assert slow.ttft_ms < fast.ttft_ms
    assert slow.cached_tokens == fast.cached_tokens == 0  # Azure conv names no blocks
    assert 500 < fast.prompt_tokens < 2000
    assert 100 < fast.output_tokens < 500
    with pytest.raises(ValueError, match="rate > 0"):
        run_pod(trace, 0.0)


@pytest.mark.needs_shared(AZURE)
def test_pods_sharing_the_arrivals_queue_less_than_one_pod_at_the_same_rate_per_pod() -> None:
    """``pods``: the rate is per pod; the arrivals go to the least busy pod, so a pool's
    tail is shorter than one pod's at the same load per pod (proposal 0015)."""
    trace = _trace("azure")
    alone = run_pod(trace, 15.0, seconds=120.0)
    pooled = run_pod(trace, 15.0, seconds=120.0, pods=4)
    assert pooled.requests == pytest.approx(4 * alone.requests, rel=0.1)
    assert pooled.ttft_ms < alone.ttft_ms
    with pytest.raises(ValueError, match="pods >= 1"):
        run_pod(trace, 1.0, pods=0)


@pytest.mark.needs_shared(AZURE)
@pytest.mark.parametrize(("pods", "rate"), [(1, 0.5), (2, 2.0)])
def test_with_arrivals_in_bursts_the_estimate_moves_towards_the_simulated_pod(
    pods: int, rate: float
) -> None:
    """Batches of mean 4 at one instant (``run_pod(burst=4)``): the Poisson estimate is far
    under the simulated p99; the burst model (proposal 0016) is closer and still not over
    it. Measured gap, written down in the proposal: 1 pod 381 ms against the simulated 560,
    2 pods 192 against 420 (Poisson: 107 and 128), so feedback still corrects the
    remainder."""
    trace = _trace("azure")
    sim = run_pod(trace, rate, seconds=400.0, pods=pods, burst=4.0)
    mix = _mix(sim)
    poisson = predicted_ttft_ms(ServiceCost(), mix, rate * pods, 99.0, pods)
    bursty = predicted_ttft_ms(ServiceCost(), mix, rate * pods, 99.0, pods, burst=4.0)
    assert poisson < bursty <= sim.ttft_ms
    assert sim.ttft_ms - bursty < (sim.ttft_ms - poisson) * 0.8
    with pytest.raises(ValueError, match="burst >= 1"):
        run_pod(trace, 1.0, burst=0.5)
