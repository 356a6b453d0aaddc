"""Grace-period timers: at most one named task per object uid, on the injected clock.

Pod deletions with a grace period stay visible (with ``deletionTimestamp``) until their timer
fires; tests drive the timers with ``ManualClock``. Every task is owned here and cancelled by
``aclose``; a failing expiry callback is logged, never lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from epp.clock import Clock

__all__ = ["GraceTimers"]

log = logging.getLogger(__name__)


class GraceTimers:
    """Pending grace periods by object uid."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, uid: str, name: str, seconds: float, on_expiry: Callable[[], None]) -> None:
        """Call ``on_expiry`` after ``seconds`` unless cancelled first (replaces a pending timer)."""
        self.cancel(uid)
        self._tasks[uid] = asyncio.get_running_loop().create_task(
            self._run(uid, seconds, on_expiry), name=f"epp-sim-grace:{name}"
        )

    def pending(self, uid: str) -> bool:
        return uid in self._tasks

    def cancel(self, uid: str) -> None:
        task = self._tasks.pop(uid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, uid: str, seconds: float, on_expiry: Callable[[], None]) -> None:
        await self._clock.sleep(seconds)
        self._tasks.pop(uid, None)
        try:
            on_expiry()
        except Exception:
            log.exception("grace period expiry failed", extra={"uid": uid})
