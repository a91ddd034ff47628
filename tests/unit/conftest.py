"""Fixtures shared by the SDK tests that talk to a fake coordinator; the hypothesis budget (tests/unit/profiles.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit import profiles
from tests.unit.fake_coordinator import FakeCoordinator

profiles.load()


@pytest.fixture
async def fake() -> AsyncIterator[FakeCoordinator]:
    """A scriptable coordinator (node 1) on 127.0.0.1, stopped after the test."""
    server = await FakeCoordinator(node_id=1).start()
    yield server
    await server.stop()
