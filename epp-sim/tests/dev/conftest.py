"""Fixtures for the data-plane tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from recording_backends import Backend, Backends


@pytest.fixture
async def backends() -> AsyncIterator[Backends]:
    """Two backends: ``decoy`` on 127.0.0.2 and ``target`` on 127.0.0.3."""
    pair = Backends(decoy=Backend("127.0.0.2"), target=Backend("127.0.0.3"))
    await pair.decoy.start()
    await pair.target.start()
    try:
        yield pair
    finally:
        await pair.decoy.stop()
        await pair.target.stop()
