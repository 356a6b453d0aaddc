"""Every background task of the picker: named, held by an owner until it ends, its failure logged at once,
stopped one way.

(kopf's ``create_guarded_task`` and ``stop``.) A loop that dies with an exception would otherwise
be noticed only when someone awaits it, and a task nobody holds can be garbage-collected while it
runs (the event loop keeps only weak references). So no module of ``epp`` starts a task but
through here (``tests/test_tasks.py`` checks the source for it):

- :func:`start_guarded` starts one named task whose failure is logged as it happens; the caller
  holds it (an attribute) and stops it with :func:`cancel_and_wait`: a watch loop, a dispatch loop;
- a :class:`TaskSet` holds many and stops them together: one scrape loop or KV-event subscriber per
  endpoint, the closing of a replaced configuration's plugins, the last answer of each ext_proc stream.

Stopping is always cancel, then wait until the task has finished. A task started ``forever`` is a
loop that should only end by being cancelled: ending any other way is logged as an error too.
``quiet`` tasks are expected to fail sometimes (a send on a stream the gateway already reset): their
failure is taken, not logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Self

__all__ = ["Service", "TaskSet", "cancel_and_wait", "start_guarded"]

log = logging.getLogger(__name__)

_RECHECK = 0.25
"""Seconds between checks that a task being stopped still has its cancellation (see :func:`cancel_and_wait`)."""


def _guard(*, forever: bool, quiet: bool) -> Callable[[asyncio.Task[Any]], None]:
    def report(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()  # taken here, so it is never reported again as "never retrieved"
        if quiet:
            return
        if error is not None:
            log.error("background task failed", extra={"task": task.get_name()}, exc_info=error)
        elif forever:
            log.error("background task ended, though it should run until stopped", extra={"task": task.get_name()})

    return report


_GUARDS = {
    (forever, quiet): _guard(forever=forever, quiet=quiet) for forever in (False, True) for quiet in (False, True)
}


def start_guarded(
    coro: Coroutine[Any, Any, Any], name: str, *, forever: bool = False, quiet: bool = False
) -> asyncio.Task[Any]:
    """Start ``coro`` as a task named ``name`` whose failure is logged as soon as it happens; hold the result."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_GUARDS[forever, quiet])
    return task


async def cancel_and_wait(tasks: asyncio.Task[Any] | Iterable[asyncio.Task[Any]] | None) -> None:
    """Cancel the task(s) and wait until they have finished; safe to call twice.

    A task already being cancelled (its owner cancelled it and it is still cleaning up) is not
    cancelled again, so its clean-up is not cut short; one whose cancellation was taken back
    (``uncancel``) while it carries on is cancelled again. A cancellation of the caller itself while
    it waits still reaches the caller.
    """
    if tasks is None:
        return
    group = [tasks] if isinstance(tasks, asyncio.Task) else list(tasks)
    for task in group:
        if not task.cancelling():
            task.cancel()
    pending = set(group)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=_RECHECK)
        for task in pending:
            # No cancellation pending, yet not finished: a library took it back (``uncancel``) and carried
            # on (seen with a Kubernetes watch cancelled while its stream opened): deliver it again.
            if not task.cancelling():
                task.cancel()


class TaskSet:
    """The tasks one owner runs: each held from its start until it ends; :meth:`stop` ends them all."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        """Tasks not finished yet (cancelled ones included until they have finished)."""
        return len(self._tasks)

    def start(
        self, coro: Coroutine[Any, Any, Any], name: str, *, forever: bool = False, quiet: bool = False
    ) -> asyncio.Task[Any]:
        """:func:`start_guarded`, held here until the task ends (cancelling it is the caller's to do)."""
        task = start_guarded(coro, name, forever=forever, quiet=quiet)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait(self) -> None:
        """Wait until every task started so far has ended, without cancelling any."""
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def stop(self) -> None:
        """Cancel every task and wait until all have finished."""
        await cancel_and_wait(set(self._tasks))


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
