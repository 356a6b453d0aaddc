"""ChildProcess: own session, readiness by condition, early failure with the log, stop by PID."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from epp_sim.stack.processes import ChildProcess, ChildProcessError
from epp_sim.waits import wait_until

# Writes a marker file once its SIGTERM handler is in place, then waits forever.
_WAITER = """
import pathlib, signal, sys, time
if sys.argv[2] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("child says hello", flush=True)
pathlib.Path(sys.argv[1]).write_text("ready")
while True:
    time.sleep(3600)
"""


def _python(*args: str) -> list[str]:
    return [sys.executable, "-c", _WAITER, *args]


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def test_child_runs_in_its_own_session_and_stops_on_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    child = ChildProcess(_python(str(marker), "obey"), log_path=tmp_path / "child.log", name="waiter")
    async with child:
        await child.wait_ready(lambda: _exists(marker), timeout=10)
        assert os.getsid(child.pid) == child.pid
        assert os.getpgid(child.pid) == child.pid
        assert child.returncode is None
    assert child.returncode == -15
    assert "child says hello" in (tmp_path / "child.log").read_text()


async def test_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    child = ChildProcess(_python(str(marker), "ignore-term"), log_path=tmp_path / "child.log", name="stubborn")
    await child.start()
    await child.wait_ready(lambda: _exists(marker), timeout=10)
    assert await child.stop(grace=0.2) == -9
    assert await child.stop() == -9  # a second stop is harmless


async def test_exit_before_ready_raises_with_the_log_tail(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('bad flag --frobnicate'); sys.exit(3)"]
    child = ChildProcess(argv, log_path=tmp_path / "child.log", name="doomed")
    async with child:
        with pytest.raises(ChildProcessError, match=r"(?s)doomed exited with status 3.*bad flag --frobnicate"):
            await child.wait_ready(lambda: _exists(tmp_path / "never"), timeout=10)


async def test_not_ready_in_time_raises(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    child = ChildProcess(_python(str(marker), "obey"), log_path=tmp_path / "child.log", name="slow")
    async with child:
        with pytest.raises(ChildProcessError, match="not ready within 0.2s"):
            await child.wait_ready(lambda: _exists(tmp_path / "never"), timeout=0.2)


async def test_missing_program_is_a_clear_error(tmp_path: Path) -> None:
    child = ChildProcess([str(tmp_path / "no-such-binary")], log_path=tmp_path / "child.log", name="ghost")
    with pytest.raises(ChildProcessError, match="ghost: cannot start"):
        await child.start()
    assert await child.stop() is None


# A parent that starts a ChildProcess, reports the child's PID, then dies without any teardown.
_PARENT = """
import asyncio, os, sys
from pathlib import Path
from epp_sim.stack.processes import ChildProcess

async def main():
    child = ChildProcess([sys.executable, "-c", "import time; time.sleep(3600)"], log_path=Path(sys.argv[1]), name="c")
    await child.start()
    print(child.pid, flush=True)
    os._exit(0)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for init to reap it is gone too
        return f.read().split(") ", 1)[1][0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
async def test_child_dies_with_a_parent_that_is_killed(tmp_path: Path) -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PARENT, str(tmp_path / "child.log"), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await parent.communicate()
    child_pid = int(out.decode().strip())
    await wait_until(lambda: not _alive(child_pid), timeout=10, message="orphaned child terminated")
