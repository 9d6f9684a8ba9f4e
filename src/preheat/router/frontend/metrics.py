"""The router front ends' Prometheus metrics (``preheat_router_*``), in a registry of their own.

Latencies are measured by the router from receipt, so they include routing and the network
hop to the worker. Predicted vs. observed: every proxied request observes the ratio of its
router-measured TTFT to the scheduler's prediction, and the absolute error; cache
predictions are checked by counting predicted cached blocks against the worker-reported
``usage.cached_tokens / block_size`` of the same requests.
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from preheat.core import metric_names as mn
from preheat.core.errors import ErrorCode


class Outcome(enum.Enum):
    OK = "ok"
    INVALID = "invalid"  # malformed request (INVALID_ARGUMENT / 400)
    REJECTED = "rejected"  # admission: deadline cannot be met, queue full (429)
    UNAVAILABLE = "unavailable"  # no endpoint, or every try failed before the first token
    FAILED = "failed"  # the worker failed after tokens were sent
    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    ERROR = "error"

    @classmethod
    def of_error(cls, code: ErrorCode) -> Outcome:
        """The outcome a request refused or failed with ``code`` is counted as."""
        return _ERROR_OUTCOMES.get(code, cls.ERROR)


_ERROR_OUTCOMES = {
    ErrorCode.INVALID_ARGUMENT: Outcome.INVALID,
    ErrorCode.RESOURCE_EXHAUSTED: Outcome.REJECTED,
    ErrorCode.UNAVAILABLE: Outcome.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: Outcome.DEADLINE,
    ErrorCode.CANCELLED: Outcome.CANCELLED,
}


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        pr = [mn.LABEL_POOL, mn.LABEL_REASON]
        self.requests = Counter(
            mn.ROUTER_REQUESTS,
            "Requests by front end and outcome",
            [mn.LABEL_API, mn.LABEL_OUTCOME],
            registry=r,
        )
        self.decisions = Counter(
            mn.ROUTER_DECISIONS, "Routing decisions by pool and reason", pr, registry=r
        )
        self.ttft = Histogram(
            mn.ROUTER_TTFT_SECONDS,
            "Receipt at the router to first token sent, seconds",
            pr,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            mn.ROUTER_ITL_SECONDS,
            "Time between output tokens as relayed, seconds",
            pr,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            mn.ROUTER_E2E_SECONDS,
            "Receipt at the router to last token, seconds",
            pr,
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            mn.ROUTER_OVERHEAD_SECONDS,
            "Router stage: receipt to the upstream call (validate, tokenize, schedule), seconds",
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.predicted_ttft = Histogram(
            mn.ROUTER_PREDICTED_TTFT_SECONDS,
            "The scheduler's predicted TTFT of the chosen endpoint, seconds",
            [mn.LABEL_POOL],
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft_ratio = Histogram(
            mn.ROUTER_TTFT_PREDICTION_RATIO,
            "Observed TTFT / predicted TTFT (1.0: exact)",
            [mn.LABEL_POOL],
            buckets=mn.PREDICTION_RATIO_BUCKETS,
            registry=r,
        )
        self.ttft_error = Histogram(
            mn.ROUTER_TTFT_PREDICTION_ERROR_SECONDS,
            "|observed TTFT - predicted TTFT|, seconds",
            [mn.LABEL_POOL],
            buckets=mn.LATENCY_BUCKETS,
            registry=r,
        )
        self.predicted_cached = Counter(
            mn.ROUTER_PREDICTED_CACHED_BLOCKS,
            "Prefix blocks predicted to hit the chosen endpoint's cache",
            [mn.LABEL_POOL],
            registry=r,
        )
        self.actual_cached = Counter(
            mn.ROUTER_ACTUAL_CACHED_BLOCKS,
            "Prefix blocks the worker reported cached (usage.cached_tokens / block_size)",
            [mn.LABEL_POOL],
            registry=r,
        )
        self.retries = Counter(
            mn.ROUTER_RETRIES,
            "Requests re-routed after a worker failed before the first token",
            [mn.LABEL_POOL],
            registry=r,
        )
        self.queue_depth = Gauge(
            mn.ROUTER_QUEUE_DEPTH, "Requests waiting for a routable endpoint", registry=r
        )
        self.in_flight = Gauge(mn.ROUTER_IN_FLIGHT, "Proxied streams open", registry=r)

    def observe_outcome(self, api: str, outcome: Outcome) -> None:
        self.requests.labels(api, outcome.value).inc()
