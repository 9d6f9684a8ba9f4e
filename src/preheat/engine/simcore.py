"""The sim engine's core: vLLM-like continuous batching over a cost model, advanced by events.

Pure: no asyncio, no clock. Every call takes the time (seconds, any origin) from its caller,
so the same core runs under the real-clock :class:`~preheat.engine.sim.SimEngine` and under
the discrete-event simulator.

What it models, after vLLM's V1 scheduler:

- **Continuous batching**: each iteration schedules running requests first (oldest first),
  then admits waiting ones (FCFS) while there are fewer than ``max_num_seqs`` running and
  token budget (``max_num_batched_tokens``) left. Prefills are chunked to the budget.
- **Scheduling policy** (``scheduling_policy``, vLLM's ``--scheduling-policy``): ``fcfs``
  (the default) as above; ``priority`` as vLLM 0.32's ``v1/core/sched``: the waiting queue
  is a heap on (priority, arrival), lower first (``PriorityRequestQueue``, the ordering of
  ``Request.__lt__``; vLLM stamps each arrival with ``time.time()`` as the request comes
  in, so where a caller here passes equal times, e.g. a trace's same-second rows, they are
  ordered as received, where vLLM's request-id tie-break would never be reached), and
  when a running request needs KV that is not free the victim is the running request with
  the largest (priority, arrival), not the newest; a victim already scheduled in this step
  gives its tokens back to the budget. As in vLLM, a waiting request never preempts a
  running one by itself: waiting requests are admitted only when nothing was preempted in
  the step, while slots, budget and KV last.
- **Paged KV** of ``num_gpu_blocks`` blocks of ``block_size`` tokens, allocated as a
  request's computed tokens grow.
- **Prefix caching**: every full block is named by :func:`preheat.core.blocks.block_hash`
  (chained); a new request reuses the longest cached prefix of full blocks, at most
  ``prompt_len - 1`` tokens (vLLM always computes at least the last prompt token to get
  logits). Blocks no request references stay cached and are evicted LRU when needed.
- **Preemption** by recompute: when KV runs out, the newest running request (``fcfs``; the
  lowest-priority one under ``priority``) goes back to the front of the waiting queue (its
  place in the priority order) and its blocks are freed (their hashes stay cached until
  evicted, so the recompute often hits the cache).
- **Abort** frees the sequence and its blocks at once.

Time advances by *plans*: a prefill (or mixed) iteration is a one-step plan; a run of pure
decode iterations with an unchanged batch is one plan of ``n`` steps of constant duration
``dt``, so the token times of a whole stretch are ``start + (j + 1) * dt``. A stretch ends at
the first finish in the batch, after ``max_stretch_steps`` steps (so the growing context is
re-costed), or where an ``add``/``abort`` re-plans it from the next step boundary.
:meth:`SimCore.advance` commits every step that ends at or before ``until`` and returns the
tokens as runs (one :class:`TokenRun` per request per call, not one object per token).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, KeysView, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from preheat.core.blocks import MAX_GPU_BLOCKS, ROOT_HASH, block_hash, tenant_root
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.sampling import SamplingOptions
from preheat.engine.base import (
    CacheEvent,
    CacheEventKind,
    EngineRequest,
    FinishReason,
    StageTiming,
    Usage,
)
from preheat.engine.costmodel import CostModel

CacheCallback = Callable[[CacheEvent], None]
SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class CoreConfig:
    """Scheduler and memory shape of one simulated replica (see ``SimConfig`` for defaults)."""

    block_size: int = 16
    num_gpu_blocks: int = 25_000
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32_768
    vocab_size: int = 32_000
    seed: int = 0
    eos_probability: float = 0.0  # per generated token; 0 = run to max_tokens
    max_stretch_steps: int = 32  # re-cost a decode stretch at least this often
    scheduling_policy: str = "fcfs"  # or "priority" (vLLM's --scheduling-policy)

    def __post_init__(self) -> None:
        """Every field out of range, at once (ValueError): a replica with no KV blocks, no
        batch or no token budget would never run a request (a budget of 0 tokens spun the
        scheduler forever)."""
        problems = [
            f"{name} must be >= 1, got {getattr(self, name)}"
            for name in (
                "block_size",
                "num_gpu_blocks",
                "max_num_seqs",
                "max_num_batched_tokens",
                "max_model_len",
                "vocab_size",
                "max_stretch_steps",
            )
            if not getattr(self, name) >= 1
        ]
        for name, top, why in (
            # 10**12 was a MemoryError, 10**9 took 8 GB (preheat.core.blocks)
            ("num_gpu_blocks", MAX_GPU_BLOCKS, "a GPU holds tens of thousands"),
            # token ids are uint32 on the wire and in the prefix hashes
            ("vocab_size", 2**32, "token ids are 32-bit"),
        ):
            if getattr(self, name) > top:
                problems.append(f"{name} must be <= {top:,} ({why}), got {getattr(self, name):,}")
        if not 0.0 <= self.eos_probability <= 1.0:
            problems.append(f"eos_probability must be within [0, 1], got {self.eos_probability}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            problems.append(
                f"scheduling_policy must be one of {', '.join(SCHEDULING_POLICIES)}, "
                f"got {self.scheduling_policy!r}"
            )
        if problems:
            raise ValueError("; ".join(problems))


class TokenRun(NamedTuple):
    """``len(token_ids)`` consecutive output tokens of one request: token ``first_index + j``
    was produced at ``t_first + j * dt``. A named tuple, not a frozen dataclass: one is
    made per scheduled request per commit, the simulator's most frequent object, and a
    tuple is made in well under half the time."""

    request_id: str
    first_index: int
    token_ids: tuple[int, ...]
    t_first: float
    dt: float

    @property
    def t_last(self) -> float:
        return self.t_first + (len(self.token_ids) - 1) * self.dt


@dataclass(frozen=True, slots=True)
class Finish:
    request_id: str
    reason: FinishReason
    time: float  # of the last token (or of the abort)
    usage: Usage
    timing: StageTiming
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class Emissions:
    runs: tuple[TokenRun, ...]
    finishes: tuple[Finish, ...]


@dataclass
class CoreCounters:
    """Cumulative counters, named and counted as vLLM's metrics are."""

    prefix_cache_queries: int = 0  # tokens looked up (prompt tokens of newly scheduled reqs)
    prefix_cache_hits: int = 0  # of which found in the cache
    num_preemptions: int = 0
    prompt_tokens: int = 0  # prompt tokens of requests that produced their first token
    generation_tokens: int = 0
    requests_finished: dict[FinishReason, int] = field(
        default_factory=lambda: dict.fromkeys(FinishReason, 0)
    )


