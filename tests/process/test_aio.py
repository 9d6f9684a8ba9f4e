import asyncio

import pytest

from preheat.process import aio


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_when_installed_and_standard_loop_on_request(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("uvloop")
    assert aio.run(_loop_type()).startswith("uvloop")
    monkeypatch.setenv("PREHEAT_UVLOOP", "0")
    assert aio.run(_loop_type()).startswith("asyncio")
