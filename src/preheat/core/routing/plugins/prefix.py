"""Scorer ``prefix``: prefill time (ms) of the part of the prompt not cached on the endpoint.

Formula::

    cached  = longest leading run of request.block_hashes found on p
                - precisely in endpoint.cached_blocks (the worker's WatchCache), when known,
                - else approximately: ctx.history_matches[p.id] (this router's history)
    cached_tokens = min(cached * request.block_size, prompt_tokens - 1)
    prefill_ms    = cost.prefill_ms(prompt_tokens - cached_tokens, cached_tokens)

At least one token is always recomputed (an engine needs the last token's logits).
Inputs: request ``prompt_tokens``, ``block_hashes``, ``block_size``; endpoint
``cached_blocks``; ``ctx.history_matches``; the cost model. No parameters.
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.types import Endpoint, PrefillCost, RequestInfo, RoutingContext


def cached_blocks(endpoint: Endpoint, ctx: RoutingContext) -> int:
    """Leading blocks of the request predicted to hit the endpoint's prefix cache."""
    hashes = ctx.request.block_hashes
    if endpoint.cached_blocks is not None:
        n = 0
        for h in hashes:
            if h not in endpoint.cached_blocks:
                break
            n += 1
        return n
    return max(0, min(len(hashes), ctx.history_matches.get(endpoint.id, 0)))


def prefill_ms(endpoint: Endpoint, ctx: RoutingContext, cost: PrefillCost) -> float:
    """The formula above for one endpoint."""
    return _prefill_for_blocks(cached_blocks(endpoint, ctx), ctx, cost)


def cached_tokens(req: RequestInfo, n_cached: int) -> int:
    """``cached_tokens`` of the formula: the prompt tokens ``n_cached`` leading blocks hit."""
    return max(0, min(n_cached * req.block_size, max(0, req.prompt_tokens) - 1))


def new_tokens(req: RequestInfo, n_cached: int) -> int:
    """The prompt tokens an engine prefills when ``n_cached`` leading blocks hit."""
    return max(0, req.prompt_tokens) - cached_tokens(req, n_cached)


def _prefill_for_blocks(n_cached: int, ctx: RoutingContext, cost: PrefillCost) -> float:
    cached = cached_tokens(ctx.request, n_cached)
    return cost.prefill_ms(new_tokens(ctx.request, n_cached), cached)


class Prefix:
    name = "prefix"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        # endpoints with the same cached prefix (most often none) cost the same: one cost
        # model evaluation per distinct prefix length, not per endpoint
        memo: dict[int, float] = {}
        out: dict[str, float] = {}
        for e in inp.endpoints:
            n = cached_blocks(e, inp.ctx)
            ms = memo.get(n)
            if ms is None:
                ms = memo[n] = _prefill_for_blocks(n, inp.ctx, inp.cost)
            out[e.id] = ms
        return out
