"""Fixtures the autoscaler's tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """A client session for the sources under test (scrape, Prometheus), closed after the test."""
    async with aiohttp.ClientSession() as s:
        yield s
