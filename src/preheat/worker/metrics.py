"""The worker's own Prometheus metrics (``preheat_worker_*``), in a registry of its own.

Latencies here are measured by the worker from the moment it received the request, so they
include validation and tokenization; the stage breakdown comes from the engine's timing.
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from preheat.core import metric_names as mn
from preheat.core.lifecycle import LifecycleState
from preheat.engine.base import StageTiming


class WorkerOutcome(enum.Enum):
    OK = "ok"
    INVALID = "invalid"  # INVALID_ARGUMENT
    REJECTED = "rejected"  # RESOURCE_EXHAUSTED (engine full)
    CANCELLED = "cancelled"  # the client went away
    DEADLINE = "deadline"  # gRPC deadline or ttft_deadline_ms
    UNAVAILABLE = "unavailable"  # worker not active (standby, draining, ...)
    ABORTED = "aborted"  # admitted, then aborted by the worker (drain grace ran out)
    ERROR = "error"  # anything else


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            mn.WORKER_REQUESTS, "Generate requests by outcome", [mn.LABEL_OUTCOME], registry=r
        )
        for o in WorkerOutcome:
            self.requests.labels(o.value)
        self.ttft = Histogram(
            mn.WORKER_TTFT_SECONDS,
            "Receipt to first token, seconds",
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            mn.WORKER_ITL_SECONDS,
            "Time between output tokens, seconds",
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            mn.WORKER_E2E_SECONDS,
            "Receipt to last token, seconds",
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            mn.WORKER_STAGE_SECONDS,
            "Seconds per request stage (engine timing)",
            [mn.LABEL_STAGE],
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.state = Gauge(
            mn.WORKER_STATE, "1 for the worker's lifecycle state", [mn.LABEL_STATE], registry=r
        )
        self.in_flight = Gauge(mn.WORKER_IN_FLIGHT, "Generate streams open", registry=r)

    def set_state(self, state: LifecycleState) -> None:
        for s in LifecycleState:
            self.state.labels(s.value).set(1 if s == state else 0)

    def observe_outcome(self, outcome: WorkerOutcome) -> None:
        self.requests.labels(outcome.value).inc()

    def observe_timing(self, timing: StageTiming) -> None:
        self.stage.labels("queue").observe(timing.queue_s)
        self.stage.labels("prefill").observe(timing.prefill_s)
        self.stage.labels("decode").observe(timing.decode_s)
