"""Child processes for the local stack and the benchmarks: started, awaited and stopped by PID.

Envoy, `epp serve` and friends run as separate OS processes. Each child gets its own session
(``start_new_session=True``) so a Ctrl-C in the terminal reaches only us, and we decide the stop
order; its output goes to a log file kept for debugging. Readiness is a condition the caller
supplies (an HTTP probe, a gRPC health check), never a sleep. Stopping signals the child's own
process group (SIGTERM, then SIGKILL after a grace period): by PID, never by name.

No code of ours runs between fork and exec. The parent usually runs grpc.aio, whose C core
registers ``pthread_atfork`` handlers; a plain ``fork()`` (what ``preexec_fn`` forces) runs them,
and in the child they restart gRPC's poller threads, whose epoll descriptor ``close_fds`` then
closes: the child died of SIGSEGV/SIGABRT ("epoll_wait ... Bad file descriptor") before exec,
more often the busier the machine. Without ``preexec_fn`` CPython uses ``vfork()``, which runs
no fork handlers; the die-with-parent signal is set by a tiny interpreter that then execs the
program (:data:`_DIE_WITH_PARENT`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from epp_sim.waits import wait_until

__all__ = ["ChildProcess", "ChildProcessError", "log_tail"]

_DIE_WITH_PARENT = """\
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG; survives exec
if os.getppid() != int(sys.argv[1]):
    sys.exit("parent gone before start")
os.execv(sys.argv[2], sys.argv[3:])
"""
"""Run as ``python -I -S -c _DIE_WITH_PARENT <our pid> <program path> <argv...>`` (Linux).

The child has its own session so a terminal's Ctrl-C reaches only us; SIGTERM on our death (even
by SIGKILL) keeps a hard kill of ``epp dev`` or of a test run from leaving an orphaned Envoy or
picker behind. ``exec`` keeps the PID, so the child's PID is the program's.
"""


log = logging.getLogger(__name__)

_TAIL_BYTES = 4000


class ChildProcessError(RuntimeError):
    """A child failed to start, exited before it was ready, or never became ready."""


def log_tail(path: Path, limit: int = _TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log file, for error messages (blocking: call off the loop)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


class ChildProcess:
    """One child process in its own session, with stdout and stderr captured to ``log_path``.

    Use as an async context manager (start on enter, stop on exit) or call ``start``/``stop``.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        name: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a program")
        self._argv = list(argv)
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self.name = name
        self.log_path = log_path
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        """The child's PID (also its process-group id, since it leads its own session)."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """None while running (or before start); the exit status once it has been reaped."""
        return None if self._proc is None else self._proc.returncode

    async def start(self) -> None:
        """Spawn the child; its output goes to ``log_path`` (truncated)."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        argv = self._argv
        if sys.platform.startswith("linux"):
            try:
                program = await asyncio.to_thread(_resolve, argv[0], self._env, self._cwd)
            except OSError as exc:
                raise ChildProcessError(f"{self.name}: cannot start {argv[0]!r}: {exc}") from exc
            argv = [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), program, *argv]
        logfile: IO[bytes] = await asyncio.to_thread(self.log_path.open, "wb")
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=logfile,
                stderr=asyncio.subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ChildProcessError(f"{self.name}: cannot start {self._argv[0]!r}: {exc}") from exc
        finally:
            # The child holds its own copy of the descriptor.
            logfile.close()
        log.debug("child started", extra={"child": self.name, "pid": self._proc.pid, "argv": self._argv})

    async def wait_ready(
        self,
        probe: Callable[[], Awaitable[bool]],
        *,
        timeout: float,
        interval: float = 0.02,
    ) -> None:
        """Poll ``probe`` until it returns True; fail early (with the log tail) if the child exits."""
        proc = self._proc
        if proc is None:
            raise RuntimeError(f"{self.name} is not started")

        async def alive_and_ready() -> bool:
            if proc.returncode is not None:
                tail = await asyncio.to_thread(log_tail, self.log_path)
                raise ChildProcessError(
                    f"{self.name} exited with status {proc.returncode} before it was ready; "
                    f"log {self.log_path}:\n{tail}"
                )
            return await probe()

        try:
            await wait_until(alive_and_ready, timeout=timeout, interval=interval)
        except TimeoutError:
            tail = await asyncio.to_thread(log_tail, self.log_path)
            raise ChildProcessError(
                f"{self.name} (pid {proc.pid}) not ready within {timeout}s; log {self.log_path}:\n{tail}"
            ) from None

    async def stop(self, *, grace: float = 5.0) -> int | None:
        """SIGTERM the child's process group, SIGKILL after ``grace`` seconds; return the exit status.

        Safe to call twice and after the child has exited on its own.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await proc.wait()
            except TimeoutError:
                log.warning("child ignored SIGTERM; killing", extra={"child": self.name, "pid": proc.pid})
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        # Leftovers of the group (if the child forked) get no second chance.
        _signal_group(proc.pid, signal.SIGKILL)
        return proc.returncode

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _resolve(program: str, env: Mapping[str, str] | None, cwd: Path | None) -> str:
    """The executable ``program`` names, as ``execvp`` in the child would find it (blocking: call off the loop).

    A name with a slash is relative to the child's working directory; a bare name is looked up
    on the child's PATH. Raises FileNotFoundError (an OSError, as the spawn itself would) if none.
    """
    if "/" in program:
        path = Path(cwd or Path.cwd()) / program
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise FileNotFoundError(f"no executable at {path}")
    found = shutil.which(program, path=os.pathsep.join(os.get_exec_path(env)))
    if found is None:
        raise FileNotFoundError(f"{program!r} is not on the PATH")
    return found


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by ``pid`` (our child's own session); ignore it being gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
