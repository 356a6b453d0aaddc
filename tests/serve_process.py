"""``python -m epp serve`` as a child process, as a container runs it: its stderr lines and its health.

Tests that must see the real process (its argument parsing, its log lines from the first to the
last, its exit code) start it here. The child gets a new session and is stopped by its PID; its
stderr is read continuously (a debug-level run would otherwise fill the pipe and stall it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc

from epp.extproc import pb
from epp_sim.ports import free_port
from epp_sim.waits import wait_until

__all__ = ["IN_THIS_ENVIRONMENT", "ServeProcess", "run_serve", "serve_process"]


IN_THIS_ENVIRONMENT = (sys.executable, "-m", "epp")
"""The ``epp`` command of the test's own environment (``command=`` names another, e.g. a venv's ``bin/epp``)."""


async def _spawn(
    args: Sequence[str], env: Mapping[str, str] | None, command: Sequence[str] = IN_THIS_ENVIRONMENT
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command,
        "serve",
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


async def _collect(stream: asyncio.StreamReader | None, lines: list[str]) -> None:
    assert stream is not None
    async for raw in stream:
        lines.append(raw.decode("utf-8", "replace").rstrip("\n"))


async def run_serve(*args: str, env: Mapping[str, str] | None = None, timeout: float = 30) -> tuple[int, list[str]]:
    """Run ``epp serve ARGS`` to its end (a start that fails); its exit code and stderr lines."""
    proc = await _spawn(args, env)
    lines: list[str] = []
    try:
        await asyncio.wait_for(_collect(proc.stderr, lines), timeout)
        return await asyncio.wait_for(proc.wait(), timeout), lines
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@dataclass
class ServeProcess:
    """A running ``epp serve`` on loopback ports of its own."""

    proc: asyncio.subprocess.Process
    grpc_port: int
    health_port: int
    metrics_port: int
    stderr: list[str] = field(default_factory=list)

    async def readiness(self) -> int:
        """The ``readiness`` status on the health port (UNKNOWN while nothing answers yet)."""
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.health_port}") as channel:
            try:
                response = await pb.HealthStub(channel).Check(pb.HealthCheckRequest(service="readiness"), timeout=1)
            except grpc.aio.AioRpcError:
                return int(pb.HealthCheckResponse.UNKNOWN)
        return int(response.status)

    async def wait_serving(self, *, timeout: float = 30) -> None:
        async def serving() -> bool:
            if self.proc.returncode is not None:
                tail = "\n".join(self.stderr[-20:])
                raise AssertionError(f"epp serve exited with {self.proc.returncode}:\n{tail}")
            return await self.readiness() == pb.HealthCheckResponse.SERVING

        await wait_until(serving, timeout=timeout, message="epp serve to report readiness SERVING")


@asynccontextmanager
async def serve_process(
    *args: str, env: Mapping[str, str] | None = None, command: Sequence[str] = IN_THIS_ENVIRONMENT
) -> AsyncIterator[ServeProcess]:
    """``epp serve ARGS`` on free loopback ports (given after ARGS, so they win); SIGTERM on exit.

    On exit the process has ended and ``stderr`` holds every line it wrote; an exit code other
    than 0 fails the test. No drain window: SIGTERM stops it at once.
    """
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    sandbox = (
        "--drain-timeout=0s",
        "--bind-address=127.0.0.1",
        f"--grpc-port={grpc_port}",
        f"--grpc-health-port={health_port}",
        f"--metrics-port={metrics_port}",
    )
    proc = await _spawn([*args, *sandbox], env, command)
    running = ServeProcess(proc, grpc_port, health_port, metrics_port)
    reader = asyncio.create_task(_collect(proc.stderr, running.stderr), name="epp-serve-stderr")
    try:
        yield running
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = await asyncio.wait_for(proc.wait(), 30)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            await reader
    assert rc == 0, "\n".join(running.stderr[-20:])
