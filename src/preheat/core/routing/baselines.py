"""Baseline pickers, for benchmarks that compare like with like: each takes the filtered
endpoints (non-empty) and returns the choice, the new state and a short detail.

- ``round-robin``: endpoints sorted by id; take ``cursor % n``; the cursor advances by one.
- ``random``: ``hash64("random", seed, request_id) % n`` over endpoints sorted by id.
- ``least-request``: lowest load (running + waiting + in_flight); ties by hash of request id.
- ``p2c``: power of two choices: two distinct endpoints drawn by hashes of the request id,
  the less loaded one wins (the first drawn on a tie).
- ``chwbl``: consistent hashing with bounded loads on the prompt prefix: key = hash64 of
  the chained hash of block ``min(K, len) - 1`` (K = ``chwbl_prefix_blocks``), or of the request id
  when the prompt has no full block; a ring of ``chwbl_virtual_nodes`` points per endpoint;
  walk clockwise from the key to the first endpoint with ``load + 1 <= capacity``
  (``hashing.load_capacity``).
- ``session-only``: rendezvous hashing of the session id with bounded load (as the
  ``session`` scorer: ``session_load_bound``, ``session_load_floor``); least-request
  when the request has no session.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.hashing import hash64, load, load_capacity, rendezvous
from preheat.core.routing.types import Endpoint, RequestInfo


@dataclass(frozen=True)
class SchedulerState:
    """What stateful policies carry between decisions. Default-constructible."""

    rr_cursor: int = 0  # round-robin: index of the next endpoint (in id order)
    seed: int = 0  # random: mixed into the hash of the request id
    # EWMA of the uncached prompt tokens of routed requests: what "a typical request ahead
    # in the queue" costs (the queue scorer); 0 = none routed yet (typical_prompt_tokens)
    new_tokens_ewma: float = 0.0
    # preheat: decisions made so far, and endpoint id -> the decision that last picked it
    # (ties go to the endpoint picked least recently; see scheduler._break_ties)
    decisions: int = 0
    last_picked: Mapping[str, int] = field(default_factory=dict)


Pick = tuple[Endpoint, SchedulerState, str]


def _by_id(endpoints: Sequence[Endpoint]) -> list[Endpoint]:
    return sorted(endpoints, key=lambda e: e.id)


def round_robin(
    endpoints: Sequence[Endpoint], req: RequestInfo, config: SchedulerConfig, state: SchedulerState
) -> Pick:
    eps = _by_id(endpoints)
    i = state.rr_cursor % len(eps)
    return eps[i], replace(state, rr_cursor=state.rr_cursor + 1), f"cursor {i} of {len(eps)}"


def random_pick(
    endpoints: Sequence[Endpoint], req: RequestInfo, config: SchedulerConfig, state: SchedulerState
) -> Pick:
    eps = _by_id(endpoints)
    i = hash64("random", state.seed, req.request_id) % len(eps)
    return eps[i], state, f"draw {i} of {len(eps)}"


def least_request(
    endpoints: Sequence[Endpoint], req: RequestInfo, config: SchedulerConfig, state: SchedulerState
) -> Pick:
    key = req.request_id
    e = min(endpoints, key=lambda e: (load(e), hash64(key, e.id), e.id))
    return e, state, f"load {load(e)}"


def p2c(
    endpoints: Sequence[Endpoint], req: RequestInfo, config: SchedulerConfig, state: SchedulerState
) -> Pick:
    eps = _by_id(endpoints)
    n = len(eps)
    if n == 1:
        return eps[0], state, f"only endpoint, load {load(eps[0])}"
    i = hash64("p2c-a", req.request_id) % n
    j = hash64("p2c-b", req.request_id) % (n - 1)
    if j >= i:
        j += 1
    a, b = eps[i], eps[j]
    e = b if load(b) < load(a) else a
    other = a if e is b else b
    return e, state, f"load {load(e)} vs {load(other)} on {other.id}"


@functools.lru_cache(maxsize=64)
def _ring(ids: tuple[str, ...], vnodes: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    points = sorted((hash64("vnode", eid, v), eid) for eid in ids for v in range(vnodes))
    return tuple(p for p, _ in points), tuple(eid for _, eid in points)


def chwbl_key(req: RequestInfo, prefix_blocks: int) -> int:
    """The ring key of a request: its prompt prefix's chained block hash (see module doc)."""
    if req.block_hashes and prefix_blocks > 0:
        return hash64("chwbl", req.block_hashes[min(prefix_blocks, len(req.block_hashes)) - 1])
    return hash64("request", req.request_id)


def chwbl(
    endpoints: Sequence[Endpoint], req: RequestInfo, config: SchedulerConfig, state: SchedulerState
) -> Pick:
    by_id = {e.id: e for e in endpoints}
    points, owners = _ring(tuple(sorted(by_id)), max(1, config.chwbl_virtual_nodes))
    cap = load_capacity(endpoints, config.session_load_bound)
    key = chwbl_key(req, config.chwbl_prefix_blocks)
    start = bisect.bisect_left(points, key)
    seen: set[str] = set()
    skipped = 0
    for k in range(len(points)):
        eid = owners[(start + k) % len(points)]
        if eid in seen:
            continue
        seen.add(eid)
        e = by_id[eid]
        if load(e) + 1 <= cap:
            return e, state, f"ring walk skipped {skipped} over capacity {cap}"
        skipped += 1
        if len(seen) == len(by_id):
            break
    e = min(endpoints, key=lambda e: (load(e), e.id))
    return e, state, f"every endpoint over capacity {cap}; least loaded"


def session_only(
    endpoints: Sequence[Endpoint], req: RequestInfo, config: SchedulerConfig, state: SchedulerState
) -> Pick:
    if not req.session_id:
        e, state, detail = least_request(endpoints, req, config, state)
        return e, state, f"no session; least-request, {detail}"
    bound = rendezvous(
        req.session_id, endpoints, config.session_load_bound, config.session_load_floor
    )
    assert bound is not None  # endpoints is non-empty
    return bound, state, f"session {req.session_id!r} bound by rendezvous hashing"
