"""``LocalStack``: a pool's whole data plane on one machine, started in order and torn down in reverse.

The one assembly behind ``epp dev``, the end-to-end tests and the hermetic harness (the
benchmarks measure other set-ups: a fast backend process instead of in-process simulators for
the overhead, a bare datastore for routing quality). It holds a fake Kubernetes API server
(in-process, port 0, or one the caller already runs) with the inference CRDs, the pool of a
:class:`~epp_sim.stack.pool_spec.PoolSpec` and its objects; N simulated vLLM pods (in-process,
one per ``127.0.0.x``, all on one port so the pool's single target port fits, registered as
Ready Pods with that podIP); the picker, the real ``epp serve`` as a child process or on this
event loop; and, unless switched off, a real Envoy whose ext_proc filter calls the picker.
Everything is started through an ``AsyncExitStack``, so a failed start, an exception or Ctrl-C
stops whatever had started (children by PID) and removes the work directory.

Without a spec the pool is ``manifests/samples`` (read by :mod:`epp_sim.stack.samples`): its
InferencePool, objectives and rewrite, with ``targetPorts`` rewritten to the port the simulators
share (8000 may be taken on a developer's machine). The sample Deployment is read for the model
name, LoRA slots and pod labels but not applied (nothing would run its pods), nor is the v1alpha2
InferenceModel (it belongs to the v1alpha2 pool).

With ``kubernetes=False`` (``epp dev --no-kubernetes``) there is no API server at all: the picker
reads the simulators from an endpoints file (``file-discovery``, watched) in the work directory,
and runs with a configuration naming it (:mod:`epp_sim.stack.discovery`) and a kubeconfig that
does not exist.

Extra parts (``epp dev --autoscale``'s simulated Deployment and autoscaler) plug in as
:class:`StackComponent`: started after Envoy, stopped before it. A component declares the
addresses it will serve pods on, so the shared target port is chosen free there too; with
``pods=0`` every pod of the pool comes from components.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from epp.tasks import Service
from epp_sim.modelserver.fixture import ModelServer
from epp_sim.ports import port_free_on
from epp_sim.stack.cluster import ClusterError, FakeCluster
from epp_sim.stack.discovery import discovery_config, endpoints_file
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap
from epp_sim.stack.manifests import CRDS_DIR, MANIFESTS, ManifestError, read_manifests
from epp_sim.stack.picker import InProcessPicker, Picker, PickerProcess
from epp_sim.stack.pods import SimPod, SimulatedPods
from epp_sim.stack.pool_spec import PoolSpec
from epp_sim.stack.processes import ChildProcessError
from epp_sim.stack.samples import SamplePool, load_samples
from epp_sim.stack.started import require

__all__ = [
    "DEFAULT_ENVOY_PORT",
    "DEFAULT_MANIFESTS",
    "LocalStack",
    "StackComponent",
    "StackConfig",
    "StackError",
]

log = logging.getLogger(__name__)

DEFAULT_ENVOY_PORT = 8081
DEFAULT_MANIFESTS = MANIFESTS


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


@dataclass(frozen=True)
class StackConfig:
    """How to run the stack; validated when built.

    ``pods`` hand-made Ready pods (0 when components bring the pool's pods). ``envoy`` False
    runs no Envoy; ``envoy_port`` None means 8081 if it is free, else any free port; 0 means any
    free port. ``in_process_picker`` runs ``epp serve`` on this event loop (tests look inside it)
    instead of as a child process; ``picker_args`` are extra ``epp serve`` flags and ``seed`` its
    random seed (in-process only). ``manifests`` is the folder holding ``crds/`` and ``samples/``
    (read when no :class:`PoolSpec` is given, with ``time_scale`` for the sample pods);
    ``apiserver`` are options of the fake API server the stack starts. ``kubernetes`` False starts
    no API server: the picker reads the pods from an endpoints file (:attr:`LocalStack.endpoints_path`).
    ``envoy_streams_per_connection`` caps Envoy's streams per connection to the picker (for
    ``--workers``, see :func:`~epp_sim.stack.envoy_config.envoy_bootstrap`).
    """

    pods: int = 4
    envoy: bool = True
    envoy_port: int | None = None
    envoy_streams_per_connection: int | None = None
    time_scale: float = 1.0
    base_ip: str = "127.0.0."
    first_host: int = 2
    manifests: Path = DEFAULT_MANIFESTS
    in_process_picker: bool = False
    picker_args: tuple[str, ...] = ()
    picker_verbosity: int = 2
    seed: int | None = None
    apiserver: Mapping[str, Any] = field(default_factory=dict)
    ready_timeout: float = 30.0
    roles: tuple[str | None, ...] = ()
    """The sample pool's pods' ``llm-d.ai/role`` (disaggregated serving; ignored when a PoolSpec is given)."""
    sidecar_args: tuple[str, ...] | None = None
    """``epp sidecar`` flags for the sample pool's decode pods; None: no sidecars."""
    kubernetes: bool = True

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
        if not self.kubernetes and self.apiserver:
            raise StackError("apiserver options need kubernetes: the stack without it starts no API server")
        if not self.kubernetes and (self.roles or self.sidecar_args is not None):
            raise StackError("disaggregated serving needs kubernetes: pod roles and the sidecars' pool come from it")


