"""Simulated pods: vLLM simulators on their own loopback addresses, registered as Ready Pods.

Pod ``i`` is a :class:`~epp_sim.modelserver.ModelServer` on ``127.0.0.{first_host + i}``; all of
them listen on one port, as an InferencePool's single target port expects, chosen free on every
address (and on ``reserved_hosts``, where other pods of the pool will appear later). If another
process takes the port between the check and the bind, the whole set is retried on a new one.
With a cluster, each becomes a Pod with that podIP and the Ready condition, through the API.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from epp.clock import Clock
from epp.tasks import Service
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.ports import common_free_port
from epp_sim.stack.cluster import FakeCluster

__all__ = ["SimPod", "SimulatedPods"]

log = logging.getLogger(__name__)

_BIND_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class SimPod:
    """One simulated pod: its Pod name and the simulator answering at its IP."""

    name: str
    server: ModelServer = field(repr=False)

    @property
    def ip(self) -> str:
        return self.server.host

    @property
    def address(self) -> str:
        """``ip:port``, as the picker names it in ``x-gateway-destination-endpoint``."""
        return self.server.address


class SimulatedPods(Service):
    """``count`` simulated pods; ``async with SimulatedPods(cluster, 3, labels={"app": "m"}) as pods:``.

    ``config`` is one :class:`SimConfig` for all pods or one per pod. ``cluster=None`` starts the
    simulators only (a caller that registers pods its own way, or needs none).
    """

    def __init__(
        self,
        cluster: FakeCluster | None,
        count: int,
        *,
        labels: Mapping[str, str],
        config: SimConfig | Sequence[SimConfig] | None = None,
        name_prefix: str = "pod",
        namespace: str | None = None,
        base_ip: str = "127.0.0.",
        first_host: int = 2,
        reserved_hosts: Sequence[str] = (),
        clock: Clock | None = None,
    ) -> None:
        if count < 0 or first_host < 1 or first_host + count - 1 > 254:
            raise ValueError(f"pods {base_ip}{first_host}..{base_ip}{first_host + count - 1} do not fit in .1-.254")
        configs = [config or SimConfig()] * count if not isinstance(config, Sequence) else list(config)
        if len(configs) != count:
            raise ValueError(f"got {len(configs)} simulator configs for {count} pods")
        self._cluster = cluster
        self._configs = configs
        self.labels = dict(labels)
        self._prefix = name_prefix
        self._namespace = namespace
        self.hosts = [f"{base_ip}{first_host + i}" for i in range(count)]
        self._reserved = [h for h in reserved_hosts if h not in self.hosts]
        self._clock = clock
        self._exit = AsyncExitStack()
        self._pods: list[SimPod] = []
        self._port: int | None = None

    @property
    def pods(self) -> list[SimPod]:
        return list(self._pods)

    @property
    def servers(self) -> list[ModelServer]:
        return [p.server for p in self._pods]

    @property
    def port(self) -> int:
        """The port every pod listens on (the pool's target port)."""
        if self._port is None:
            raise RuntimeError("SimulatedPods not started")
        return self._port

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self._pods]

    def __len__(self) -> int:
        return len(self._pods)

    def __getitem__(self, index: int) -> SimPod:
        return self._pods[index]

    def __iter__(self) -> Iterator[SimPod]:
        return iter(self._pods)

    def pin(self, index: int, **fields: Any) -> None:
        """Pin what pod ``index`` reports (``waiting``, ``kv_cache_usage``, ``running_loras``, ...)."""
        self._pods[index].server.pin(**fields)

    async def start(self) -> None:
        for attempt in range(_BIND_ATTEMPTS):
            port = await asyncio.to_thread(common_free_port, [*self.hosts, *self._reserved] or ["127.0.0.1"])
            servers = AsyncExitStack()
            try:
                started = [
                    await servers.enter_async_context(ModelServer(cfg, host=host, port=port, clock=self._clock))
                    for cfg, host in zip(self._configs, self.hosts, strict=True)
                ]
            except OSError as e:
                await servers.aclose()
                if attempt == _BIND_ATTEMPTS - 1:
                    raise OSError(f"could not bind the simulated pods on a common port: {e}") from e
                log.info("simulator port taken meanwhile; retrying", extra={"port": port, "error": str(e)})
                continue
            except BaseException:
                await servers.aclose()
                raise
            self._exit.push_async_callback(servers.aclose)
            self._port = port
            self._pods = [SimPod(f"{self._prefix}-{i}", server) for i, server in enumerate(started)]
            break
        if self._cluster is not None:
            for sim_pod in self._pods:
                await self._cluster.create_ready_pod(
                    sim_pod.name, sim_pod.ip, self.labels, port=self.port, namespace=self._namespace
                )

    async def stop(self) -> None:
        exit_stack, self._exit = self._exit, AsyncExitStack()
        await exit_stack.aclose()
