"""What the kopf handlers (:mod:`preheat.operator.handlers`) read from kopf: their indexes
(the pools, and the worker pods by pool), bodies as plain dicts, and daemon sleeps that stop
in time.

kopf passes each index to every handler as a kwarg named after it (kopf's docs, *In-memory
indexing*); its handler protocols do not list those kwargs, hence the ``arg-type`` ignores
on the decorators of the handlers that take one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import kopf

PoolKey = tuple[str, str]  # (namespace, name)
PoolsIndex = kopf.Index[PoolKey, dict[str, Any]]
PodsIndex = kopf.Index[PoolKey, dict[str, Any]]


async def nap(stopped: kopf.DaemonStopped, seconds: float, memo: kopf.Memo) -> bool:
    """Wait ``seconds`` in short sleeps that look at ``stopped`` (kopf waits for a deleted
    pool's daemons to exit; ``stopped.wait(n)``'s timeout leaks TimeoutErrors into kopf's
    shutdown). False when the daemon should stop."""
    auto = getattr(memo, "autoscaler", None)
    deadline = time.monotonic() + seconds
    while not stopped and not (auto and auto.closing) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return not stopped and not (auto and auto.closing)


def plain(body: Any) -> dict[str, Any]:
    """A kopf body view as plain dicts (safe to keep in an index)."""
    return {k: _copy(v) for k, v in dict(body).items()}


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def pods_of(index: PodsIndex, namespace: str | None, pool: str) -> list[dict[str, Any]]:
    return [dict(p) for p in index.get((namespace or "", pool), [])]


__all__ = ["PodsIndex", "PoolKey", "PoolsIndex", "nap", "plain", "pods_of"]
