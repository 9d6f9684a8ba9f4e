"""Running an asyncio program: uvloop when it is installed (8-35% less CPU per gRPC
message on the proxy path, per ../shared/NOTES.md), the standard loop otherwise or when
``PREHEAT_UVLOOP=0``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for the standard loop."""
    if os.environ.get("PREHEAT_UVLOOP", "1") == "0":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
