"""Starting an aiohttp app on a port (0: ephemeral) and learning the port it bound.

Shared by the worker's and the router's HTTP servers (which may not import each other).
"""

from __future__ import annotations

from aiohttp import web


async def serve(runner: web.AppRunner, host: str, port: int) -> int:
    """Sets ``runner`` up, starts it on ``host:port`` and returns the bound port."""
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return port
