"""The picker under test: the real ``epp serve``, in this process or as a child process.

Both forms take the arguments a user would type after ``epp serve`` (a platform team's own
``--pool-name``, ``--config-file`` and so on), parsed by the real ``epp serve`` parser, plus the
loopback defaults a hermetic run needs (plaintext, no drain window, 127.0.0.1, the fake cluster's kubeconfig,
``/metrics`` without a token, the epp.v1 API's TLS port free). Explicit arguments win over the defaults.

- :class:`InProcessPicker` runs :class:`epp.runtime.Runtime` on this event loop: fast to start,
  and tests can look inside (``.runtime``: datastore, metrics registry, ports).
- :class:`PickerProcess` runs ``python -m epp serve`` as a child (``epp dev``, the end-to-end tests):
  the exact process an image would run, observed only from outside (health, ``/metrics``).

Either is ready for traffic once :meth:`wait_routing` has seen the pool's pods counted by the
picker's ``inference_pool_ready_pods`` gauge, or its twin ``llm_d_epp_ready_endpoints`` under
``--metrics-naming llm-d`` (synced, and every pod scraped).
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp

from epp.cli import build_parser
from epp.datalayer import promtext
from epp.runtime import Runtime
from epp.serve_command import options_from_args
from epp.tasks import Service
from epp_sim.ports import free_port
from epp_sim.stack.processes import ChildProcess
from epp_sim.waits import wait_until

__all__ = ["InProcessPicker", "Picker", "PickerProcess", "serve_arguments"]

_READY_PODS = ("inference_pool_ready_pods", "llm_d_epp_ready_endpoints")
_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
Probe = Callable[[], Awaitable[bool]]


def _flag_names(args: Sequence[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a.startswith("-")}


def serve_arguments(
    args: Sequence[str], *, kubeconfig: Path, grpc_port: int, health_port: int, metrics_port: int, api_port: int
) -> list[str]:
    """``args`` completed with the hermetic defaults for every flag they do not set themselves."""
    given = _flag_names(args)
    defaults = {
        "--secure-serving": "false",
        # The stack's Envoy health-checks the ext_proc cluster over gRPC (envoy_config.py).
        "--health-checking": "true",
        # A stopped child goes away at once (open streams still finish); a drain test sets its own.
        "--drain-timeout": "0s",
        "--bind-address": "127.0.0.1",
        "--kubeconfig": str(kubeconfig),
        "--grpc-port": str(grpc_port),
        "--grpc-health-port": str(health_port),
        "--metrics-port": str(metrics_port),
        # The epp.v1 API's TLS port (bound only with --metrics-cert-dir).
        "--epp-api-port": str(api_port),
        # The stack reads the picker's /metrics without a token; a test of the auth sets it true.
        "--metrics-endpoint-auth": "false",
    }
    return [*args, *(f"{flag}={value}" for flag, value in defaults.items() if flag not in given)]


async def _ready_pods(session: aiohttp.ClientSession, metrics_url: str, pool: str, count: int) -> bool:
    try:
        async with session.get(metrics_url) as resp:
            if resp.status in (401, 403):
                raise PermissionError(
                    f"the picker's {metrics_url} wants a token (HTTP {resp.status}): the stack reads it "
                    "without one, so keep --metrics-endpoint-auth=false"
                )
            if resp.status != 200:
                return False
            body = await resp.read()
    except (aiohttp.ClientError, TimeoutError):
        return False
    found = promtext.parse(body, _READY_PODS).samples  # whichever names --metrics-naming serves
    samples = [s for name in _READY_PODS for s in found.get(name, [])]
    return any(s.labels.get("name") == pool and s.value >= count for s in samples)


class Picker(Service):
    """What both forms share: their addresses and the readiness wait over the picker's own ``/metrics``."""

    @property
    def grpc_target(self) -> str:
        """``host:port`` of the ext_proc server."""
        raise NotImplementedError

    @property
    def health_target(self) -> str:
        """``host:port`` of the gRPC health server."""
        raise NotImplementedError

    @property
    def api_target(self) -> str:
        """``host:port`` of the epp.v1 API's TLS port (served with ``--metrics-cert-dir``)."""
        raise NotImplementedError

    @property
    def metrics_url(self) -> str:
        raise NotImplementedError

    async def wait_routing(self, pool: str, count: int, *, timeout: float = 30.0) -> None:
        """Until the picker counts ``count`` Ready pods of ``pool``, each one scraped."""
        async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
            probe: Probe = lambda: _ready_pods(session, self.metrics_url, pool, count)  # noqa: E731
            await self._wait(probe, timeout=timeout, what=f"the picker routing to {count} pod(s) of {pool}")

    async def _wait(self, probe: Probe, *, timeout: float, what: str) -> None:
        await wait_until(probe, timeout=timeout, interval=0.02, message=what)


class InProcessPicker(Picker):
    """``epp serve ARGS`` on this event loop; ``.runtime`` is the running :class:`Runtime`."""

    def __init__(
        self, args: Sequence[str], *, kubeconfig: Path, seed: int | None = None, readiness_interval: float = 0.02
    ) -> None:
        full = serve_arguments(args, kubeconfig=kubeconfig, grpc_port=0, health_port=0, metrics_port=0, api_port=0)
        self.args = full
        self.options = options_from_args(build_parser("serve").parse_args(["serve", *full]))
        self._rng = random.Random(seed)
        self._readiness_interval = readiness_interval
        self._runtime: Runtime | None = None

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("picker not started")
        return self._runtime

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.runtime.ports.grpc}"

    @property
    def health_target(self) -> str:
        return f"127.0.0.1:{self.runtime.ports.health}"

    @property
    def api_target(self) -> str:
        return f"127.0.0.1:{self.runtime.ports.api}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.runtime.ports.metrics}/metrics"

    async def start(self) -> None:
        self._runtime = Runtime(self.options, rng=self._rng, readiness_interval=self._readiness_interval)
        await self._runtime.start()

    async def stop(self, grace: float = 1.0) -> None:
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            await runtime.stop(grace=grace)


class PickerProcess(Picker):
    """``python -m epp serve ARGS`` as a child process, its output in ``log_path``."""

    def __init__(self, args: Sequence[str], *, kubeconfig: Path, log_path: Path, verbosity: int = 2) -> None:
        self.grpc_port, self.health_port, self.metrics_port = free_port(), free_port(), free_port()
        self.api_port = free_port()
        full = serve_arguments(
            args,
            kubeconfig=kubeconfig,
            grpc_port=self.grpc_port,
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            api_port=self.api_port,
        )
        if not {"-v", "--v"} & _flag_names(full):
            full.append(f"--v={verbosity}")
        self.args = full
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", "epp", "serve", *full]
        self.child = ChildProcess(argv, log_path=log_path, name="epp serve", env=env)

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def health_target(self) -> str:
        return f"127.0.0.1:{self.health_port}"

    @property
    def api_target(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    async def start(self) -> None:
        await self.child.start()

    async def stop(self) -> None:
        await self.child.stop()

    async def _wait(self, probe: Probe, *, timeout: float, what: str) -> None:
        """As the base, but fails at once (with the log's tail) if the child exits meanwhile."""
        await self.child.wait_ready(probe, timeout=timeout, interval=0.05)
