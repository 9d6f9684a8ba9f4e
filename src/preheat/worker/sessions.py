"""Sessions a worker serves: the distinct session ids of its recent requests, ``now`` passed.

A session (``x-session-id``, ``session_id`` on the gRPC request) is bound to the worker
while it sent a request within the window (the router's session TTL, 10 min by default):
losing the worker would move the session and its prefix cache elsewhere, so scale-down
counts it in the worker's deletion cost (``WorkerStatus.sessions``).
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_WINDOW_S = 600.0  # the pool's default spec.routing.sessionTTL
MAX_TRACKED = 65_536  # the oldest session is forgotten past this many


class SessionLedger:
    """Distinct session ids seen within ``window_s`` seconds, at most ``max_tracked``."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, max_tracked: int = MAX_TRACKED):
        if window_s <= 0 or max_tracked <= 0:
            raise ValueError(f"window_s and max_tracked must be > 0: {window_s}, {max_tracked}")
        self.window_s = window_s
        self.max_tracked = max_tracked
        self._last: OrderedDict[str, float] = OrderedDict()  # oldest request first

    def seen(self, session_id: str, now: float) -> None:
        """A request of ``session_id`` arrived at ``now`` ("" is no session: ignored)."""
        if not session_id:
            return
        self._last[session_id] = now
        self._last.move_to_end(session_id)
        while len(self._last) > self.max_tracked:
            self._last.popitem(last=False)

    def count(self, now: float) -> int:
        """Sessions whose last request is at most ``window_s`` before ``now``."""
        while self._last:
            oldest, at = next(iter(self._last.items()))
            if now - at <= self.window_s:
                break
            del self._last[oldest]
        return len(self._last)


__all__ = ["DEFAULT_WINDOW_S", "MAX_TRACKED", "SessionLedger"]
