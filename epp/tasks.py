"""Background tasks with an owner (named, failures logged at once, stopped on purpose) and services.

(kopf's ``create_guarded_task``.) A long-running loop that dies with an exception would
otherwise be noticed only when someone awaits it; here the failure is logged immediately.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, Self

__all__ = ["Service", "cancel_and_wait", "start_guarded"]

log = logging.getLogger(__name__)


def _report(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("background task %s failed", task.get_name(), exc_info=exc)


def start_guarded(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    """Start ``coro`` as a named task whose failure is logged as soon as it happens."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_report)
    return task


async def cancel_and_wait(tasks: asyncio.Task[Any] | Iterable[asyncio.Task[Any]] | None) -> None:
    """Cancel the task(s) and wait until they have finished; safe to call twice."""
    if tasks is None:
        return
    group = [tasks] if isinstance(tasks, asyncio.Task) else list(tasks)
    for task in group:
        task.cancel()
    for task in group:
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Service:
    """A thing with ``start()`` and ``stop()`` that is also its own async context manager.

    ``stop()`` must be safe after a partial or failed ``start()`` (and when called twice).
    """

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:  # a half-started service must not leak what it did start
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
