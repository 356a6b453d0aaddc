"""Shared test hygiene for tests/ and hermetic_tests/: no test may leave an asyncio task running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest_plugins = ["pytester"]  # tests of epp-sim's pytest plugin run pytest on files they write


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()
    for _ in range(100):
        leaked = {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}
        if not leaked:
            return
        await asyncio.sleep(0.01)
    names = sorted(t.get_name() for t in leaked)
    for t in leaked:
        t.cancel()
    pytest.fail(f"test leaked asyncio tasks: {names}")
