"""Helpers for tests that wait on real processes and sockets: conditions, not sleeps."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from collections.abc import Awaitable, Callable

__all__ = ["free_port", "wait_until"]


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> None:
    """Poll ``predicate`` (sync or async) until it is true; raise TimeoutError naming ``message``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"condition not met within {timeout}s: {message or predicate!r}")
        await asyncio.sleep(interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (for child processes that need a fixed port)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
