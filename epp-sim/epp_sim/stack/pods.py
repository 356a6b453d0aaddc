"""Simulated pods: vLLM simulators on their own loopback addresses, registered as Ready Pods.

Pod ``i`` is a :class:`~epp_sim.modelserver.ModelServer` on ``127.0.0.{first_host + i}``; all of
them listen on one port, as an InferencePool's single target port expects, chosen free on every
address (and on ``reserved_hosts``, where other pods of the pool will appear later). If another
process takes the port between the check and the bind, the whole set is retried on a new one.
With a cluster, each becomes a Pod with that podIP and the Ready condition, through the API.

For disaggregated serving, ``roles`` labels each pod ``llm-d.ai/role`` (None: no label), and with
``sidecar_args`` every pod whose role serves decode runs ``epp sidecar`` (those arguments added)
on the pool's port in front of its simulator, which then listens on a second port, as a decode
Deployment's vLLM container sits behind its routing sidecar. ``ranks`` > 1 makes each pod serve
that many data-parallel ranks on consecutive ports (an engine each, and the sidecar's listener
per rank), the pool listing every rank's port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from epp.clock import Clock
from epp.framework.roles import DECODE_SELECTOR, ROLE_LABEL
from epp.sidecar.server import Sidecar
from epp.tasks import Service
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.ports import consecutive_free_ports
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.sidecars import sidecar_for

__all__ = ["SimPod", "SimulatedPods"]

log = logging.getLogger(__name__)

_BIND_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class SimPod:
    """One simulated pod: its Pod name, labels and port, its simulators (one per rank) and its sidecar, if any."""

    name: str
    server: ModelServer = field(repr=False)
    """The engine of rank 0 (``servers`` has every rank's)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    port: int = 0
    """The pool's target port on this pod (the sidecar's when there is one)."""
    servers: Sequence[ModelServer] = field(default=(), repr=False)
    sidecar: Sidecar | None = field(default=None, repr=False)

    @property
    def ip(self) -> str:
        return self.server.host

    @property
    def address(self) -> str:
        """``ip:port``, as the picker names it in ``x-gateway-destination-endpoint``."""
        return f"{self.ip}:{self.port}"

    @property
    def addresses(self) -> list[str]:
        """Every rank's ``ip:port``."""
        return [f"{self.ip}:{self.port + r}" for r in range(max(1, len(self.servers)))]


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
        roles: Sequence[str | None] = (),
        sidecar_args: Sequence[str] | None = None,
        ranks: int = 1,
    ) -> None:
        if count < 0 or first_host < 1 or first_host + count - 1 > 254:
            raise ValueError(f"pods {base_ip}{first_host}..{base_ip}{first_host + count - 1} do not fit in .1-.254")
        configs = [config or SimConfig()] * count if not isinstance(config, Sequence) else list(config)
        if len(configs) != count:
            raise ValueError(f"got {len(configs)} simulator configs for {count} pods")
        if roles and len(roles) != count:
            raise ValueError(f"got {len(roles)} roles for {count} pods")
        if not 1 <= ranks <= 8:
            raise ValueError(f"ranks must be 1..8, got {ranks}")
        self._cluster = cluster
        self._configs = configs
        self.labels = dict(labels)
        self._roles = list(roles) or [None] * count
        self._sidecar_args = sidecar_args
        self.ranks = ranks
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
        """The port every pod listens on (the pool's target port; rank r's is ``port + r``)."""
        if self._port is None:
            raise RuntimeError("SimulatedPods not started")
        return self._port

    @property
    def addresses(self) -> list[str]:
        return [a for p in self._pods for a in p.addresses]

    def __len__(self) -> int:
        return len(self._pods)

    def __getitem__(self, index: int) -> SimPod:
        return self._pods[index]

    def __iter__(self) -> Iterator[SimPod]:
        return iter(self._pods)

    def pin(self, index: int, **fields: Any) -> None:
        """Pin what pod ``index`` reports (``waiting``, ``kv_cache_usage``, ``running_loras``, ...)."""
        self._pods[index].server.pin(**fields)

    def _pod_labels(self, index: int) -> dict[str, str]:
        role = self._roles[index]
        return self.labels if role is None else {**self.labels, ROLE_LABEL: role}

    def _fronted(self, index: int) -> bool:
        """Whether pod ``index`` runs a sidecar: a decode-capable role, with sidecars asked for."""
        return (
            self._sidecar_args is not None
            and self._roles[index] is not None
            and DECODE_SELECTOR.accepts(self._pod_labels(index))
        )

    async def start(self) -> None:
        for attempt in range(_BIND_ATTEMPTS):
            servers = AsyncExitStack()
            try:
                self._pods = await self._start_pods(servers)
            except OSError as e:
                await servers.aclose()
                if attempt == _BIND_ATTEMPTS - 1:
                    raise OSError(f"could not bind the simulated pods on a common port: {e}") from e
                log.info("simulator port taken meanwhile; retrying", extra={"error": str(e)})
                continue
            except BaseException:
                await servers.aclose()
                raise
            self._exit.push_async_callback(servers.aclose)
            break
        if self._cluster is not None:
            for sim_pod in self._pods:
                await self._cluster.create_ready_pod(
                    sim_pod.name, sim_pod.ip, sim_pod.labels, port=self.port, namespace=self._namespace
                )

    async def _start_pods(self, servers: AsyncExitStack) -> list[SimPod]:
        """Bind every pod's simulators (and sidecars) on a port block free on every address."""
        every = [*self.hosts, *self._reserved] or ["127.0.0.1"]
        port = await asyncio.to_thread(consecutive_free_ports, every, self.ranks)
        fronted = [self._fronted(i) for i in range(len(self.hosts))]
        engine_port = port
        if any(fronted):  # the engines behind sidecars listen on a block of their own
            behind = [h for h, f in zip(self.hosts, fronted, strict=True) if f]
            while engine_port < port + self.ranks and engine_port + self.ranks > port:
                engine_port = await asyncio.to_thread(consecutive_free_ports, behind, self.ranks)
        pods: list[SimPod] = []
        for i, (cfg, host) in enumerate(zip(self._configs, self.hosts, strict=True)):
            first = engine_port if fronted[i] else port
            ranks = [ModelServer(cfg, host=host, port=first + r, clock=self._clock) for r in range(self.ranks)]
            for server in ranks:
                await servers.enter_async_context(server)
            sidecar = None
            if fronted[i]:
                sidecar = sidecar_for(host, port, first, self.ranks, self._sidecar_args or ())
                await servers.enter_async_context(sidecar)
            pods.append(SimPod(f"{self._prefix}-{i}", ranks[0], self._pod_labels(i), port, ranks, sidecar))
        self._port = port  # also with no pods: a pool that starts empty still has its target port
        return pods

    async def stop(self) -> None:
        exit_stack, self._exit = self._exit, AsyncExitStack()
        await exit_stack.aclose()
