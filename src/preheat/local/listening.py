"""Whether a router child answers on its HTTP port: ``up.json``'s ``ready`` waits for it.

The router loads its tokenizer and chat template before it binds a port (seconds for an
``hf:`` tokenizer on a loaded machine: ``transformers`` is imported and the files parsed),
so a pool's workers can be warm before anything listens at the addresses ``up.json`` gives.
A script that starts sending once ``ready`` is true must not find the port closed, so
``ready`` also needs the router's ``GET /healthz`` to have answered 200, once per router
process (a restarted router is asked again).
"""

from __future__ import annotations

import aiohttp

from preheat.process.children import Child

PROBE_TIMEOUT_S = 0.5


class RouterProbe:
    """Asks the router on 127.0.0.1:``http_port`` for ``/healthz`` until it answers 200,
    once per router pid."""

    def __init__(self, http_port: int) -> None:
        self.url = f"http://127.0.0.1:{http_port}/healthz"
        self._answered_pid = 0

    def answered(self, child: Child | None) -> bool:
        """The running ``child`` has answered (no asking: see :meth:`check`)."""
        return child is not None and child.alive and child.pid == self._answered_pid

    async def check(self, session: aiohttp.ClientSession, child: Child | None) -> bool:
        """Whether the running ``child`` answers; asks it unless it already has."""
        if child is None or not child.alive:
            return False
        if child.pid != self._answered_pid:
            timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            try:
                async with session.get(self.url, timeout=timeout) as resp:
                    if resp.status == 200:
                        self._answered_pid = child.pid
            except (aiohttp.ClientError, TimeoutError):
                pass  # not listening yet (or too busy to answer): asked again next tick
        return self.answered(child)


__all__ = ["PROBE_TIMEOUT_S", "RouterProbe"]
