"""The flow-control tests' ``make`` fixture: pools built on demand, stopped and drained after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from flow_harness import Pool


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., Pool]]:
    pools: list[Pool] = []

    def build(flow_control: str = "  defaultRequestTTL: 0s\n", **kw: Any) -> Pool:
        pool = Pool(flow_control, **kw)
        pools.append(pool)
        return pool

    yield build
    for pool in pools:
        await pool.fc.stop()
        for item in pool.items:  # what no stream is left to read
            if not item.future.cancelled():
                item.future.exception()
