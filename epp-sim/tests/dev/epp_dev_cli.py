"""Run ``epp dev`` as a user does (a child process, its own session) and return its exit code and output."""

from __future__ import annotations

import asyncio
import os
import signal
import sys


async def run_epp_dev(*args: str, timeout: float) -> tuple[int, str]:
    """``python -m epp dev --port 0 --no-dashboard --exit-after-load <args>``; killed if it overruns."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "epp", "dev", "--port", "0", "--no-dashboard", "--exit-after-load", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode()
