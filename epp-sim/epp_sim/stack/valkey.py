"""A real Valkey (or Redis) server for tests and benchmarks: Debian's ``valkey-server`` or ``redis-server``.

Started on a loopback address and a free port, with no persistence (nothing written to disk
but its log), stopped by PID. :meth:`ValkeyServer.restart` stops it and starts it again on the
same port, empty: what a replica sees when its server is lost and comes back. ``scripts/test``
installs ``redis-server`` when neither program is on ``PATH``; without one, :func:`server_program`
raises naming the package to install (never a silent skip).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from epp.tasks import Service
from epp_sim.ports import free_port
from epp_sim.stack.processes import ChildProcess

__all__ = ["ValkeyServer", "server_program"]

_PROGRAMS = ("valkey-server", "redis-server")


def server_program() -> str:
    """The path of ``valkey-server`` or ``redis-server``; RuntimeError naming the package when neither is there."""
    for name in _PROGRAMS:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError(
        "neither valkey-server nor redis-server is on PATH: install Debian's valkey-server or redis-server "
        "(scripts/test does: apt-get install -y redis-server)"
    )


class ValkeyServer(Service):
    """``async with ValkeyServer(work_dir) as server:`` ... ``server.url`` (``redis://host:port``)."""

    def __init__(self, work_dir: Path, *, host: str = "127.0.0.1", name: str = "valkey") -> None:
        self.host = host
        self.port = free_port(host)
        self.name = name
        self._dir = work_dir
        self._child: ChildProcess | None = None
        self._starts = 0

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    async def start(self) -> None:
        program = server_program()
        await asyncio.to_thread(self._dir.mkdir, parents=True, exist_ok=True)
        self._starts += 1
        argv = [
            program,
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self._dir),
            "--protected-mode",
            "no",
        ]
        child = ChildProcess(argv, log_path=self._dir / f"{self.name}-{self._starts}.log", name=self.name)
        await child.start()
        self._child = child
        await child.wait_ready(self._answers, timeout=20)

    async def _answers(self) -> bool:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            return False
        try:
            writer.write(b"PING\r\n")
            await writer.drain()
            return (await reader.readline()).startswith(b"+PONG")
        finally:
            writer.close()
            await writer.wait_closed()

    async def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            await child.stop()

    async def restart(self) -> None:
        """Stop, then start again on the same port (empty: nothing is persisted)."""
        await self.stop()
        await self.start()
