"""vLLM's Prometheus metrics, re-created for the sim engine under vLLM's exact names.

Names, types, labels and buckets are those of vLLM 0.32 (``vllm/v1/metrics/loggers.py``,
``PrometheusStatLogger``, and ``vllm/v1/metrics/buckets.py``): every metric carries the
labels ``model_name`` and ``engine`` (the engine index, ``"0"`` for a single engine), and
``vllm:request_success`` adds ``finished_reason``. prometheus_client appends ``_total`` to
counters on exposition, as vLLM's own ``/metrics`` shows (``vllm:prompt_tokens_total``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from preheat.core import metric_names as mn
from preheat.core.metric_names import (
    INTER_TOKEN_LATENCY_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
)
from preheat.engine.base import FinishReason

LABELS = (mn.LABEL_MODEL, mn.LABEL_ENGINE)

# vLLM's FINISH_REASON_STRINGS (vllm/v1/engine/__init__.py); all are pre-created at zero.
VLLM_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


def request_tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets(max_model_len)`` (request token-count histograms)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_model_len:
                return out
            out.append(float(value))
        exponent += 1


class VllmMetrics:
    """The vLLM-named metric set of one engine, registered in ``registry``."""

    def __init__(
        self, registry: CollectorRegistry, model_name: str, max_model_len: int, engine: str = "0"
    ) -> None:
        lv = (model_name, engine)
        labels = list(LABELS)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=registry).labels(*lv)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(*lv)

        def histogram(name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=buckets).labels(*lv)

        self.running = gauge(
            mn.VLLM_NUM_REQUESTS_RUNNING, "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            mn.VLLM_NUM_REQUESTS_WAITING, "Number of requests waiting to be processed."
        )
        self.kv_usage = gauge(
            mn.VLLM_KV_CACHE_USAGE_PERC, "KV-cache usage. 1 means 100 percent usage."
        )
        self.prefix_queries = counter(
            mn.VLLM_PREFIX_CACHE_QUERIES,
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            mn.VLLM_PREFIX_CACHE_HITS, "Prefix cache hits, in terms of number of cached tokens."
        )
        self.preemptions = counter(
            mn.VLLM_NUM_PREEMPTIONS, "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter(mn.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            mn.VLLM_GENERATION_TOKENS, "Number of generation tokens processed."
        )
        success = Counter(
            mn.VLLM_REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            [*labels, mn.LABEL_FINISHED_REASON],
            registry=registry,
        )
        self.success = {r: success.labels(*lv, r) for r in VLLM_FINISH_REASONS}
        tok_buckets = request_tokens_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            mn.VLLM_REQUEST_PROMPT_TOKENS, "Number of prefill tokens processed.", tok_buckets
        )
        self.request_generation_tokens = histogram(
            mn.VLLM_REQUEST_GENERATION_TOKENS,
            "Number of generation tokens processed.",
            tok_buckets,
        )
        self.ttft = histogram(
            mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS,
            "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS,
        )
        self.itl = histogram(
            mn.VLLM_INTER_TOKEN_LATENCY_SECONDS,
            "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY_BUCKETS,
        )
        self.e2e = histogram(
            mn.VLLM_E2E_REQUEST_LATENCY_SECONDS,
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue = histogram(
            mn.VLLM_REQUEST_QUEUE_TIME_SECONDS,
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill = histogram(
            mn.VLLM_REQUEST_PREFILL_TIME_SECONDS,
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode = histogram(
            mn.VLLM_REQUEST_DECODE_TIME_SECONDS,
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )

    def finished(self, reason: FinishReason) -> Counter:
        return self.success[reason.value]
