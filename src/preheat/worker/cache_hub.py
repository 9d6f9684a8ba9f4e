"""Fan-out of the engine's prefix-cache events to any number of WatchCache subscribers.

The hub keeps the current set of cached block hashes, updated from
``engine.set_cache_listener`` events (which may arrive from another thread: they are handed
to the loop with ``call_soon_threadsafe``). Every applied event gets the next ``seq``.

A subscriber first gets one snapshot message (``stored`` with every cached hash,
``snapshot=true``, ``seq`` = the hub's seq at that moment), then each later event as a
delta with a larger ``seq``. Each subscriber has a bounded queue: a subscriber that falls
``queue_size`` events behind is dropped (:class:`SubscriberOverflow`; the RPC ends with
RESOURCE_EXHAUSTED) and must resubscribe, which gives it a fresh snapshot. Nothing is ever
silently skipped, so a subscriber's view is exact or it knows it is gone.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from preheat.engine.base import CacheEvent, CacheEventKind


class SubscriberOverflow(Exception):
    """The subscriber fell too far behind and was dropped; resubscribe for a snapshot."""


@dataclass(frozen=True)
class HubEvent:
    seq: int
    kind: CacheEventKind
    block_hashes: tuple[int, ...]
    snapshot: bool = False


class _Subscriber:
    def __init__(self, queue_size: int) -> None:
        self.queue: asyncio.Queue[HubEvent] = asyncio.Queue(maxsize=queue_size)
        self.overflowed = False
        self.closed = asyncio.Event()


class CacheHub:
    def __init__(self, loop: asyncio.AbstractEventLoop, *, queue_size: int = 1024) -> None:
        if queue_size <= 0:
            raise ValueError(f"queue_size must be > 0, got {queue_size}")
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._queue_size = queue_size
        self._blocks: set[int] = set()
        self._seq = 0
        self._subs: set[_Subscriber] = set()

    @property
    def seq(self) -> int:
        return self._seq

    @property
    def blocks(self) -> frozenset[int]:
        return frozenset(self._blocks)

    @property
    def num_blocks(self) -> int:
        """How many blocks are cached (without copying them)."""
        return len(self._blocks)

    @property
    def num_subscribers(self) -> int:
        return len(self._subs)

    def seed(self, blocks: Iterable[int]) -> None:
        """Sets the initial cache content (from ``engine.cached_blocks()``) without an event."""
        self._blocks = set(blocks)

    def listener(self, event: CacheEvent) -> None:
        """The engine's cache listener: safe to call from any thread."""
        if threading.get_ident() == self._loop_thread:
            self.apply(event)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.apply, event)

    def apply(self, event: CacheEvent) -> None:
        """Applies one engine event (on the loop) and fans it out."""
        if event.kind is CacheEventKind.STORED:
            self._blocks.update(event.block_hashes)
        elif event.kind is CacheEventKind.REMOVED:
            self._blocks.difference_update(event.block_hashes)
        else:
            self._blocks.clear()
        self._seq += 1
        out = HubEvent(self._seq, event.kind, tuple(event.block_hashes))
        for sub in list(self._subs):
            try:
                sub.queue.put_nowait(out)
            except asyncio.QueueFull:
                sub.overflowed = True
                self._subs.discard(sub)
                sub.closed.set()

    def close(self) -> None:
        """Ends every subscription (their iterators stop)."""
        for sub in self._subs:
            sub.closed.set()
        self._subs.clear()

    async def subscribe(self) -> AsyncIterator[HubEvent]:
        """The snapshot, then deltas, until :meth:`close`. Raises SubscriberOverflow."""
        sub = _Subscriber(self._queue_size)
        snapshot = HubEvent(
            self._seq, CacheEventKind.STORED, tuple(sorted(self._blocks)), snapshot=True
        )
        self._subs.add(sub)
        try:
            yield snapshot
            while True:
                if sub.queue.empty():
                    if sub.overflowed:
                        raise SubscriberOverflow
                    if sub.closed.is_set():
                        return
                    get = asyncio.ensure_future(sub.queue.get())
                    closed = asyncio.ensure_future(sub.closed.wait())
                    try:
                        await asyncio.wait({get, closed}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        closed.cancel()
                        if not get.done():
                            get.cancel()
                    if not get.done() or get.cancelled():
                        continue
                    ev = get.result()
                else:
                    if sub.overflowed:
                        raise SubscriberOverflow
                    ev = sub.queue.get_nowait()
                yield ev
        finally:
            self._subs.discard(sub)
