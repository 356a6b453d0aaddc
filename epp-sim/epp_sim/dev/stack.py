"""``LocalStack``: the whole data plane on one machine, started in order and torn down in reverse.

What ``epp dev``, the end-to-end tests and the benchmarks run: a fake Kubernetes API server
(in-process, port 0) holding the inference CRDs and the sample pool, objectives and rewrite from
``manifests/`` (read by :mod:`epp_sim.dev.samples`); N simulated vLLM pods (in-process, one per
``127.0.0.x``, all on one port so the pool's single target port fits, registered as Ready Pods
with that podIP); the picker as a real ``epp serve`` child process reading that API server; and a
real Envoy whose ext_proc filter calls the picker. Everything is started through an
``AsyncExitStack``, so a failed start, an exception or Ctrl-C stops whatever had started
(children by PID) and removes the work directory.

The sample pool's ``targetPorts`` is rewritten to the port the simulators share (a free one,
chosen at start), since 8000 may be taken on a developer's machine. The sample Deployment is read
for the model name, LoRA slots and pod labels but not applied here (nothing would run its pods),
nor is the v1alpha2 InferenceModel (it belongs to the v1alpha2 pool, which ``epp dev`` does not run).

Extra parts (``epp dev --autoscale``'s simulated Deployment and autoscaler) plug in as
:class:`StackComponent`: started after Envoy, stopped before it. A component declares the
addresses it will serve pods on, so the shared target port is chosen free there too; with
``pods=0`` every pod of the pool comes from components.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import aiohttp

from epp.datalayer import promtext
from epp.tasks import Service
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.dev.envoy import EnvoyProcess, ExtProcTarget, envoy_bootstrap
from epp_sim.dev.processes import ChildProcess
from epp_sim.dev.samples import ManifestError, SamplePool, load_samples, qualified
from epp_sim.modelserver.fixture import ModelServer
from epp_sim.testing import free_port

__all__ = [
    "DEFAULT_ENVOY_PORT",
    "DEFAULT_MANIFESTS",
    "LocalStack",
    "PickerPorts",
    "SimPod",
    "StackComponent",
    "StackConfig",
    "StackError",
]

log = logging.getLogger(__name__)

DEFAULT_ENVOY_PORT = 8081
# The repository's manifests/, shipped inside this distribution (a link in the source tree).
DEFAULT_MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
_READY_PODS_METRIC = "inference_pool_ready_pods"
_PORT_ATTEMPTS = 5
_POLL_INTERVAL = 0.05
_T = TypeVar("_T")


class StackError(RuntimeError):
    """The stack cannot start: missing or unusable manifests, no common free port, a child that failed."""


class StackComponent(Protocol):
    """An optional part started once the data plane is up (an autoscaler, say) and stopped first.

    ``hosts`` are the addresses where it will serve pods of the pool, on
    :attr:`LocalStack.target_port` (chosen free on them too); empty if it serves none.
    ``stop`` is called even when ``start`` failed part way, so it must cope with that.
    """

    name: str

    @property
    def hosts(self) -> Sequence[str]: ...

    async def start(self, stack: LocalStack) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StackConfig:
    """What to start; validated when built.

    ``pods`` hand-made Ready pods (0 when components bring the pool's pods). ``envoy_port`` None
    means 8081 if it is free, else any free port; 0 means any free port. ``manifests`` is the
    folder holding ``crds/`` and ``samples/``.
    """

    pods: int = 4
    envoy_port: int | None = None
    time_scale: float = 1.0
    base_ip: str = "127.0.0."
    first_host: int = 2
    manifests: Path = DEFAULT_MANIFESTS
    picker_verbosity: int = 2
    ready_timeout: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.pods, bool) or not isinstance(self.pods, int) or self.pods < 0:
            raise StackError(f"pods must be a non-negative integer, got {self.pods!r}")
        if not 1 <= self.first_host <= 254 or self.first_host + self.pods - 1 > 254:
            raise StackError(
                f"pods {self.base_ip}{self.first_host}..{self.base_ip}{self.first_host + self.pods - 1} run past .254"
            )
        if self.envoy_port is not None and not 0 <= self.envoy_port <= 65535:
            raise StackError(f"envoy_port must be in 0..65535, got {self.envoy_port!r}")
        if not math.isfinite(self.time_scale) or self.time_scale <= 0:
            raise StackError(f"time_scale must be a positive number, got {self.time_scale!r}")
        if self.ready_timeout <= 0:
            raise StackError(f"ready_timeout must be positive, got {self.ready_timeout!r}")


@dataclass(frozen=True, slots=True)
class PickerPorts:
    """Where the ``epp serve`` child listens."""

    grpc: int
    health: int
    metrics: int


@dataclass(frozen=True, slots=True)
class SimPod:
    """One simulated pod: its Pod name in the API server and the simulator answering at its IP."""

    name: str
    server: ModelServer = field(repr=False)

    @property
    def ip(self) -> str:
        return self.server.host

    @property
    def address(self) -> str:
        """``ip:port``, as the picker names it in ``x-gateway-destination-endpoint``."""
        return self.server.address


def _port_free_on(hosts: Sequence[str], port: int) -> bool:
    for host in hosts:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def _common_free_port(hosts: Sequence[str]) -> int:
    """A port free on every host right now (the kernel picks one on the first; the rest are checked)."""
    for _ in range(20):
        port = free_port(hosts[0])
        if _port_free_on(hosts[1:], port):
            return port
    raise StackError(f"no port found free on all of {hosts[0]}..{hosts[-1]}")


class LocalStack(Service):
    """Fake API server, simulated pods, ``epp serve`` and Envoy, as one async context manager.

    ``async with LocalStack(StackConfig(pods=3)) as stack:`` then send requests to
    ``stack.envoy_url``; ``stack.pods`` / ``stack.servers`` are the simulators, ``stack.kubeconfig``
    points kubectl at the fake API server, ``stack.picker_metrics_url`` is the picker's /metrics.
    """

    def __init__(self, config: StackConfig | None = None, *, components: Sequence[StackComponent] = ()) -> None:
        self.config = config or StackConfig()
        self._components = list(components)
        self._exit = AsyncExitStack()
        self._started = False
        self._work_dir: Path | None = None
        self._samples: SamplePool | None = None
        self._apiserver: RunningApiServer | None = None
        self._pods: list[SimPod] = []
        self._target_port: int | None = None
        self._picker: ChildProcess | None = None
        self._picker_ports: PickerPorts | None = None
        self._envoy: EnvoyProcess | None = None

    # ------------------------------------------------------------------------------ accessors

    @property
    def samples(self) -> SamplePool:
        """The manifests applied (pool name, model, adapters, objectives)."""
        return _need(self._samples, "samples")

    @property
    def apiserver(self) -> RunningApiServer:
        """The fake API server (``.server.store`` for in-process reads and writes)."""
        return _need(self._apiserver, "API server")

    @property
    def kubeconfig(self) -> Path:
        return self.apiserver.kubeconfig

    @property
    def work_dir(self) -> Path:
        """Holds the kubeconfig and the picker's and Envoy's logs; removed at teardown."""
        return _need(self._work_dir, "work directory")

    @property
    def pods(self) -> list[SimPod]:
        return list(self._pods)

    @property
    def servers(self) -> list[ModelServer]:
        return [p.server for p in self._pods]

    @property
    def target_port(self) -> int:
        """The pool's single target port: every pod's simulator (hand-made or a component's) listens on it."""
        return _need(self._target_port, "target port")

    @property
    def envoy(self) -> EnvoyProcess:
        return _need(self._envoy, "Envoy")

    @property
    def envoy_url(self) -> str:
        return f"http://127.0.0.1:{self.envoy.port}"

    @property
    def picker(self) -> ChildProcess:
        """The ``epp serve`` child (``.pid``, ``.log_path``)."""
        return _need(self._picker, "picker")

    @property
    def picker_ports(self) -> PickerPorts:
        """The picker's ext_proc, health and metrics ports (all on 127.0.0.1)."""
        return _need(self._picker_ports, "picker")

    @property
    def picker_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.picker_ports.metrics}/metrics"

    def child_pids(self) -> list[int]:
        """PIDs of every child process the stack started (picker, Envoy)."""
        return [c.pid for c in (self._picker, self._envoy) if c is not None]

    async def wait_ready_pods(self, count: int, *, timeout: float | None = None) -> None:
        """Wait until the picker counts at least ``count`` Ready pods of the pool, each scraped.

        StackError after ``timeout`` (default: the config's ``ready_timeout``) seconds.
        """
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
            await _poll(
                lambda: _pool_has_ready_pods(session, self.picker_metrics_url, self.samples.name, count),
                timeout=self.config.ready_timeout if timeout is None else timeout,
                what=f"the picker routing to {count} pod(s) of {self.samples.name} (logs in {self.work_dir})",
            )

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start every part in order; on any failure (or cancellation) stop what had started."""
        if self._started:
            raise RuntimeError("LocalStack already started")
        self._started = True
        try:
            await self._start_all()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop everything in reverse order; safe after a failed start and when called twice.

        A cancellation arriving meanwhile waits for the teardown to finish before it propagates,
        so no child is abandoned half way through its stop.
        """
        exit_stack, self._exit = self._exit, AsyncExitStack()
        teardown = asyncio.create_task(exit_stack.aclose(), name="epp-dev-teardown")
        try:
            await asyncio.shield(teardown)
        except asyncio.CancelledError:
            await asyncio.wait([teardown])  # finish stopping the children first, then give in
            raise

    async def _start_all(self) -> None:
        cfg = self.config
        work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-dev-"))
        self._work_dir = work
        self._exit.push_async_callback(asyncio.to_thread, shutil.rmtree, work, True)
        try:
            self._samples = samples = await asyncio.to_thread(load_samples, cfg.manifests)
        except ManifestError as e:
            raise StackError(str(e)) from e
        self._apiserver = await self._exit.enter_async_context(
            running_apiserver(kubeconfig_path=work / "kubeconfig", namespace=samples.namespace)
        )
        await self._start_servers(samples)
        self._apply(samples)
        await self._start_picker(samples, work)
        await self._start_envoy(work)
        for component in self._components:
            self._exit.push_async_callback(component.stop)
            await component.start(self)

    async def _start_servers(self, samples: SamplePool) -> None:
        """N simulators on one port that is also free on the components' addresses (retried if raced)."""
        cfg = self.config
        hosts = [f"{cfg.base_ip}{cfg.first_host + i}" for i in range(cfg.pods)]
        reserved = [h for c in self._components for h in c.hosts if h not in hosts]
        sim = samples.sim_config(time_scale=cfg.time_scale)
        for attempt in range(_PORT_ATTEMPTS):
            port = await asyncio.to_thread(_common_free_port, [*hosts, *reserved] or ["127.0.0.1"])
            servers: AsyncExitStack = AsyncExitStack()
            started: list[ModelServer] = []
            try:
                for host in hosts:
                    started.append(await servers.enter_async_context(ModelServer(sim, host=host, port=port)))
            except OSError as e:
                await servers.aclose()
                log.info("simulator port taken meanwhile; retrying", extra={"port": port, "error": str(e)})
                if attempt == _PORT_ATTEMPTS - 1:
                    raise StackError(f"could not bind the simulators on a common port: {e}") from e
                continue
            except BaseException:
                await servers.aclose()
                raise
            self._exit.push_async_callback(servers.aclose)
            self._pods = [SimPod(f"{samples.name}-{i}", server) for i, server in enumerate(started)]
            self._target_port = port
            return

    def _apply(self, samples: SamplePool) -> None:
        """CRDs, the pool (its target port set to the simulators'), objectives, rewrites, Ready pods."""
        try:
            self._apply_objects(samples)
        except ApiError as e:
            raise StackError(f"the fake API server rejected the sample objects: {e}") from e

    def _apply_objects(self, samples: SamplePool) -> None:
        store = self.apiserver.server.store
        for crd in samples.crds:
            store.create(qualified(crd), crd)
        port = self.target_port
        pool = {**samples.pool, "spec": {**samples.pool["spec"], "targetPorts": [{"number": port}]}}
        ns = samples.namespace
        for doc in (pool, *samples.objectives, *samples.rewrites):
            store.create(qualified(doc), doc, namespace=ns)
        for pod in self._pods:
            store.create(
                "Pod",
                {
                    "metadata": {"name": pod.name, "namespace": ns, "labels": samples.pod_labels},
                    "spec": {
                        "nodeName": "sim-node",
                        "containers": [
                            {"name": "vllm", "image": "epp-sim", "ports": [{"name": "http", "containerPort": port}]}
                        ],
                    },
                },
                namespace=ns,
            )
            status = {
                "phase": "Running",
                "podIP": pod.ip,
                "podIPs": [{"ip": pod.ip}],
                "hostIP": "127.0.0.1",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
                "containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0, "state": {"running": {}}}],
            }
            store.patch("Pod", pod.name, {"status": status}, namespace=ns, subresource="status")

    async def _start_picker(self, samples: SamplePool, work: Path) -> None:
        cfg = self.config
        ports = PickerPorts(grpc=free_port(), health=free_port(), metrics=free_port())
        argv = [
            sys.executable,
            "-m",
            "epp",
            "serve",
            "--secure-serving=false",
            "--pool-name",
            samples.name,
            "--pool-namespace",
            samples.namespace,
            "--kubeconfig",
            str(self.kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--grpc-port",
            str(ports.grpc),
            "--grpc-health-port",
            str(ports.health),
            "--metrics-port",
            str(ports.metrics),
            "-v",
            str(cfg.picker_verbosity),
        ]
        picker = ChildProcess(argv, log_path=work / "picker.log", name="epp serve")
        self._picker = picker
        self._picker_ports = ports
        await picker.start()
        self._exit.push_async_callback(picker.stop)
        want = len(self._pods)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
            await picker.wait_ready(
                lambda: _pool_has_ready_pods(session, self.picker_metrics_url, samples.name, want),
                timeout=cfg.ready_timeout,
                interval=_POLL_INTERVAL,
            )

    async def _start_envoy(self, work: Path) -> None:
        cfg = self.config
        port = cfg.envoy_port
        if port is None:
            port = (
                DEFAULT_ENVOY_PORT if await asyncio.to_thread(_port_free_on, ["127.0.0.1"], DEFAULT_ENVOY_PORT) else 0
            )
        bootstrap = envoy_bootstrap(
            listen_port=port, ext_proc=ExtProcTarget("127.0.0.1", self.picker_ports.grpc), admin_port=0
        )
        envoy = EnvoyProcess(bootstrap, name="envoy", work_dir=work / "envoy", ready_timeout=cfg.ready_timeout)
        self._envoy = envoy
        self._exit.push_async_callback(envoy.stop)
        await envoy.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
            await _poll(
                lambda: _ext_proc_healthy(session, envoy.admin_url),
                timeout=cfg.ready_timeout,
                what=f"Envoy's health check of the picker (logs in {work})",
            )


def _need(value: _T | None, what: str) -> _T:
    if value is None:
        raise RuntimeError(f"LocalStack not started: no {what} yet")
    return value


async def _poll(probe: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    """Await a condition (never a fixed sleep); StackError naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await probe():
            return
        if loop.time() >= deadline:
            raise StackError(f"not ready within {timeout}s: {what}")
        await asyncio.sleep(_POLL_INTERVAL)


async def _pool_has_ready_pods(session: aiohttp.ClientSession, url: str, pool: str, want: int) -> bool:
    """The picker's ``inference_pool_ready_pods`` counts every pod: synced, and each one scraped."""
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                return False
            body = await resp.read()
    except (aiohttp.ClientError, TimeoutError):
        return False
    samples = promtext.parse(body, [_READY_PODS_METRIC]).samples.get(_READY_PODS_METRIC, [])
    return any(s.labels.get("name") == pool and s.value >= want for s in samples)


async def _ext_proc_healthy(session: aiohttp.ClientSession, admin_url: str) -> bool:
    """Envoy's active health check has passed for the picker (else the first request would get 503)."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with session.get(f"{admin_url}/clusters") as resp:
            text = await resp.text()
        return any(
            line.startswith("ext_proc::") and "::health_flags::" in line and line.endswith("::healthy")
            for line in text.splitlines()
        )
    return False
