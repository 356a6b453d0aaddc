"""Waiting for a condition, never for a fixed time: the one poll-until loop of epp-sim.

Tests, the local stack, the benchmarks and the child-process supervisor all wait on things that
become true (a port answers, a picker has scraped every pod, a Deployment is stable). They all
call :func:`wait_until`, so the timeout, the interval and the message are handled once.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

__all__ = ["wait_until"]


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
    error: Callable[[str], Exception] = TimeoutError,
) -> None:
    """Poll ``predicate`` (sync or async) until it is true.

    After ``timeout`` seconds raise ``error(text)``, the text naming ``message``. An exception
    raised by the predicate itself propagates at once (a child that died, say), so a caller can
    stop waiting for something that can no longer happen.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() >= deadline:
            raise error(f"not within {timeout}s: {message or predicate!r}")
        await asyncio.sleep(interval)
