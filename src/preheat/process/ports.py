"""A free TCP port that stays ours until a server binds it: no pick-then-release race.

Picking a port by binding port 0 and closing the socket leaves a gap: anything on the
machine may take the port before the server that was meant to bind it does (a busy CI
machine running several suites, or two ``preheat up`` at once). :class:`ReservedPort`
closes the gap on Linux: it binds port 0 with ``SO_REUSEADDR`` and keeps the socket, never
listening on it. While it is held:

- the kernel never hands the port to anyone binding port 0 or connecting out (an
  ephemeral port is never one that is bound);
- a bind of that exact port fails unless it sets ``SO_REUSEADDR`` too, which servers do:
  asyncio and aiohttp (by default on POSIX), gRPC, and Go's ``net`` (Prometheus). So the
  server it was reserved for binds it, in this process or in a child;
- a connection to it is refused until that server listens (a held port is also a port
  where nothing answers, for tests of an unreachable server).

Hold it for as long as the port is meant to be that server's (a child that is restarted
on the same port keeps it across restarts), then :meth:`release` it. Elsewhere than Linux
(where ``SO_REUSEADDR`` does not let a second socket bind the same address) the socket is
closed at once, as a plain pick would.
"""

from __future__ import annotations

import argparse
import socket
import sys
from types import TracebackType


class ReservedPort:
    """A TCP port on ``host`` reserved for a server that will bind it (see the module)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, 0))
            self.port: int = int(sock.getsockname()[1])
        except BaseException:
            sock.close()
            raise
        self._sock: socket.socket | None = sock
        if not sys.platform.startswith("linux"):
            self.release()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def held(self) -> bool:
        return self._sock is not None

    def release(self) -> None:
        """Gives the port up (idempotent); a server already listening on it keeps it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ReservedPort:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"ReservedPort({self.address}, held={self.held})"


def port_number(text: str) -> int:
    """An argparse ``type`` for a TCP port flag: 0-65535, 0 for any free port. Out of range,
    a server bound something else (gRPC took 70000 without a word) or raised a socket
    traceback (-1)."""
    return _port(text, off=False)


def port_or_off(text: str) -> int:
    """:func:`port_number`, or -1: the listener is off."""
    return _port(text, off=True)


def _port(text: str, *, off: bool) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -2
    if port == -1 and off:
        return port
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port (0-65535{', or -1: off' if off else ''})"
        )
    return port


__all__ = ["ReservedPort", "port_number", "port_or_off"]
