"""Step 2c: a capacity estimate from the arrival rate and the request mix.

Feedback from observed percentiles says how late the pool already is; it cannot say how
many pods a rate needs. This module estimates that from the engine's costs, the way the
engine builds a step (``preheat.engine.costmodel.CostModel``, docs/proposals/0012 and 0014):
under chunked prefill one step runs the batch's decodes and rides the waiting prompts'
prefill chunks on it, ``step = decode_step(B) + added(chunks)``, and every decoding
sequence advances one token in every step, prefill or not.

One pod, arrival rate ``lam`` (req/s), mean prompt ``P`` tokens (``C`` of them cached, ``N
= P - C`` prefilled), mean output ``O`` tokens, decode context ``X = P + O / 2``:

- a request's prefill work ``w = N * u(N) + k * N * (C + N)``: what its chunks add to the
  steps they ride in (:meth:`ServiceCost.added_ms`), the attention term at the mean of
  exponentially distributed prompts (``E[N^2] = 2 N^2``: the mean is all the mix says);
- its decode work ``O * e``, ``e = b + c * X`` (what one more sequence adds to a step);
- the utilisation ``rho = lam * (w + O * e)``: the added time's share of the GPU; the rest
  is the steps' fixed part ``a``, so a step takes ``s = a / (1 - rho)`` and ``B = lam * O *
  s`` sequences decode at once (Little's law);
- TTFT at percentile ``q``: the step in flight ``s``, the decode part of the request's own
  step ``decode_step(B)``, and its prefill's sojourn in an M/M/1 queue of prefills (work
  ``w``, exponential: prompts' sizes have a coefficient of variation near 1 on the Azure
  conv and Mooncake traces) on a GPU busy ``rho`` of the time: ``w * ln(1 / (1 - q)) / (1 -
  rho)``;
- saturated (infinite) when ``rho >= 1``, when ``B`` passes ``max_batch`` or when ``B * (P +
  O)`` passes the KV cache.

A pool of ``n`` pods behind the router (proposal 0015): each pod at ``lam / n``, and the
prefills' sojourn that of one shared M/M/n queue instead of ``n`` lone pods' M/M/1 tails.
The router sends a request to the pod that will start it soonest (least predicted TTFT,
immediate dispatch by work), which waits exactly as a central first-come queue of ``n``
servers does: a request waits only when every pod is busy, and then for the first to free
(Erlang C). Equal to the lone pod at ``n = 1``, never longer than it.

Arrivals in bursts (proposal 0016): requests that come in batches wait behind their
batch-mates even on an idle pool, which no Poisson queue foresees. The routers measure the
arrivals' index of dispersion ``D`` (:mod:`preheat.core.traffic.arrivals`); what it exceeds
Poisson noise by gives the mean batch ``m`` (:func:`burst_size`; geometric batches of mean
``m`` have ``D = 2 m - 1``), and the prefills' sojourn is that of batches spread over the
pods (:func:`sojourn_ms`): exact for one pod (M^X/M/1) and for Poisson arrivals (M/M/n).

Held against the sim engine's measured rate, on the Azure conv and Mooncake conversation
request sizes, by ``tests/bench/test_pod_capacity.py`` (within 15%, one pod and a pool).
"""

from __future__ import annotations

import math

from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.autoscaling.types import Mix
from preheat.core.traffic.arrivals import BIN_S

__all__ = [
    "ServiceCost",
    "burst_size",
    "bursts_said",
    "combine",
    "idle_floor_ms",
    "in_flight",
    "pod_rate",
    "predicted_ttft_ms",
    "reachable_ms",
    "replicas_for",
    "replicas_for_concurrency",
    "sojourn_ms",
]


