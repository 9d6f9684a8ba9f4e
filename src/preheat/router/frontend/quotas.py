"""Tenant quotas at the router: one request bucket and one token bucket per tenant
(``preheat.core.traffic.quota``), from the pool's ``traffic.tenants`` table.

- **Who**: the tenant of the request's API key, else the trusted tenant header
  (``--tenant-header``; ``preheat up`` reads ``x-tenant`` when a pool lists tenants); its
  table entry, else the ``*`` entry (each unlisted tenant gets buckets of its own at those
  limits). No tenant named and no ``*`` entry: unlimited.
- **What it costs**: one request; prompt tokens + ``max_tokens`` from the token bucket,
  reconciled when the request ends (:meth:`Quotas.settle`: what it did not generate comes
  back).
- **Over quota**: :class:`RateLimited`, a RESOURCE_EXHAUSTED (429 / gRPC
  RESOURCE_EXHAUSTED) with ``retry_after_s`` from the bucket (when it will hold the cost
  again) and OpenAI's ``x-ratelimit-*`` headers; a request that needs more tokens than the
  bucket can ever hold is INVALID_ARGUMENT (retrying cannot help).
- **Replicas**: the state is per router replica; with N replicas behind a balancer that
  spreads a tenant's requests evenly, each admits up to the configured rate, so the
  tenant's total is up to N times it: configure ``rate / N`` per replica for a global
  limit (the chart's replica count is known when it renders), or pin a tenant's traffic to
  one replica by a consistent hash on its key at the balancer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.traffic import quota as tb
from preheat.core.traffic.classes import TenantQuota, Traffic

MAX_TRACKED = 10_000  # unlisted tenants' buckets kept before full ones are dropped
LIMIT_REQUESTS = "requests"
LIMIT_TOKENS = "tokens"


class RateLimited(PreheatError):
    """Over a tenant's quota: 429 with Retry-After and OpenAI's rate-limit headers."""

    def __init__(self, message: str, retry_after_s: float, headers: dict[str, str], limit: str):
        super().__init__(ErrorCode.RESOURCE_EXHAUSTED, message, retry_after_s=retry_after_s)
        self.headers = headers
        self.limit = limit


@dataclass(frozen=True)
class Grant:
    """What a request took: the entry, the tokens it was charged, the response headers."""

    tenant: str
    entry: str  # the table entry's name ("*" for an unlisted tenant)
    tokens: float
    headers: dict[str, str]


def _duration(s: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``120ms``."""
    if s < 1:
        return f"{max(0, round(s * 1000))}ms"
    m, sec = divmod(s, 60)
    return f"{int(m)}m{sec:.0f}s" if m else f"{sec:.3g}s"


class Quotas:
    """The buckets of one pool's tenants on this router replica."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], tb.Bucket] = {}

    def take(self, traffic: Traffic, tenant: str, tokens: int, now: float) -> Grant | None:
        """Charges one request of ``tokens`` (prompt + max output) to ``tenant`` at
        ``now``; None when no quota applies. Raises :class:`RateLimited` over a limit."""
        q = traffic.quota(tenant) if traffic.tenants else None
        if q is None:
            return None
        headers: dict[str, str] = {}
        req_rate, req_depth = q.requests_per_s, q.request_depth
        tok_rate, tok_depth = q.tokens_per_min / 60.0, q.token_depth
        if q.tokens_per_min and tokens > tok_depth:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT,
                f"the request needs {tokens} tokens (prompt + max_tokens), more than tenant "
                f"{tenant!r}'s token burst of {tok_depth:g}: lower max_tokens or the prompt",
                param="max_tokens",
            )
        req_key, tok_key = (tenant, LIMIT_REQUESTS), (tenant, LIMIT_TOKENS)
        req_take = tok_take = None
        if q.requests_per_s:
            b = self._buckets.get(req_key) or tb.full(req_depth, now)
            req_take = tb.take(b, req_rate, req_depth, 1.0, now)
            headers |= _headers(LIMIT_REQUESTS, req_depth, req_take)
        if q.tokens_per_min:
            b = self._buckets.get(tok_key) or tb.full(tok_depth, now)
            tok_take = tb.take(b, tok_rate, tok_depth, float(tokens), now)
            headers |= _headers(LIMIT_TOKENS, tok_depth, tok_take)
        for take, limit in ((req_take, LIMIT_REQUESTS), (tok_take, LIMIT_TOKENS)):
            if take is not None and not take.ok:
                self._buckets[(tenant, limit)] = take.bucket
                rate = (
                    f"{q.requests_per_s:g} requests/s (burst {req_depth:g})"
                    if limit == LIMIT_REQUESTS
                    else f"{q.tokens_per_min:g} tokens/min (burst {tok_depth:g})"
                )
                raise RateLimited(
                    f"rate limit exceeded for tenant {tenant or q.name!r}: {rate}; retry in "
                    f"{take.retry_after_s:.2g}s",
                    take.retry_after_s,
                    headers,
                    limit,
                )
        if req_take is not None:
            self._buckets[req_key] = req_take.bucket
        if tok_take is not None:
            self._buckets[tok_key] = tok_take.bucket
        self._trim(traffic, now)
        return Grant(tenant, _entry(q), float(tokens) if q.tokens_per_min else 0.0, headers)

    def settle(self, traffic: Traffic, grant: Grant, used_tokens: int, now: float) -> None:
        """The request ended having used ``used_tokens`` (prompt + output): the rest of
        what it was charged goes back to its token bucket."""
        q = traffic.quota(grant.tenant) if traffic.tenants else None
        key = (grant.tenant, LIMIT_TOKENS)
        b = self._buckets.get(key)
        if q is None or not grant.tokens or b is None:
            return
        back = grant.tokens - used_tokens
        self._buckets[key] = tb.refund(b, q.tokens_per_min / 60.0, q.token_depth, back, now)

    def _trim(self, traffic: Traffic, now: float) -> None:
        if len(self._buckets) <= MAX_TRACKED:
            return
        for key, b in list(self._buckets.items()):
            q = traffic.quota(key[0])
            if q is None:
                del self._buckets[key]
                continue
            rate, depth = _shape(q, key[1])
            if tb.refill(b, rate, depth, now).level >= depth:
                del self._buckets[key]  # full again: the same as never seen


def _shape(q: TenantQuota, limit: str) -> tuple[float, float]:
    if limit == LIMIT_REQUESTS:
        return q.requests_per_s, q.request_depth
    return q.tokens_per_min / 60.0, q.token_depth


def _entry(q: TenantQuota) -> str:
    return q.name


def _headers(limit: str, depth: float, take: tb.Take) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{limit}": f"{depth:g}",
        f"x-ratelimit-remaining-{limit}": str(max(0, math.floor(take.remaining))),
        f"x-ratelimit-reset-{limit}": _duration(take.reset_s),
    }
