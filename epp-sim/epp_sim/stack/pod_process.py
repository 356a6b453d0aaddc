"""A simulated pod as its own OS process, so a test can kill or freeze its server for real.

The stack's pods are simulators on the test's event loop; stopping one of those closes its
sockets politely, which is not what a crashed or hung vLLM looks like. :class:`PodProcess` runs
``epp sim model-server`` as a child on a loopback address of its own, on the pool's target port,
and registers it as a Ready Pod, as a :class:`~epp_sim.stack.local.StackComponent`. Then
:meth:`kill` is SIGKILL (the kernel refuses new connections and resets open ones), :meth:`freeze`
is SIGSTOP (connections are still accepted into the backlog, nothing ever answers: ``/metrics``
hangs) and :meth:`thaw` is SIGCONT. Pins and faults go over the simulator's HTTP admin endpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from epp_sim.stack.processes import ChildProcess
from epp_sim.stack.started import require

if TYPE_CHECKING:
    from epp_sim.stack.local import LocalStack

__all__ = ["PodProcess"]


class PodProcess:
    """Pod ``name`` served by a child ``epp sim model-server`` on ``host`` (``sim_args``: its extra flags)."""

    def __init__(self, name: str, host: str, *, sim_args: Sequence[str] = (), ready_timeout: float = 30.0) -> None:
        self.name = name
        self.host = host
        self._sim_args = list(sim_args)
        self._ready_timeout = ready_timeout
        self._child: ChildProcess | None = None
        self._port: int | None = None
        self._frozen = False

    @property
    def hosts(self) -> Sequence[str]:
        return (self.host,)

    @property
    def address(self) -> str:
        """``ip:port``, as the picker names the pod in ``x-gateway-destination-endpoint``."""
        return f"{self.host}:{require(self._port, 'PodProcess', 'port')}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def pid(self) -> int:
        return require(self._child, "PodProcess", "child").pid

    async def start(self, stack: LocalStack) -> None:
        """Spawn the simulator on the stack's target port, wait for ``/health``, register the Ready Pod."""
        self._port = port = stack.target_port
        log_path = Path(stack.work_dir) / f"{self.name}.log"
        argv = [sys.executable, "-m", "epp", "sim", "model-server", "--host", self.host, "--port", str(port)]
        child = self._child = ChildProcess(
            [*argv, *self._sim_args], log_path=log_path, name=self.name, env=dict(os.environ, PYTHONUNBUFFERED="1")
        )
        await child.start()
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                try:
                    async with http.get(f"{self.url}/health", timeout=aiohttp.ClientTimeout(total=1)) as resp:
                        return resp.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    return False

            await child.wait_ready(healthy, timeout=self._ready_timeout, interval=0.05)
        spec = stack.pool
        await stack.cluster.create_ready_pod(self.name, self.host, spec.labels, port=port, namespace=spec.namespace)

    async def stop(self) -> None:
        child = self._child
        if child is None:
            return
        if self._frozen:
            self.thaw()  # a stopped process holds SIGTERM until it runs again
        await child.stop(grace=2.0)

    def kill(self) -> None:
        """SIGKILL the server: it dies at once, as an OOM-killed vLLM does."""
        os.kill(self.pid, signal.SIGKILL)

    def freeze(self) -> None:
        """SIGSTOP the server: alive to the kernel, silent to everyone (a hung vLLM)."""
        os.kill(self.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        os.kill(self.pid, signal.SIGCONT)
        self._frozen = False

    async def pin(self, **fields: Any) -> None:
        """Pin what the server reports on ``/metrics`` (the simulator's ``/_sim/pin``)."""
        await self._admin("POST", "/_sim/pin", fields)

    async def fail(self, status: int = 500) -> None:
        """Answer every completion with ``status`` from now on (the simulator's ``/_sim/fail``)."""
        await self._admin("POST", "/_sim/fail", {"status": status})

    async def recover(self) -> None:
        await self._admin("DELETE", "/_sim/fail", None)

    async def stats(self) -> Mapping[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{self.url}/_sim/stats") as resp:
            body: Mapping[str, Any] = await resp.json()
            return body

    async def _admin(self, method: str, path: str, body: Mapping[str, Any] | None) -> None:
        data = None if body is None else json.dumps(body).encode()
        async with (
            aiohttp.ClientSession() as http,
            asyncio.timeout(5),
            http.request(method, f"{self.url}{path}", data=data) as resp,
        ):
            if resp.status != 200:
                raise RuntimeError(f"{self.name} {method} {path}: HTTP {resp.status}: {await resp.text()}")