def _work(cost: ServiceCost, mix: Mix) -> tuple[float, float, float]:
    """(prefill work w, decode work per token e, decode context X) of the mean request."""
    new = max(0.0, mix.prompt_tokens - mix.cached_tokens)
    cached = max(0.0, min(mix.cached_tokens, mix.prompt_tokens))
    # added_ms charges k * N * (C + N / 2); exponential prompts' mean is k * N * (C + N)
    attn = cost.scale * cost.attn_ms_per_token2 * new * new / 2.0
    w = cost.added_ms(new, cached) + attn
    context = mix.prompt_tokens + mix.output_tokens / 2.0
    return w, cost.token_step_ms(context), context


def _state(cost: ServiceCost, mix: Mix, lam: float) -> tuple[float, float, float] | None:
    """(decoding batch B, step ms s, utilisation rho) at ``lam`` req/s; None: saturated."""
    w, e, _ = _work(cost, mix)
    rho = lam * (w + mix.output_tokens * e) / 1000.0
    if rho >= 1.0:
        return None
    step = cost.scale * cost.step_ms0 / (1.0 - rho)
    batch = lam * mix.output_tokens * step / 1000.0
    if batch > cost.max_batch or batch * (mix.prompt_tokens + mix.output_tokens) > cost.kv_tokens:
        return None
    return batch, step, rho


