"""Scorer ``decode-interference``: the latency a placement adds to the requests already
decoding on the endpoint (ms, summed over them).

An engine runs every running sequence in one forward pass per step, so a request placed on
endpoint p slows each sequence decoding there: its prefill chunks ride in their steps (vLLM's
chunked prefill), and then it decodes beside them, one more sequence per step. The TTFT terms
(``queue``, ``prefix``) see only the new request's own first token; this term prices what
its neighbours pay, so that a cache hit on a busy endpoint is taken only when it saves more
than it costs them. It is not part of the predicted TTFT (it steers, as ``kv-pressure``).

Formula, for endpoint p (``new``/``cached``: the prompt's uncached and cached tokens on p,
as the ``prefix`` scorer predicts them)::

    neighbours  = min(max_num_seqs, in_flight + decoding)
    prefill_add = sum over the chunks of the new tokens (chunk_tokens each, in order):
                  max(0, cost.prefill_ms(chunk, cached before it) - chunk_shared_ms)
    overlap     = min(max_tokens or typical_output_tokens, typical_output_tokens)
    decode_add  = overlap * (decode_seq_ms + decode_kv_ms_per_token * (prompt + overlap / 2))
    interference_ms(p) = neighbours * (prefill_add + decode_add)

- ``prefill_add``: what one neighbour's token latency grows by while the new prompt is
  prefilled. A chunk inside a decode step costs the step its own prefill time less what
  the step pays anyway (weights read once, launches: ``chunk_shared_ms``), measured as
  nearly independent of the batch (``/work/shared/calibration/README.md``,
  ``mixed_step_h100.json``: a 512-token chunk adds 9.3 ms at batch 1 to 128).
- ``decode_add``: one more sequence in each of the next ``overlap`` steps; its marginal
  step cost grows with its context (``levers_h100.json`` / ``mixed_step_h100.json``,
  section ``context``: 0.010 ms per sequence + 0.0424 us per token of KV read). A neighbour
  is assumed to keep decoding for ``typical_output_tokens`` more tokens.
- ``neighbours``: this router's own requests on p, waiting for their first token or
  streaming, not the engine's ``num_running``/``num_waiting``: those are as old as the last
  refresh (1 s), and a request that finished since still counts there. Counting them made
  the scorer herd requests onto whichever endpoint had looked idle at the last refresh and
  cost TTFT and TPOT in the simulator (Azure conv at 59 req/s on 4 GPUs, weight 0.25, TTFT
  p95 from 168 ms at weight 0: 646 ms with the engine's figures, 333 ms with the larger of
  the engine's and the router's, 187 ms with the router's own). Another router's requests
  are not seen (see router/README.md).
- Units: milliseconds of latency added to other requests, summed over them. Its weight
  (``scorers``, default 0.05; see ``config.py`` for how it was chosen) says how many ms of
  the new request's TTFT one ms of neighbours' added latency is worth; 0 turns it off.

Inputs: endpoint ``in_flight``, ``decoding``, ``max_num_seqs``, ``cached_blocks``; request
``prompt_tokens``, ``block_hashes``, ``max_tokens``; ``ctx.history_matches``; the cost
model's ``prefill_ms``. Parameters (``SchedulerConfig``, defaults from the cost model of
``preheat.engine.costmodel`` fitted to the H100 measurement): ``chunk_tokens`` (8192),
``chunk_shared_ms`` (6.54), ``decode_seq_ms`` (0.0096), ``decode_kv_ms_per_token``
(4.25e-5), ``typical_output_tokens`` (256).
"""

from __future__ import annotations

from collections.abc import Mapping

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.plugins.prefix import cached_blocks, cached_tokens
from preheat.core.routing.types import Endpoint, PrefillCost, RequestInfo, RoutingContext


def neighbours(endpoint: Endpoint) -> int:
    """Sequences that will be decoding beside a request placed on ``endpoint`` now: this
    router's own open requests there (see the module docstring for why not the engine's)."""
    ours = max(0, endpoint.in_flight) + max(0, endpoint.decoding)
    return min(max(0, endpoint.max_num_seqs), ours)


def added_step_ms(
    req: RequestInfo, n_cached_blocks: int, cost: PrefillCost, config: SchedulerConfig
) -> float:
    """``prefill_add + decode_add`` of the formula: what one neighbour pays (ms)."""
    prompt = max(0, req.prompt_tokens)
    cached = cached_tokens(req, n_cached_blocks)
    chunk = max(1, config.chunk_tokens)
    shared = config.chunk_shared_ms
    prefill_add = 0.0
    done = cached
    while done < prompt:
        n = min(chunk, prompt - done)
        prefill_add += max(0.0, cost.prefill_ms(n, done) - shared)
        done += n
    typical = max(0, config.typical_output_tokens)
    overlap = min(req.max_tokens, typical) if req.max_tokens > 0 else typical
    per_step = config.decode_seq_ms + config.decode_kv_ms_per_token * (prompt + overlap / 2)
    return prefill_add + overlap * per_step


def interference_ms(
    endpoint: Endpoint, ctx: RoutingContext, cost: PrefillCost, config: SchedulerConfig
) -> float:
    """The formula above for one endpoint."""
    n = neighbours(endpoint)
    if n == 0:
        return 0.0
    return n * added_step_ms(ctx.request, cached_blocks(endpoint, ctx), cost, config)


class DecodeInterference:
    name = "decode-interference"

    def score(self, inp: ScoreInput) -> Mapping[str, float]:
        # one evaluation per distinct cached prefix (most endpoints share none)
        memo: dict[int, float] = {}
        out: dict[str, float] = {}
        ctx, cost, config = inp.ctx, inp.cost, inp.config
        for e in inp.endpoints:
            n = neighbours(e)
            if n == 0:
                out[e.id] = 0.0
                continue
            blocks = cached_blocks(e, ctx)
            per = memo.get(blocks)
            if per is None:
                per = memo[blocks] = added_step_ms(ctx.request, blocks, cost, config)
            out[e.id] = n * per
        return out
