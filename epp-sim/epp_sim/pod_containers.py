"""The sidecar container of a simulated pod: ``epp sidecar`` as a process of its own, as a kubelet would run it.

A decode pod of disaggregated serving runs ``epp sidecar`` beside its model server (a native
sidecar: an init container that keeps running, or a plain container). The simulated workload
controller finds it in the pod template (a container whose command is ``epp sidecar``), expands
the ``$(VAR)`` references of its arguments from the container's environment (plain values and the
downward API's ``metadata.namespace``, ``metadata.name`` and ``status.podIP``), and runs the real
command with the pod's address (``--bind-address``, ``--model-server-host``, ``POD_IP``), the port
the pod's simulator really got (``--model-server-port``) and, for SSRF protection, the API
server's kubeconfig. The pod turns Ready once the sidecar answers on its port.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from epp_sim.stack.processes import ChildProcess

__all__ = ["SidecarContainer", "SidecarProcess", "sidecar_container"]

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_DEFAULT_PORT = 8000
_READY_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class SidecarContainer:
    """The sidecar container of a pod template: its arguments (references unexpanded) and environment."""

    args: tuple[str, ...]
    env: tuple[Mapping[str, Any], ...]

    def expanded(self, *, namespace: str, pod: str, ip: str) -> list[str]:
        values: dict[str, str] = {}
        fields = {"metadata.namespace": namespace, "metadata.name": pod, "status.podIP": ip}
        for entry in self.env:
            name = str(entry.get("name", ""))
            if "value" in entry:
                values[name] = str(entry["value"])
            path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path in fields:
                values[name] = fields[path]
        return [_REFERENCE.sub(lambda m: values.get(m.group(1), m.group(0)), arg) for arg in self.args]

    @property
    def secure(self) -> bool:
        """``--secure-proxy`` (upstream's default: TLS)."""
        secure = True
        for arg in self.args:
            if arg.startswith("--secure-proxy"):
                secure = arg.partition("=")[2].lower() not in ("false", "0", "f")
        return secure

    @property
    def port(self) -> int:
        """The port it listens on (its ``--port``, else the sidecar's default)."""
        port = _DEFAULT_PORT
        for i, arg in enumerate(self.args):
            if arg.startswith("--port="):
                port = int(arg.removeprefix("--port="))
            elif arg == "--port" and i + 1 < len(self.args):
                port = int(self.args[i + 1])
        return port


def sidecar_container(spec: Mapping[str, Any]) -> SidecarContainer | None:
    """The ``epp sidecar`` container of a pod spec (init containers included), if there is one."""
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        command = [str(w) for w in container.get("command") or ()]
        args = [str(w) for w in container.get("args") or ()]
        words = command + args
        if len(words) >= 2 and Path(words[0]).name == "epp" and words[1] == "sidecar":
            return SidecarContainer(tuple(words[2:]), tuple(container.get("env") or ()))
    return None


class SidecarProcess:
    """``epp sidecar`` for one pod, started once its model server listens, stopped with the pod."""

    def __init__(
        self,
        container: SidecarContainer,
        *,
        namespace: str,
        pod: str,
        ip: str,
        engine_port: int,
        log_dir: Path,
        kubeconfig: str = "",
    ) -> None:
        self.address = f"{ip}:{container.port}"
        argv = [
            sys.executable,
            "-m",
            "epp",
            "sidecar",
            *container.expanded(namespace=namespace, pod=pod, ip=ip),
            f"--bind-address={ip}",
            f"--model-server-host={ip}",
            f"--model-server-port={engine_port}",
            *([f"--kubeconfig={kubeconfig}"] if kubeconfig else []),
        ]
        self._scheme = "https" if container.secure else "http"
        self._child = ChildProcess(
            argv,
            log_path=log_dir / f"sidecar-{namespace}-{pod}.log",
            name=f"sidecar of {pod}",
            env={**os.environ, "POD_IP": ip},
        )

    async def start(self) -> None:
        await self._child.start()
        try:
            await self._child.wait_ready(self._answers, timeout=_READY_TIMEOUT, interval=0.05)
        except BaseException:
            await self._child.stop()
            raise

    async def stop(self) -> None:
        await self._child.stop()

    async def _answers(self) -> bool:
        try:
            url = f"{self._scheme}://{self.address}/health"
            async with aiohttp.ClientSession() as http, http.get(url, ssl=False) as resp:
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False