@dataclass(eq=False)
class _Seq:
    request_id: str
    prompt: tuple[int, ...]
    arrival: float
    stop_at: int  # number of output tokens at which it finishes
    stop_reason: FinishReason
    rng: random.Random
    output: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is in its blocks
    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # of full blocks of prompt+output
    num_stored: int = 0  # blocks registered in the prefix cache
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    cached_tokens: int = 0
    num_preemptions: int = 0
    root: int = ROOT_HASH  # the chain's root: the request's cache salt (tenant_root)
    priority: int = 0  # lower runs first (scheduling_policy "priority" only)
    # the order of receipt: vLLM stamps each request's arrival_time with time.time() as it
    # comes in, so two requests never share one; callers here may pass equal times (a
    # trace's same-second rows), and this keeps their order the order they came in
    received: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    def block_tokens(self, i: int, block_size: int) -> tuple[int, ...] | list[int]:
        a, b = i * block_size, (i + 1) * block_size
        p = len(self.prompt)
        if b <= p:
            return self.prompt[a:b]
        if a >= p:
            return self.output[a - p : b - p]
        return [*self.prompt[a:], *self.output[: b - p]]

    def hash_upto(self, nblocks: int, block_size: int) -> None:
        hashes = self.hashes
        while len(hashes) < nblocks:
            parent = hashes[-1] if hashes else self.root
            hashes.append(block_hash(parent, self.block_tokens(len(hashes), block_size)))