class LocalStack(Service):
    """Fake cluster, simulated pods, ``epp serve`` and Envoy, as one async context manager.

    ``async with LocalStack(StackConfig(pods=3)) as stack:`` then send requests to
    ``stack.envoy_url``; ``stack.pods`` / ``stack.servers`` are the simulators, ``stack.kubeconfig``
    points kubectl at the fake API server, ``stack.picker.metrics_url`` is the picker's /metrics.
    ``pool`` says what to serve (default: the sample pool of ``config.manifests``); with a
    ``cluster`` the pool is built in that running fake cluster, which the stack leaves running.
    """

    def __init__(
        self,
        config: StackConfig | None = None,
        *,
        pool: PoolSpec | None = None,
        cluster: FakeCluster | None = None,
        components: Sequence[StackComponent] = (),
    ) -> None:
        self.config = config or StackConfig()
        if cluster is not None and self.config.apiserver:
            raise StackError("apiserver options apply to a cluster the stack starts, not to a given one")
        self._spec = pool
        self._components = list(components)
        self._exit = AsyncExitStack()
        self._started = False
        self._work_dir: Path | None = None
        self._samples: SamplePool | None = None
        self._cluster: FakeCluster | None = cluster
        self._pods: SimulatedPods | None = None
        self._picker: Picker | None = None
        self._envoy: EnvoyProcess | None = None

    # ------------------------------------------------------------------------------ accessors

    @property
    def pool(self) -> PoolSpec:
        """What the stack serves (the sample pool's spec once started without one)."""
        return require(self._spec, "LocalStack", "pool spec")

    @property
    def samples(self) -> SamplePool:
        """The sample manifests applied (pool name, model, adapters, objectives); only without a spec."""
        return require(self._samples, "LocalStack", "sample pool (the stack was given a PoolSpec)")

    @property
    def cluster(self) -> FakeCluster:
        """The fake cluster (``.server.store`` for in-process reads, ``.kubectl(...)``)."""
        return require(self._cluster, "LocalStack", "cluster")

    @property
    def kubeconfig(self) -> Path:
        """The fake API server's kubeconfig; without Kubernetes, a path that does not exist."""
        return self.cluster.kubeconfig if self.config.kubernetes else self.work_dir / "no-kubeconfig"

    @property
    def endpoints_path(self) -> Path:
        """Without Kubernetes: the endpoints file the picker watches (edit it to add or remove pods)."""
        return self.work_dir / "endpoints.yaml"

    @property
    def work_dir(self) -> Path:
        """Holds the kubeconfig and the picker's and Envoy's logs; removed at teardown."""
        return require(self._work_dir, "LocalStack", "work directory")

    @property
    def simulated_pods(self) -> SimulatedPods:
        return require(self._pods, "LocalStack", "pods")

    @property
    def pods(self) -> list[SimPod]:
        return [] if self._pods is None else self._pods.pods

    @property
    def servers(self) -> list[ModelServer]:
        return [p.server for p in self.pods]

    @property
    def target_port(self) -> int:
        """The pool's single target port: every pod's simulator (hand-made or a component's) listens on it."""
        return self.simulated_pods.port

    @property
    def envoy(self) -> EnvoyProcess:
        return require(self._envoy, "LocalStack", "Envoy")

    @property
    def envoy_url(self) -> str:
        return f"http://127.0.0.1:{self.envoy.port}"

    @property
    def picker(self) -> Picker:
        """The picker: a :class:`PickerProcess` (``.pid``, ``.log_path``) or an :class:`InProcessPicker`."""
        return require(self._picker, "LocalStack", "picker")

    def child_pids(self) -> list[int]:
        """PIDs of every child process the stack started (picker, Envoy)."""
        pids = [self._picker.pid] if isinstance(self._picker, PickerProcess) else []
        return pids if self._envoy is None else [*pids, self._envoy.pid]

    async def wait_ready_pods(self, count: int, *, timeout: float | None = None) -> None:
        """Wait until the picker counts at least ``count`` Ready pods of the pool, each scraped."""
        try:
            await self.picker.wait_routing(
                self.pool.reported_name, count, timeout=self.config.ready_timeout if timeout is None else timeout
            )
        except ChildProcessError as e:
            raise StackError(f"{e} (logs in {self.work_dir})") from e

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
        teardown = asyncio.create_task(exit_stack.aclose(), name="local-stack-teardown")
        try:
            await asyncio.shield(teardown)
        except asyncio.CancelledError:
            await asyncio.wait([teardown])  # finish stopping the children first, then give in
            raise

    async def _start_all(self) -> None:
        cfg = self.config
        work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-stack-"))
        self._work_dir = work
        self._exit.push_async_callback(asyncio.to_thread, shutil.rmtree, work, True)
        spec = self._spec
        crds: Sequence[Mapping[str, Any]] | None = None
        try:
            if spec is None:
                self._samples = samples = await asyncio.to_thread(load_samples, cfg.manifests)
                spec = samples.pool_spec(time_scale=cfg.time_scale)
                self._spec = spec = dataclasses.replace(spec, roles=cfg.roles, sidecar_args=cfg.sidecar_args)
            crds = spec.crds if spec.crds is not None else await asyncio.to_thread(read_manifests, CRDS_DIR)
        except ManifestError as e:
            raise StackError(str(e)) from e
        if self._cluster is None and cfg.kubernetes:
            self._cluster = await self._exit.enter_async_context(
                FakeCluster(namespace=spec.namespace, work_dir=work, **cfg.apiserver)
            )
        if cfg.kubernetes:
            try:  # before the pods: a decode pod's sidecar may watch the pool (SSRF protection)
                await self.cluster.apply_all(crds)
            except ClusterError as e:
                raise StackError(f"the fake API server rejected the inference CRDs: {e}") from e
        pods = SimulatedPods(
            None,
            cfg.pods,
            labels=spec.labels,
            config=spec.sim_config,
            name_prefix=spec.pod_prefix,
            namespace=spec.namespace,
            base_ip=cfg.base_ip,
            first_host=cfg.first_host,
            reserved_hosts=[h for c in self._components for h in c.hosts],
            roles=spec.roles,
            sidecar_args=spec.sidecar_args,
            ranks=spec.ranks,
        )
        try:
            self._pods = await self._exit.enter_async_context(pods)
        except OSError as e:
            raise StackError(str(e)) from e
        if cfg.kubernetes:
            try:
                await self._apply(spec)
            except ClusterError as e:
                raise StackError(f"the fake API server rejected the pool's objects: {e}") from e
        else:
            servers = [(p.name, p.ip, self.target_port) for p in self.pods]
            await asyncio.to_thread(self.endpoints_path.write_text, endpoints_file(servers, spec.labels))
        await self._start_picker(spec, work)
        if cfg.envoy:
            await self._start_envoy(work)
        for component in self._components:
            self._exit.push_async_callback(component.stop)
            await component.start(self)

    async def _apply(self, spec: PoolSpec) -> None:
        """The pool (its target port set to the simulators'), its objects, the Ready pods."""
        cluster, port = self.cluster, self.target_port
        pool = spec.pool_object(port)
        await cluster.apply_all([*([pool] if pool is not None else []), *spec.objects])
        for pod in self.pods:
            await cluster.create_ready_pod(pod.name, pod.ip, pod.labels, port=port, namespace=spec.namespace)

    async def _start_picker(self, spec: PoolSpec, work: Path) -> None:
        cfg = self.config
        args = [*spec.picker_arguments(self.target_port), *cfg.picker_args]
        if not cfg.kubernetes:  # the pool's name and namespace only; the endpoints come from the file
            args = ["--pool-name", spec.name, "--pool-namespace", spec.namespace, *cfg.picker_args]
            args += ["--config-text", discovery_config(self.endpoints_path)]
        picker: Picker
        if cfg.in_process_picker:
            picker = InProcessPicker(args, kubeconfig=self.kubeconfig, seed=cfg.seed)
        else:
            picker = PickerProcess(
                args, kubeconfig=self.kubeconfig, log_path=work / "picker.log", verbosity=cfg.picker_verbosity
            )
        self._picker = await self._exit.enter_async_context(picker)
        await self.wait_ready_pods(len(self.pods))

    async def _start_envoy(self, work: Path) -> None:
        cfg = self.config
        port = cfg.envoy_port
        if port is None:
            port = DEFAULT_ENVOY_PORT if await asyncio.to_thread(port_free_on, ["127.0.0.1"], DEFAULT_ENVOY_PORT) else 0
        host, _, grpc_port = self.picker.grpc_target.rpartition(":")
        bootstrap = envoy_bootstrap(
            listen_port=port,
            ext_proc=ExtProcTarget(host, int(grpc_port)),
            admin_port=0,
            ext_proc_streams_per_connection=cfg.envoy_streams_per_connection,
        )
        envoy = EnvoyProcess(bootstrap, name="envoy", work_dir=work / "envoy", ready_timeout=cfg.ready_timeout)
        self._envoy = await self._exit.enter_async_context(envoy)
        await envoy.wait_ext_proc_healthy(timeout=cfg.ready_timeout)
