"""A pool's short-lived response cache (off by default): answers to deterministic requests
(temperature 0 or a seed, and one choice), kept for a TTL within a memory bound, LRU.

The key (:func:`cache_key`) is a SHA-256 over the pool's model, the API, the whole prompt
(the messages or the prompt text) and every parameter that changes the output, plus the
tenant unless the pool shares answers across tenants. Errors, aborted or truncated answers
are never stored (the caller stores only a finished answer). Time comes in (``now``).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# OpenAI body fields that do not change the answer (delivery, routing, admission,
# accounting): left out of the key
NOT_IN_KEY = frozenset(
    {
        "stream",
        "stream_options",
        "user",
        "session_id",
        "ttft_deadline_ms",
        "slo_class",
        "prompt_cache_key",
    }
)
DEFAULT_TTL_S = 60.0
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
ENTRY_OVERHEAD = 256  # bytes counted per entry besides its text


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = False
    ttl_s: float = DEFAULT_TTL_S
    max_bytes: int = DEFAULT_MAX_BYTES
    share_tenants: bool = False  # one tenant's answer may serve another's request


@dataclass(frozen=True)
class CachedAnswer:
    text: str
    finish_reason: int  # the wire's FinishReason value
    prompt_tokens: int
    completion_tokens: int
    token_ids: tuple[int, ...] = ()  # the answer's ids, when the path that stored it had them

    @property
    def size(self) -> int:
        return len(self.text.encode()) + 4 * len(self.token_ids) + ENTRY_OVERHEAD


def deterministic(temperature: float | None, seed: int | None, n: int | None) -> bool:
    """True for a request whose answer is the same every time: greedy (temperature 0) or
    seeded sampling, one choice."""
    return (n is None or n == 1) and (temperature == 0 or seed is not None)


def cache_key(model: str, api: str, request: Mapping[str, Any], tenant: str) -> str:
    """The cache key of one request (``request``: its prompt and every output-changing
    parameter, JSON-serializable); ``tenant`` "" when the pool shares across tenants."""
    doc = {"model": model, "api": api, "request": request, "tenant": tenant}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseCache:
    """Answers by key, each until ``ttl_s`` after it was stored, at most ``max_bytes``."""

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self._entries: OrderedDict[str, tuple[float, CachedAnswer]] = OrderedDict()
        self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, now: float) -> CachedAnswer | None:
        item = self._entries.get(key)
        if item is None:
            return None
        expires, answer = item
        if now >= expires:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return answer

    def put(self, key: str, answer: CachedAnswer, now: float) -> bool:
        """Stores ``answer``; False when it alone exceeds the bound (not stored)."""
        if answer.size > self.config.max_bytes or self.config.ttl_s <= 0:
            return False
        if key in self._entries:
            self._drop(key)
        while self._entries and self._bytes + answer.size > self.config.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = (now + self.config.ttl_s, answer)
        self._bytes += answer.size
        return True

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: str) -> None:
        _, answer = self._entries.pop(key)
        self._bytes -= answer.size