class _BlockPool:
    """Paged KV blocks with refcounts, a prefix cache (hash -> block) and an LRU free queue.

    Free blocks (refcount 0) sit in ``free`` in eviction order, oldest first; a free block may
    still hold a cached hash until it is reallocated (then a REMOVED event fires)."""

    def __init__(self, num_blocks: int, emit: Callable[[CacheEventKind, list[int]], None]):
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._emit = emit

    def lookup(self, hashes: list[int], max_blocks: int) -> list[int]:
        out: list[int] = []
        for h in hashes[:max_blocks]:
            b = self.cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def num_free_excluding(self, blocks: list[int]) -> int:
        return len(self.free) - sum(1 for b in blocks if self.ref[b] == 0)

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        if n <= 0:  # most calls: a sequence whose next tokens fit its last block
            return []
        assert n <= len(self.free)
        popitem = self.free.popitem
        hash_of, ref, cached = self.hash_of, self.ref, self.cached
        out = [popitem(last=False)[0] for _ in range(n)]
        removed: list[int] = []
        for b in out:
            h = hash_of[b]
            if h is not None:
                del cached[h]
                hash_of[b] = None
                removed.append(h)
            ref[b] = 1
        if removed:
            self._emit(CacheEventKind.REMOVED, removed)
        return out

    def release(self, blocks: list[int]) -> None:
        # Tail blocks first, so that they are evicted before the shared prefix (as vLLM).
        ref, free = self.ref, self.free
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def store(self, b: int, h: int) -> bool:
        if h in self.cached or self.hash_of[b] is not None:
            return False
        self.cached[h] = b
        self.hash_of[b] = h
        return True

    def store_range(self, blocks: list[int], hashes: list[int], start: int, end: int) -> list[int]:
        """:meth:`store` for blocks ``start..end-1``; the hashes newly stored, in order."""
        cached, hash_of = self.cached, self.hash_of
        stored: list[int] = []
        for i in range(start, end):
            b, h = blocks[i], hashes[i]
            if h in cached or hash_of[b] is not None:
                continue
            cached[h] = b
            hash_of[b] = h
            stored.append(h)
        return stored

    @property
    def usage(self) -> float:
        return 1.0 - len(self.free) / self.num_blocks


@dataclass
class _Plan:
    start: float
    dt: float
    n: int  # steps left
    work: list[tuple[_Seq, int]]  # (seq, new tokens computed per step)


