"""The benchmarks' child processes: where their logs go, how they are launched, how readiness is probed.

Both benchmarks run their moving parts (backend, processors, ``epp serve``, the simulated
cluster) as ``python -m`` children, each logging to a file in one work directory, and short-lived
tools (load generators, py-spy, the scraper-cost child) to their end with
:func:`output_of`, which kills the tool if the benchmark is cancelled. The directory
is removed when the benchmark succeeds and kept, with its path printed, when it fails: the logs
are what explains a failure. Readiness is a probe that answers False until the child serves,
for :meth:`~epp_sim.stack.processes.ChildProcess.wait_ready` and
:func:`~epp_sim.waits.wait_until`, never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import aiohttp

from epp_sim.stack.processes import ChildProcess

__all__ = ["bench_work_dir", "http_ok", "output_of", "python_child", "tcp_open"]


@contextlib.asynccontextmanager
async def bench_work_dir(benchmark: str) -> AsyncIterator[Path]:
    """A fresh directory for ``benchmark``'s logs and files: removed on success, kept (and named) on failure."""
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=f"epp-bench-{benchmark}-"))
    try:
        yield work
    except BaseException:
        print(f"{benchmark} benchmark failed; logs kept in {work}", file=sys.stderr)
        raise
    await asyncio.to_thread(shutil.rmtree, work, True)


def python_child(work: Path, name: str, *args: str, env: Mapping[str, str] | None = None) -> ChildProcess:
    """``python -m <args>`` (this interpreter), unbuffered, logging to ``work/<name>.log``; not yet started."""
    environ = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return ChildProcess([sys.executable, "-m", *args], log_path=work / f"{name}.log", name=name, env=environ)


async def output_of(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    error: Callable[[str], Exception] = RuntimeError,
) -> str:
    """Run ``argv`` in its own session to its end and return its stdout.

    A non-zero exit raises ``error`` naming the program, the status and the tail of its stderr;
    cancelling the caller kills the child rather than leaving it running.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise error(f"{argv[0]} exited with {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    return out.decode(errors="replace")


async def http_ok(session: aiohttp.ClientSession, url: str, body: bytes | None = None) -> bool:
    """GET ``url`` (or POST ``body`` as JSON) and read the answer: True on a 200, False on any other or no answer."""
    try:
        if body is None:
            async with session.get(url) as resp:
                await resp.read()
                return resp.status == 200
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
            await resp.read()
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def tcp_open(host: str, port: int) -> bool:
    """True once something accepts TCP connections on ``host:port`` (the connection is closed at once)."""
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
