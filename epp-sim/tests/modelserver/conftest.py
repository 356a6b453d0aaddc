"""Fixtures of the engine tests: a ManualClock and engines on it, stopped at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from epp.clock import ManualClock
from epp_sim.modelserver import Engine, SimConfig


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def make_engine(clock: ManualClock) -> AsyncIterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(**overrides: object) -> Engine:
        engine = Engine(SimConfig(**overrides), clock=clock)  # type: ignore[arg-type]
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.stop()
