"""Stop strings applied to the text stream, for engines that do not apply them.

vLLM ends a sequence before the first stop string itself; the sim engine has no text model
and cannot. The worker therefore runs every stream through a :class:`StopMatcher`. With an
engine that already stops, the matcher never finds a stop string and is a pass-through
(apart from holding back a tail that could begin a stop string until it is resolved).

The matcher holds back the last ``max(len(stop)) - 1`` characters while they could still be
the start of a stop string, so a stop string split across chunks is found and none of it is
ever sent. When one is found, the text is cut just before it and the stream finishes with
``STOP``; the worker then closes the engine's generator, which aborts the sequence there.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._pending = ""
        self.stopped = False

    @property
    def active(self) -> bool:
        return bool(self._stops)

    def feed(self, text: str) -> str:
        """Adds ``text``; returns what may be sent now. Sets :attr:`stopped` on a match."""
        if not self._stops:
            return text
        if self.stopped:
            return ""
        buf = self._pending + text
        cut = min((i for i in (buf.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._pending = ""
            return buf[:cut]
        keep = self._hold_len(buf)
        self._pending = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The held-back text, at the end of the stream."""
        out, self._pending = self._pending, ""
        return "" if self.stopped else out

    def _hold_len(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop string."""
        for n in range(min(self._hold, len(buf)), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0