class SimCore:
    """One simulated replica. Not thread-safe; drive it from one task or loop."""

    def __init__(
        self,
        config: CoreConfig,
        cost: CostModel,
        on_cache_event: CacheCallback | None = None,
    ) -> None:
        self.config = config
        self.cost = cost
        self.on_cache_event = on_cache_event
        self.counters = CoreCounters()
        self._pool = _BlockPool(config.num_gpu_blocks, self._emit_cache)
        self._seqs: dict[str, _Seq] = {}
        self._priority = config.scheduling_policy == "priority"
        self._waiting: deque[_Seq] | _PriorityQueue = (
            _PriorityQueue() if self._priority else deque()
        )
        self._running: list[_Seq] = []
        self._plan: _Plan | None = None
        self._clock = 0.0  # the engine is busy until here
        self._started = False
        self._received = 0  # requests added so far (each one's ``_Seq.received``)

    # --- observers ----------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def waiting_by_priority(self) -> dict[int, int]:
        """The waiting requests by priority (under FCFS too: the router's queue term counts
        only those at a request's priority and above when the pool runs ``priority``)."""
        counts: dict[int, int] = {}
        for seq in self._waiting:
            counts[seq.priority] = counts.get(seq.priority, 0) + 1
        return counts

    def has_work(self) -> bool:
        """Requests running or waiting (False: idle, nothing will happen until an add)."""
        return bool(self._running or self._waiting)

    @property
    def kv_cache_usage(self) -> float:
        return self._pool.usage

    def cached_blocks(self) -> frozenset[int]:
        return frozenset(self._pool.cached)

    def cached_view(self) -> KeysView[int]:
        """The prefix cache's block hashes as a live, read-only view (no copy): what a
        ``WatchCache`` subscriber would hold after applying every event so far."""
        return self._pool.cached.keys()

    def has_request(self, request_id: str) -> bool:
        return request_id in self._seqs

    def blocks_of(self, request_id: str) -> int:
        s = self._seqs.get(request_id)
        return 0 if s is None else len(s.blocks)

    # --- inputs -------------------------------------------------------------------------
    def add(
        self,
        request: EngineRequest,
        now: float,
        block_hashes: Sequence[int] | None = None,
    ) -> Emissions:
        """Queue ``request`` arriving at ``now``; returns what ``advance(now)`` committed.

        ``block_hashes``: the names of the prompt's full blocks (``len(prompt) //
        block_size`` of them), when the caller already has them (the discrete-event
        simulator names blocks without hashing token ids); None: hashed from the tokens.
        """
        cfg = self.config
        if request.request_id in self._seqs:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT, f"request id {request.request_id!r} is in flight"
            )
        n_prompt = len(request.prompt_token_ids)
        max_tokens = request.sampling.max_tokens
        if n_prompt == 0 or max_tokens <= 0:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT, "prompt must be non-empty and max_tokens > 0"
            )
        if n_prompt + max_tokens > cfg.max_model_len:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT,
                f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"model's context length {cfg.max_model_len}; shorten the prompt or max_tokens",
            )
        if math.ceil((n_prompt + max_tokens) / cfg.block_size) > cfg.num_gpu_blocks:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT,
                f"request needs more KV blocks than the engine has ({cfg.num_gpu_blocks})",
            )
        out = self.advance(now)
        seed = request.sampling.seed
        rng = random.Random(f"{cfg.seed}:{request.request_id}" if seed is None else seed)
        stop_at, reason = max_tokens, FinishReason.LENGTH
        p = cfg.eos_probability
        opts = request.sampling.options
        if p > 0.0 and not request.sampling.ignore_eos:
            # Geometric length: EOS after each token with probability p (not within the
            # first min_tokens, as vLLM masks it there).
            u = rng.random()
            n_eos = 1 + int(math.log(1.0 - u) / math.log(1.0 - p)) if p < 1.0 else 1
            n_eos += opts.min_tokens
            if n_eos < max_tokens:
                stop_at, reason = n_eos, FinishReason.STOP
        if opts.stop_token_ids:
            stop_at, reason = _first_stop_id(rng, cfg.vocab_size, opts, stop_at, reason)
        seq = _Seq(request.request_id, request.prompt_token_ids, now, stop_at, reason, rng)
        seq.root = tenant_root(request.cache_salt)
        seq.priority = request.priority
        self._received += 1
        seq.received = self._received
        n_full = n_prompt // cfg.block_size
        if block_hashes is not None:
            if len(block_hashes) != n_full:
                raise PreheatError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{len(block_hashes)} block hashes given for a prompt of {n_prompt} tokens "
                    f"({n_full} full blocks of {cfg.block_size})",
                )
            seq.hashes = list(block_hashes)
        seq.hash_upto(n_full, cfg.block_size)
        self._seqs[seq.request_id] = seq
        self._waiting.append(seq)
        self._interrupt(now)
        return out

    def abort(self, request_id: str, now: float) -> Emissions:
        """Abort ``request_id`` at ``now`` (no-op if unknown or finished). The returned
        emissions include everything committed up to ``now`` and the abort's Finish."""
        out = self.advance(now)
        seq = self._seqs.get(request_id)
        if seq is None:
            return out
        self._interrupt(now)
        plan = self._plan
        if plan is not None:
            plan.work = [(s, k) for s, k in plan.work if s is not seq]
            if not plan.work:  # the GPU is busy until the step ends, then idle
                self._clock = plan.start + plan.dt
                self._plan = None
        if seq in self._running:
            self._running.remove(seq)
        else:
            self._waiting.remove(seq)
        fin = self._finish(seq, FinishReason.ABORT, now)
        return Emissions(out.runs, (*out.finishes, fin))

    # --- time ---------------------------------------------------------------------------
    def next_token_time(self) -> float | None:
        """End of the next iteration (when its tokens come out), or None when idle."""
        plan = self._ensure_plan()
        return None if plan is None else plan.start + plan.dt

    def step_rhythm(self, at: float) -> tuple[float, float] | None:
        """``(end, dt)``: the last step boundary at or before ``at`` (s) and the length of
        the step then in progress, as the tokens streamed from this engine show them; None
        when no step is planned. It plans and commits nothing (a driver that asked
        :meth:`next_event_time` after its last change has the plan in place)."""
        plan = self._plan
        if plan is None or plan.dt <= 0:
            return None
        k = min(plan.n, max(0, math.floor((at - plan.start) / plan.dt + 1e-9)))
        return plan.start + k * plan.dt, plan.dt

    def next_event_time(self) -> float | None:
        """End of the current plan: the next change of batch composition, or None."""
        plan = self._ensure_plan()
        return None if plan is None else plan.start + plan.n * plan.dt

    def advance(self, until: float) -> Emissions:
        """Commit every iteration that ends at or before ``until``."""
        runs: list[TokenRun] = []
        finishes: list[Finish] = []
        while True:
            if self._plan is None and until <= self._clock:
                break  # nothing can end by then; arrivals at this instant batch together
            plan = self._ensure_plan()
            if plan is None:
                break
            if plan.dt > 0:
                k = min(plan.n, math.floor((until - plan.start) / plan.dt + 1e-9))
            else:
                k = plan.n
            if k <= 0:
                break
            self._commit(plan, k, runs, finishes)
            plan.start += k * plan.dt
            plan.n -= k
            self._clock = plan.start
            if plan.n > 0:
                break
            self._plan = None
        if self._plan is None and not self._running and not self._waiting:
            self._clock = max(self._clock, until)
        return Emissions(tuple(runs), tuple(finishes))

    # --- internals ----------------------------------------------------------------------
    def _emit_cache(self, kind: CacheEventKind, hashes: list[int]) -> None:
        if self.on_cache_event is not None:
            self.on_cache_event(CacheEvent(kind, tuple(hashes)))

    def _interrupt(self, now: float) -> None:
        """Something changed at ``now``: finish the iteration in progress, then re-plan."""
        plan = self._plan
        if plan is None:
            self._clock = max(self._clock, now)
        elif plan.n > 1:
            plan.n = 1

    def _ensure_plan(self) -> _Plan | None:
        if self._plan is None:
            self._plan = self._schedule(self._clock)
        return self._plan

    def _preempt(self, seq: _Seq) -> None:
        self._pool.release(seq.blocks)
        seq.blocks = []
        seq.num_computed = 0
        seq.num_stored = 0
        seq.num_preemptions += 1
        self.counters.num_preemptions += 1
        self._waiting.appendleft(seq)

    def _schedule(self, now: float) -> _Plan | None:
        cfg = self.config
        pool = self._pool
        budget = cfg.max_num_batched_tokens
        bs = cfg.block_size
        free = pool.free
        work: list[tuple[_Seq, int]] = []
        preempted = False
        idx = 0
        # the hot loop (every running sequence, every step): _Seq.num_tokens and the blocks
        # a sequence lacks for its next tokens inlined, and no allocation call for a
        # sequence whose next tokens fit its last block
        while idx < len(self._running) and budget > 0:
            seq = self._running[idx]
            num_new = len(seq.prompt) + len(seq.output) - seq.num_computed
            if num_new > budget:
                num_new = budget
            need = -(-(seq.num_computed + num_new) // bs) - len(seq.blocks)
            if need <= 0:
                work.append((seq, num_new))
                budget -= num_new
                idx += 1
                continue
            self_preempted = False
            while need > len(free):
                # Out of KV: preempt the newest running request (vLLM's recompute policy),
                # under "priority" the one with the largest (priority, arrival)
                if self._priority:
                    victim = max(self._running, key=_priority_key)
                    at = self._running.index(victim)
                    del self._running[at]
                    if at < idx:
                        idx -= 1
                        for j, (s, n) in enumerate(work):
                            if s is victim:  # scheduled earlier in this step: undone
                                del work[j]
                                budget += n
                                break
                else:
                    victim = self._running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    self_preempted = True
                    break
            if self_preempted:
                break
            seq.blocks.extend(pool.allocate(need))
            work.append((seq, num_new))
            budget -= num_new
            idx += 1
        if not preempted:
            while self._waiting and len(self._running) < cfg.max_num_seqs and budget > 0:
                seq = self._waiting[0]
                n_tok = seq.num_tokens
                seq.hash_upto(n_tok // cfg.block_size, cfg.block_size)
                hits = pool.lookup(seq.hashes, (n_tok - 1) // cfg.block_size)
                computed = len(hits) * cfg.block_size
                num_new = min(n_tok - computed, budget)
                need = math.ceil((computed + num_new) / cfg.block_size) - len(hits)
                if need > pool.num_free_excluding(hits):
                    break
                self._waiting.popleft()
                pool.touch(hits)
                seq.blocks = hits + pool.allocate(need)
                seq.num_computed = computed
                seq.num_stored = len(hits)
                if seq.first_scheduled is None:
                    seq.first_scheduled = now
                    seq.cached_tokens = computed
                    self.counters.prefix_cache_queries += n_tok
                    self.counters.prefix_cache_hits += computed
                self._running.append(seq)
                work.append((seq, num_new))
                budget -= num_new
        if not work:
            if preempted and self._waiting:
                return self._schedule(now)  # everything was preempted: admit afresh
            return None
        chunks: list[tuple[int, int]] = []
        decodes = 0
        decode_kv = 0
        for seq, num_new in work:
            if num_new == 1 and seq.output:
                decodes += 1
                decode_kv += seq.num_computed + 1
            else:
                chunks.append((num_new, seq.num_computed))
        dt = self.cost.step_ms(chunks, decodes, decode_kv) / 1000.0
        n = 1
        # A pure-decode batch stays the same until a finish: nothing waiting could be
        # admitted now (no slot, KV or budget) and none of those grows before a finish.
        if not chunks and not preempted:
            n = self._stretch_length(work)
            if n > 1:
                dt = self._stretch_dt(work, n)
        return _Plan(now, dt, n, work)

    def _stretch_length(self, work: list[tuple[_Seq, int]]) -> int:
        n = min(self.config.max_stretch_steps, *(s.stop_at - len(s.output) for s, _ in work))
        bs = self.config.block_size
        while n > 1:  # the blocks each sequence lacks for n more tokens
            needs = [max(0, -(-(s.num_computed + n) // bs) - len(s.blocks)) for s, _ in work]
            if sum(needs) <= len(self._pool.free):
                for (s, _), need in zip(work, needs, strict=True):
                    s.blocks.extend(self._pool.allocate(need))
                return n
            n //= 2
        return 1

    def _stretch_dt(self, work: list[tuple[_Seq, int]], n: int) -> float:
        # Cost the stretch at its middle step (contexts grow by one token per step).
        kv = sum(s.num_computed + 1 for s, _ in work) + len(work) * (n - 1) // 2
        return self.cost.step_ms((), len(work), kv) / 1000.0

    def _commit(self, plan: _Plan, k: int, runs: list[TokenRun], finishes: list[Finish]) -> None:
        # the hot loop (every scheduled sequence, every commit): locals bound once, one
        # token drawn without a list, and the work list filtered only when one finished
        bs = self.config.block_size
        vocab = self.config.vocab_size
        start, dt = plan.start, plan.dt
        t_first = start + dt
        t_last = start + k * dt
        finished = False
        generated = 0
        for seq, num_new in plan.work:
            output = seq.output
            if k > 1:  # a decode stretch: one token per step
                seq.num_computed += k
                emit = k
            else:
                seq.num_computed += num_new
                emit = 1 if seq.num_computed >= len(seq.prompt) + len(output) else 0
            toks: tuple[int, ...] = ()
            if emit:
                rand = seq.rng.random
                if emit == 1:
                    toks = (int(rand() * vocab),)
                else:
                    toks = tuple([int(rand() * vocab) for _ in range(emit)])
                first_index = len(output)
                output.extend(toks)
            full = seq.num_computed // bs
            if full > seq.num_stored:
                seq.hash_upto(full, bs)
                stored = self._pool.store_range(seq.blocks, seq.hashes, seq.num_stored, full)
                seq.num_stored = full
                if stored:
                    self._emit_cache(CacheEventKind.STORED, stored)
            if not emit:
                continue  # a prefill chunk that does not reach the end of the prompt
            if seq.first_token is None:
                seq.first_token = t_first
                self.counters.prompt_tokens += len(seq.prompt)
            seq.last_token = t_last
            generated += emit
            runs.append(TokenRun(seq.request_id, first_index, toks, t_first, dt))
            if len(output) >= seq.stop_at:
                self._running.remove(seq)
                finishes.append(self._finish(seq, seq.stop_reason, t_last))
                finished = True
        self.counters.generation_tokens += generated
        if finished:  # (an abort filters the plan itself)
            plan.work = [(s, n) for s, n in plan.work if self._seqs.get(s.request_id) is s]

    def _finish(self, seq: _Seq, reason: FinishReason, now: float) -> Finish:
        self._pool.release(seq.blocks)
        seq.blocks = []
        del self._seqs[seq.request_id]
        self.counters.requests_finished[reason] += 1
        sched = seq.first_scheduled if seq.first_scheduled is not None else now
        first = seq.first_token if seq.first_token is not None else now
        last = seq.last_token if seq.last_token is not None else first
        timing = StageTiming(
            queue_s=sched - seq.arrival, prefill_s=first - sched, decode_s=last - first
        )
        usage = Usage(len(seq.prompt), seq.cached_tokens, len(seq.output))
        return Finish(seq.request_id, reason, now, usage, timing, seq.num_preemptions)


def _priority_key(seq: _Seq) -> tuple[int, float, int]:
    """vLLM's (priority, arrival_time); equal arrival times (which vLLM's own stamps never
    are) in the order received."""
    return (seq.priority, seq.arrival, seq.received)


class _PriorityQueue:
    """The waiting queue under ``scheduling_policy="priority"``: vLLM's
    ``PriorityRequestQueue``, a heap on (priority, arrival) (:func:`_priority_key`);
    "prepending" a preempted request puts it back at its place in that order, as vLLM
    does."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, _Seq]] = []

    def append(self, seq: _Seq) -> None:
        heapq.heappush(self._heap, (*_priority_key(seq), seq))

    appendleft = append

    def popleft(self) -> _Seq:
        return heapq.heappop(self._heap)[3]

    def __getitem__(self, i: int) -> _Seq:
        if i != 0:
            raise IndexError("only the head of a priority queue can be read")
        return self._heap[0][3]

    def remove(self, seq: _Seq) -> None:
        self._heap = [e for e in self._heap if e[3] is not seq]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[_Seq]:
        """The waiting requests, in no particular order."""
        return (e[3] for e in self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)


def _first_stop_id(
    rng: random.Random,
    vocab_size: int,
    opts: SamplingOptions,
    stop_at: int,
    reason: FinishReason,
) -> tuple[int, FinishReason]:
    """Where a request with stop token ids ends: its output tokens are the next draws of
    ``rng`` (see ``_commit``), so a copy of it says which of them is the first stop id at or
    past ``min_tokens``; else (``stop_at``, ``reason``) as they were."""
    probe = random.Random()
    probe.setstate(rng.getstate())
    stops = frozenset(opts.stop_token_ids)
    rand = probe.random
    for i in range(stop_at):
        if int(rand() * vocab_size) in stops and i >= opts.min_tokens:
            return i + 1, FinishReason.STOP
    return stop_at, reason
