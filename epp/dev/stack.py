"""``LocalStack``: the whole data plane on one machine, started in order and torn down in reverse.

What ``epp dev``, the end-to-end tests and the benchmarks run: a fake Kubernetes API server
(in-process, port 0) holding the inference CRDs and the sample pool, objectives and rewrite from
``manifests/``; N simulated vLLM pods (in-process, one per ``127.0.0.x``, all on one port so the
pool's single target port fits, registered as Ready Pods with that podIP); the picker as a real
``epp serve`` child process reading that API server; and a real Envoy whose ext_proc filter calls
the picker. Everything is started through an ``AsyncExitStack``, so a failed start, an exception
or Ctrl-C stops whatever had started (children by PID) and removes the work directory.

The sample pool's ``targetPorts`` is rewritten to the port the simulators share (a free one,
chosen at start), since 8000 may be taken on a developer's machine. The sample Deployment is read
for the model name, LoRA slots and pod labels but not applied (nothing would run its pods), nor
is the v1alpha2 InferenceModel (it belongs to the v1alpha2 pool, which ``epp dev`` does not run).

Extra parts (``epp dev --autoscale`` later) plug in as :class:`StackComponent`: started after
Envoy, stopped before it.
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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import aiohttp
import yaml

from epp.datalayer import promtext
from epp.dev.envoy import EnvoyProcess, ExtProcTarget, envoy_bootstrap
from epp.dev.processes import ChildProcess
from epp.sim.apiserver.errors import ApiError
from epp.sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp.sim.modelserver.config import SimConfig
from epp.sim.modelserver.fixture import ModelServer
from epp.testing import free_port

__all__ = [
    "DEFAULT_ENVOY_PORT",
    "DEFAULT_MANIFESTS",
    "LocalStack",
    "PickerPorts",
    "SamplePool",
    "SimPod",
    "StackComponent",
    "StackConfig",
    "StackError",
    "load_samples",
]

log = logging.getLogger(__name__)

DEFAULT_ENVOY_PORT = 8081
DEFAULT_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
_POOL_GROUP = "inference.networking.k8s.io"
_READY_PODS_METRIC = "inference_pool_ready_pods"
_PORT_ATTEMPTS = 5
_POLL_INTERVAL = 0.05
_T = TypeVar("_T")


class StackError(RuntimeError):
    """The stack cannot start: missing or unusable manifests, no common free port, a child that failed."""


class StackComponent(Protocol):
    """An optional part started once the data plane is up (an autoscaler, say) and stopped first.

    ``stop`` is called even when ``start`` failed part way, so it must cope with that.
    """

    name: str

    async def start(self, stack: LocalStack) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StackConfig:
    """What to start; validated when built.

    ``envoy_port`` None means 8081 if it is free, else any free port; 0 means any free port.
    ``manifests`` is the folder holding ``crds/`` and ``samples/``.
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
        if isinstance(self.pods, bool) or not isinstance(self.pods, int) or self.pods < 1:
            raise StackError(f"pods must be a positive integer, got {self.pods!r}")
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
class SamplePool:
    """The objects applied from ``manifests/`` and what the simulated pods must look like."""

    crds: list[dict[str, Any]]
    pool: dict[str, Any]
    objectives: list[dict[str, Any]]
    rewrites: list[dict[str, Any]]
    model: str
    adapters: tuple[str, ...]
    max_loras: int
    pod_labels: dict[str, str]

    @property
    def name(self) -> str:
        return str(self.pool["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.pool["metadata"].get("namespace") or "default")

    @property
    def objective_names(self) -> tuple[str, ...]:
        """InferenceObjective names, as clients give them in ``x-gateway-inference-objective``."""
        return tuple(str(o["metadata"]["name"]) for o in self.objectives)

    @property
    def rewritten_models(self) -> tuple[str, ...]:
        """Models clients ask for that a rewrite sends to the adapters (``food-review``)."""
        return tuple(
            dict.fromkeys(
                str(match["model"]["value"])
                for rewrite in self.rewrites
                for rule in rewrite["spec"].get("rules") or []
                for match in rule.get("matches") or []
                if "model" in match
            )
        )


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


def _read_yaml_docs(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise StackError(f"cannot read manifest {path}: {e}") from e
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise StackError(f"manifest {path} is not valid YAML: {e}") from e
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d or "apiVersion" not in d:
            raise StackError(f"manifest {path} holds a document without kind/apiVersion")
    return docs


def _kustomization_docs(folder: Path) -> list[dict[str, Any]]:
    """Every document of the files a ``kustomization.yaml`` lists, in its order."""
    docs = _read_yaml_docs(folder / "kustomization.yaml")
    resources = [name for doc in docs for name in doc.get("resources") or []]
    return [doc for name in resources for doc in _read_yaml_docs(folder / str(name))]


def _flag(args: Sequence[object], name: str) -> str | None:
    prefix = f"--{name}="
    for i, arg in enumerate(args):
        text = str(arg)
        if text.startswith(prefix):
            return text[len(prefix) :]
        if text == f"--{name}" and i + 1 < len(args):
            return str(args[i + 1])
    return None


def load_samples(manifests: Path) -> SamplePool:
    """Read the CRDs and the sample pool from ``manifests`` (blocking: call off the loop)."""
    crds = [d for d in _kustomization_docs(manifests / "crds") if d["kind"] == "CustomResourceDefinition"]
    samples = _kustomization_docs(manifests / "samples")
    try:
        return _sample_pool(crds, samples, manifests / "samples")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise StackError(f"the sample manifests in {manifests / 'samples'} lack a field epp dev needs: {e!r}") from e


def _sample_pool(crds: list[dict[str, Any]], samples: list[dict[str, Any]], where: Path) -> SamplePool:
    pools = [d for d in samples if d["kind"] == "InferencePool" and d["apiVersion"].startswith(f"{_POOL_GROUP}/")]
    deployments = [d for d in samples if d["kind"] == "Deployment"]
    if len(pools) != 1 or len(deployments) != 1:
        raise StackError(
            f"{where} must hold exactly one {_POOL_GROUP} InferencePool and one Deployment, "
            f"found {len(pools)} and {len(deployments)}"
        )
    pool, deployment = pools[0], deployments[0]
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    model = _flag(container.get("args") or [], "model")
    if not model:
        raise StackError(f"the sample Deployment's first container has no --model argument: {container.get('args')}")
    pod_labels = {str(k): str(v) for k, v in (template["metadata"].get("labels") or {}).items()}
    selector = pool["spec"]["selector"]["matchLabels"]
    if any(pod_labels.get(k) != v for k, v in selector.items()):
        raise StackError(f"the sample Deployment's pod labels {pod_labels} do not match the pool selector {selector}")
    rewrites = [d for d in samples if d["kind"] == "InferenceModelRewrite"]
    adapters = tuple(
        dict.fromkeys(
            str(target["modelRewrite"])
            for rewrite in rewrites
            for rule in rewrite["spec"].get("rules") or []
            for target in rule.get("targets") or []
        )
    )
    return SamplePool(
        crds=crds,
        pool=pool,
        objectives=[d for d in samples if d["kind"] == "InferenceObjective"],
        rewrites=rewrites,
        model=model,
        adapters=adapters,
        max_loras=int(_flag(container.get("args") or [], "max-loras") or 1),
        pod_labels=pod_labels,
    )


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


def _qualified(doc: Mapping[str, Any]) -> str:
    """``Kind.group`` as the fake API server's store resolves it (core kinds have no group)."""
    group = str(doc["apiVersion"]).rpartition("/")[0]
    return f"{doc['kind']}.{group}" if group else str(doc["kind"])


class LocalStack:
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

    # ------------------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

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
        self._samples = samples = await asyncio.to_thread(load_samples, cfg.manifests)
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
        """N simulators on one port that is free on every pod address (retried if someone races us)."""
        cfg = self.config
        hosts = [f"{cfg.base_ip}{cfg.first_host + i}" for i in range(cfg.pods)]
        sim = SimConfig(
            model=samples.model,
            lora_modules={name: f"/adapters/{name}" for name in samples.adapters},
            max_loras=max(1, samples.max_loras),
            time_scale=cfg.time_scale,
        )
        for attempt in range(_PORT_ATTEMPTS):
            port = await asyncio.to_thread(_common_free_port, hosts)
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
            store.create(_qualified(crd), crd)
        port = self._pods[0].server.port
        pool = {**samples.pool, "spec": {**samples.pool["spec"], "targetPorts": [{"number": port}]}}
        ns = samples.namespace
        for doc in (pool, *samples.objectives, *samples.rewrites):
            store.create(_qualified(doc), doc, namespace=ns)
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
