"""Guarded tasks log failures at once; cancel is idempotent; a Service that fails to start is stopped."""

from __future__ import annotations

import asyncio

import pytest

from epp.tasks import Service, cancel_and_wait, start_guarded
from epp_sim.waits import wait_until


class _Flaky(Service):
    def __init__(self) -> None:
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")
        raise OSError("port in use")

    async def stop(self) -> None:
        self.events.append("stop")


async def test_failed_start_is_stopped_and_the_error_propagates() -> None:
    service = _Flaky()
    with pytest.raises(OSError, match="port in use"):
        async with service:
            pytest.fail("the body must not run")
    assert service.events == ["start", "stop"]


async def test_guarded_task_failure_is_logged_at_once_and_cancel_is_idempotent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def boom() -> None:
        raise ValueError("broken loop")

    task = start_guarded(boom(), name="boom-task")
    await wait_until(lambda: any("boom-task" in r.getMessage() and r.exc_info for r in caplog.records))
    with pytest.raises(ValueError):
        task.result()

    forever = start_guarded(asyncio.Event().wait(), name="forever")
    await cancel_and_wait(forever)
    await cancel_and_wait(forever)
    assert forever.cancelled()
