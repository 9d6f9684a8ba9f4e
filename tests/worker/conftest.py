"""Fixtures for worker tests (helpers live in ``workerkit``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from workerkit import Client, FakeEngine, running_worker


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def client(fake_engine: FakeEngine) -> AsyncIterator[Client]:
    async with running_worker(fake_engine) as c:
        yield c
