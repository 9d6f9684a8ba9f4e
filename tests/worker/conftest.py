"""Fixtures for worker tests (helpers live in ``workerkit``).

``client`` is a worker around the sim engine (what almost every test uses); ``fake_client``
is one around :class:`workerkit.FakeEngine`, for tests that need to control the engine
(exact tokens and text, gates on load/warm-up/first token, injected cache events).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from workerkit import Client, FakeEngine, make_sim_engine, running_worker


@pytest.fixture
def sim_engine() -> Any:
    return make_sim_engine()


@pytest.fixture
async def client(sim_engine: Any) -> AsyncIterator[Client]:
    async with running_worker(sim_engine) as c:
        yield c


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def fake_client(fake_engine: FakeEngine) -> AsyncIterator[Client]:
    async with running_worker(fake_engine) as c:
        yield c
