"""ChildProcess: own session, readiness by condition, early failure with the log, stop by PID."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

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
    on_path = ChildProcess(["no-such-program-on-path"], log_path=tmp_path / "child.log", name="ghost")
    with pytest.raises(ChildProcessError, match="ghost: cannot start 'no-such-program-on-path'"):
        await on_path.start()


async def test_program_found_on_path_and_relative_to_the_working_directory(tmp_path: Path) -> None:
    script = tmp_path / "hello"
    script.write_text("#!/bin/sh\necho hello from $0\n")
    script.chmod(0o755)
    by_name = ChildProcess(["hello"], log_path=tmp_path / "a.log", name="a", env={"PATH": str(tmp_path)})
    relative = ChildProcess(["./hello"], log_path=tmp_path / "b.log", name="b", cwd=tmp_path)
    for child in (by_name, relative):
        await child.start()
        await wait_until(lambda c=child: c.returncode is not None, timeout=30)  # type: ignore[misc]
        assert child.returncode == 0
        assert child.log_path.read_text() == f"hello from {script}\n"


async def _health_traffic(target: str, stop: asyncio.Event) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while not stop.is_set():
            await stub.Check(health_pb2.HealthCheckRequest())


async def test_pid_is_the_programs(tmp_path: Path) -> None:
    child = ChildProcess(["/bin/sh", "-c", "echo $$"], log_path=tmp_path / "child.log", name="sh")
    await child.start()
    await wait_until(lambda: child.returncode is not None, timeout=30)
    assert child.log_path.read_text() == f"{child.pid}\n"


async def test_children_start_while_this_process_serves_grpc(tmp_path: Path) -> None:
    """gRPC's fork handlers must not run: forked, a child died before exec (SIGSEGV/SIGABRT, epoll_wait EBADF)."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stop = asyncio.Event()
    clients = [asyncio.create_task(_health_traffic(f"127.0.0.1:{port}", stop)) for _ in range(4)]
    statuses = []
    try:
        for n in range(20):
            child = ChildProcess(["/bin/sh", "-c", "exit 0"], log_path=tmp_path / f"{n}.log", name=f"child-{n}")
            await child.start()
            await wait_until(lambda c=child: c.returncode is not None, timeout=30)  # type: ignore[misc]
            statuses.append(child.returncode)
    finally:
        stop.set()
        await asyncio.gather(*clients)
        await server.stop(None)
    assert statuses == [0] * 20


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