def erlang_c(servers: int, offered: float) -> float:
    """The probability that an arrival waits in an M/M/``servers`` queue offered ``offered``
    Erlangs (``servers * rho``); 1 at or past saturation."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    blocked = 1.0  # Erlang B by its recurrence: stable for any size
    for k in range(1, servers + 1):
        blocked = offered * blocked / (k + offered * blocked)
    return servers * blocked / (servers - offered * (1.0 - blocked))


def burst_size(dispersion: float | None, window_s: float, z: float = 2.0) -> float:
    """The mean batch size ``m`` the arrivals come in, from the index of dispersion ``D``
    of their per-second counts over ``window_s`` (``Var / mean``; 1: Poisson; None: not
    measured). Geometric batches of mean ``m`` give ``D = 2 m - 1``, so ``m = (D + 1) / 2``.

    ``D`` is estimated from ``k = window_s / BIN_S`` counts (the differences of
    consecutive ones, :mod:`preheat.core.traffic.arrivals`), whose standard error under Poisson
    arrivals is about ``sqrt(3 / k)`` (0.32 over 30 s); only the excess beyond ``z`` of it
    counts, so Poisson traffic is sized as Poisson (1.0) and not by its noise."""
    if dispersion is None or not math.isfinite(dispersion) or window_s <= 0:
        return 1.0
    bins = max(1.0, window_s / BIN_S)
    excess = dispersion - 1.0 - z * math.sqrt(3.0 / bins)
    return 1.0 + max(0.0, excess) / 2.0


def bursts_said(dispersion: float | None, window_s: float) -> str:
    """``bursts of 3.0 (dispersion 5.7)``: the batches :func:`burst_size` sizes for, as the
    decision's reason and the signals' text say them; "" when arrivals are sized as
    Poisson."""
    burst = burst_size(dispersion, window_s)
    if burst <= 1.0 or dispersion is None:
        return ""
    return f"bursts of {burst:.1f} (dispersion {dispersion:.1f})"


def _waits(servers: int, rho: float, burst: float) -> tuple[float, float]:
    """(the chance a prefill waits, ``m_n`` the batch's share of each pod) on ``servers``
    pods busy ``rho`` each, arrivals in batches of mean ``burst``: :func:`sojourn_ms`."""
    share = 1.0 + (max(1.0, burst) - 1.0) / servers
    return 1.0 - (1.0 - erlang_c(servers, servers * rho)) / share, share


def sojourn_ms(
    work_ms: float, rho: float, servers: int, percentile: float, burst: float = 1.0
) -> float:
    """The ``percentile`` (0-100) of a prefill's sojourn (wait and its own work) in a shared
    queue of ``servers`` pods, each busy ``rho`` of the time, works exponential with mean
    ``work_ms``: ``P(T > t) = (1 - c) e^(-mu t) + c P(W' + S > t)``, ``c`` the chance of
    waiting, the wait given waiting exponential at ``theta``. Poisson arrivals (``burst``
    1): ``c`` Erlang C, ``theta = servers * mu * (1 - rho)``; one server: the M/M/1 sojourn
    ``work_ms * ln(1 / tail) / (1 - rho)``, in closed form.

    ``burst``: the mean size ``m`` of the batches the arrivals come in (geometric sizes;
    :func:`burst_size` reads it from the arrivals' dispersion). A batch spread over the
    pods puts ``m_n = 1 + (m - 1) / servers`` of it on each, so ``c = 1 - (1 - C) / m_n``
    and ``theta`` is divided by ``m_n``: exact for one server (the M^X/M/1 queue with
    geometric batches, whose sojourn is exponential at ``mu (1 - rho) / m``), exact for
    Poisson arrivals (M/M/n), and in between the batch's share of each pod. Unlike a
    heavy-traffic correction it does not vanish at low load: a burst of prompts waits
    behind itself on an idle pool."""
    tail = 1.0 - percentile / 100.0
    if work_ms <= 0:
        return 0.0
    if rho >= 1.0:
        return math.inf
    if not 0.0 < tail < 1.0:
        return work_ms
    servers = max(1, servers)
    c, share = _waits(servers, rho, burst)
    if share == 1.0 and servers == 1:
        return work_ms * math.log(1.0 / tail) / (1.0 - rho)
    mu = 1.0 / work_ms
    theta = servers * mu * (1.0 - rho) / share

    def over(t: float) -> float:  # P(T > t)
        if abs(mu - theta) < 1e-12 * mu:
            both = (1.0 + mu * t) * math.exp(-mu * t)
        else:
            both = (mu * math.exp(-theta * t) - theta * math.exp(-mu * t)) / (mu - theta)
        return (1.0 - c) * math.exp(-mu * t) + c * both

    lo, hi = 0.0, work_ms * math.log(1.0 / tail) * share / (1.0 - rho)
    while over(hi) > tail:  # the lone pod's sojourn bounds it at m_n = 1; else widen
        lo, hi = hi, hi * 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if over(mid) > tail:
            lo = mid
        else:
            hi = mid
    return hi


def predicted_ttft_ms(
    cost: ServiceCost, mix: Mix, lam: float, percentile: float, pods: int = 1, burst: float = 1.0
) -> float:
    """TTFT at ``percentile`` (0-100) on a pool of ``pods`` sharing ``lam`` req/s arriving
    in batches of mean ``burst`` (1: Poisson; inf: saturated)."""
    st = _state(cost, mix, lam / max(1, pods))
    if st is None:
        return math.inf
    batch, step, rho = st
    w, _, context = _work(cost, mix)
    own = sojourn_ms(w, rho, pods, percentile, burst)
    return step + cost.step_ms(max(1.0, batch), context) + own


def idle_floor_ms(cost: ServiceCost, mix: Mix, percentile: float) -> float:
    """TTFT at ``percentile`` on an idle pod (no load): the percentile's own prefill and
    step, the least any pool of any size gives this mix."""
    return predicted_ttft_ms(cost, mix, 1e-9, percentile)


def reachable_ms(
    cost: ServiceCost, mix: Mix, target_ms: float, percentile: float, slack: float
) -> float:
    """The TTFT target the estimate sizes for: the larger of ``target_ms`` and the floor no
    pool goes under (:func:`idle_floor_ms`) plus ``slack`` of it (at least 5%). More pods
    bring a pool's TTFT towards that floor, never under it; sizing for a target at or
    under it asked for every pod ``replicas.max`` allows (32 pods for 2 req/s of the
    Mooncake conversation trace at p99 800 ms, where the model's floor is 956 ms)."""
    floor = idle_floor_ms(cost, mix, percentile)
    if math.isinf(floor):
        return target_ms
    return max(target_ms, floor * (1.0 + max(0.05, slack)))


def pod_rate(
    cost: ServiceCost,
    mix: Mix,
    target_ms: float,
    percentile: float,
    max_utilization: float = 0.9,
    pods: int = 1,
    burst: float = 1.0,
) -> float:
    """The highest arrival rate (req/s) per pod of a pool of ``pods`` with its TTFT
    percentile within ``target_ms`` and each pod at most ``max_utilization`` of the rate
    that saturates it (the utilisation reaching 1, or the decoding batch outgrowing the
    batch or the KV cache); 0: not even one request (the prefill alone exceeds the target).

    The headroom: near saturation the decoding batch, and with it the step time and the
    TTFT, climbs steeply (the model's p99 at 400 and 500 ms differs by a few percent of
    the rate), so a pool sized at the knee is saturated by the first rate a little over
    the window's mean. The 10% is a constant, not the noise of the window's count: the
    rate moves between 30-s windows by several times a Poisson count's noise on every
    trace measured (p90 6-31%), and a headroom from that noise (5071e61, reverted) or a
    constant 5% missed more on the 10x diurnal day (docs/benchmarks.md, *The headroom
    below saturation, measured*). ``burst``: the arrivals' mean batch size
    (:func:`sojourn_ms`)."""
    if idle_floor_ms(cost, mix, percentile) > target_ms:
        return 0.0
    lo, hi = 0.0, 1.0
    while (
        _ok(cost, mix, hi * pods, pods, target_ms, percentile, max_utilization, burst) and hi < 1e6
    ):
        lo, hi = hi, hi * 2.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if _ok(cost, mix, mid * pods, pods, target_ms, percentile, max_utilization, burst):
            lo = mid
        else:
            hi = mid
    return lo


def _ok(
    cost: ServiceCost,
    mix: Mix,
    lam: float,
    pods: int,
    target: float,
    pct: float,
    max_util: float = 0.9,
    burst: float = 1.0,
) -> bool:
    """``pods`` meet the target at ``lam`` req/s in all, each within ``max_util`` of
    saturation."""
    st = _state(cost, mix, lam / pods)
    if st is None or st[2] > max_util:
        return False
    if max_util > 0 and math.isinf(predicted_ttft_ms(cost, mix, lam / max_util, pct, pods)):
        return False  # within max_util of saturation
    return predicted_ttft_ms(cost, mix, lam, pct, pods, burst) <= target


def replicas_for(
    arrival_rate: float,
    cost: ServiceCost,
    mix: Mix,
    target_ms: float,
    percentile: float,
    highest: int,
    burst: float = 1.0,
) -> int | None:
    """Pods the arrival rate needs to meet the TTFT objective (at most ``highest``): the
    smallest pool that meets it, sharing the rate (proposal 0015); no more than the rate
    over one lone pod's rate, since a shared queue waits no longer than lone ones. None:
    no estimate (no rate, or nothing finished to learn the mix from). ``burst``: the
    arrivals' mean batch size (:func:`burst_size`); a burst one pod cannot clear within
    the target at any rate is spread over the smallest pool that can (more pods never
    wait longer: each takes a smaller share of it)."""
    if arrival_rate <= 0 or mix.requests <= 0:
        return None
    per_pod = pod_rate(cost, mix, target_ms, percentile, burst=burst)
    if per_pod <= 0:
        if burst <= 1.0 or idle_floor_ms(cost, mix, percentile) > target_ms:
            return highest
        lo, hi = 1, highest  # the pool that meets it is within (lo, hi]
        if _ok(cost, mix, arrival_rate, hi, target_ms, percentile, burst=burst):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _ok(cost, mix, arrival_rate, mid, target_ms, percentile, burst=burst):
                    hi = mid
                else:
                    lo = mid
        return hi
    lone = max(1, min(highest, math.ceil(round(arrival_rate / per_pod, 9))))
    for n in range(1, lone):
        if _ok(cost, mix, arrival_rate, n, target_ms, percentile, burst=burst):
            return n
    return lone


def in_flight(cost: ServiceCost, mix: Mix, lam: float, pods: int, burst: float = 1.0) -> float:
    """Requests in flight per pod (decoding, and waiting or prefilling) on ``pods`` sharing
    ``lam`` req/s, by Little's law: ``B`` decoding plus the arrivals of one mean prefill
    sojourn and the step it waits on; inf: saturated. ``burst``: as :func:`sojourn_ms`
    (the mean wait ``c / theta``)."""
    pods = max(1, pods)
    per_pod = lam / pods
    st = _state(cost, mix, per_pod)
    if st is None:
        return math.inf
    batch, step, rho = st
    w, _, _ = _work(cost, mix)
    waits, share = _waits(pods, rho, burst)
    wait = waits * share * w / (pods * (1.0 - rho))
    return batch + per_pod * (step + w + wait) / 1000.0


def replicas_for_concurrency(
    arrival_rate: float,
    cost: ServiceCost,
    mix: Mix,
    per_replica: float,
    lowest: int,
    highest: int,
    burst: float = 1.0,
) -> int | None:
    """The smallest pool, from ``lowest`` (the TTFT estimate's) up to ``highest``, whose
    pods each run at most ``per_replica`` requests at the arrival rate (a concurrency
    objective's model: what a pod runs at that rate, not a lateness to correct). None: no
    estimate."""
    if arrival_rate <= 0 or mix.requests <= 0 or per_replica <= 0:
        return None
    for n in range(max(1, lowest), highest + 1):
        if in_flight(cost, mix, arrival_rate, n, burst) <= per_replica:
            return n
    return highest


def combine(
    model: int | None,
    feedback: int | None,
    *,
    serving: int,
    desired: int,
    late: bool,
    persistent: bool,
    under: bool = False,
) -> int | None:
    """An objective's replicas from the model and its feedback.

    ``model``: the pods the arrival rate needs (:func:`replicas_for`); ``feedback``: what
    the objective's observed value asks for; ``serving``: the active pods that produced it;
    ``desired``: the size the pool converges to (serving plus those warming or promoted);
    ``late``: the observation is over its target beyond tolerance; ``persistent``: the pool
    has been late, with the model saying the serving pods suffice, for a whole window.

    - Under its target (``under``): the model. The observation agrees the pods suffice, and
      the model says how many do; feedback that would hold more (a percentile read off a
      histogram whose bucket spans the target reads near the bucket's top on any pool
      size, proposal 0015) is not taken over it. If the model is short, the pool becomes
      late and the rules below correct it.
    - Not late, over its target within tolerance: the larger of the two (feedback's
      scale-down goes no lower than the model).
    - Late, with pods coming that cover the model (``desired > serving``, ``desired >=
      model``): no more than ``desired``. A backlog's latency and queue ask for many times
      the pods, which arrive after it has cleared; the pods already coming clear it.
    - Late, with the model above the serving pods: the model. The rate explains the
      lateness, and sizes the pool for it.
    - Late although the model says the serving pods suffice: the model is wrong, or the
      window was noisy (a p99 of a few hundred requests is a couple of them). Feedback
      corrects the model once the lateness has lasted a whole window (``persistent``), to
      no more than ``2 * model``; until then it holds ``desired``. The bound is on the
      model, not on the serving pods: a latency no pod count can meet (the tail's own
      prefill over the target) does not grow the pool by one more pod each window.
    """
    if model is None:
        return feedback
    if feedback is None:
        return model
    if not late:
        return model if under else max(model, feedback)
    coming = desired > serving and desired >= model
    if coming or model > serving or not persistent:
        return max(model, min(feedback, desired))
    return max(model, min(feedback, 2 * model))
