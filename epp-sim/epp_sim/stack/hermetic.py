"""A hermetic pool: fake cluster + simulated pods + the real picker in-process + an ext_proc client.

What a hermetic test (ours, or a platform team's in their own CI) needs in one object: the
inference CRDs applied, the pool in the chosen mode (``v1``, ``v1alpha2``, or ``standalone``
with no pool object), the caller's own objects (objectives, rewrites, InferenceModels), N Ready
simulated pods, and ``epp serve`` with the caller's flags, started only once it has synced the pool
and scraped every pod. Requests go in through :meth:`HermeticPool.route` exactly as Envoy would
send them; the answer says which endpoint was picked, with which headers, metadata and body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.tasks import Service
from epp_sim.kube_objects import V1_POOL_GROUP, V1ALPHA2_POOL_GROUP, PoolMode, inference_pool
from epp_sim.modelserver import SimConfig
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.extproc_client import ExtProcClient, Routed
from epp_sim.stack.manifests import CRDS_DIR
from epp_sim.stack.picker import InProcessPicker
from epp_sim.stack.pods import SimulatedPods
from epp_sim.stack.started import require
from epp_sim.waits import wait_until

__all__ = ["DEFAULT_POOL", "HermeticPool", "pool_arguments"]

DEFAULT_POOL = "vllm-llama3-8b-instruct"


def pool_arguments(mode: PoolMode, pool: str, labels: Mapping[str, str], port: int, namespace: str) -> list[str]:
    """The ``epp serve`` flags that select the pool in ``mode``."""
    if mode == "standalone":
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        return ["--endpoint-selector", selector, "--endpoint-target-ports", str(port), "--pool-namespace", namespace]
    group = V1ALPHA2_POOL_GROUP if mode == "v1alpha2" else V1_POOL_GROUP
    return ["--pool-name", pool, "--pool-namespace", namespace, "--pool-group", group]


class HermeticPool(Service):
    """Everything up, the pool synced and every pod scraped; torn down in reverse on exit.

    ``picker_args`` are extra ``epp serve`` flags (``--config-file``, ``--config-text``, ...);
    ``objects`` are applied before the picker starts; ``crds`` defaults to the inference CRDs
    shipped with epp-sim. With an existing ``cluster`` the pool is built inside it.
    """

    def __init__(
        self,
        mode: PoolMode = "v1",
        *,
        pods: int = 3,
        sim_config: SimConfig | Sequence[SimConfig] | None = None,
        objects: Sequence[Mapping[str, Any]] = (),
        picker_args: Sequence[str] = (),
        pool: str = DEFAULT_POOL,
        labels: Mapping[str, str] | None = None,
        namespace: str = "default",
        seed: int | None = 7,
        crds: Sequence[Path] = (CRDS_DIR,),
        cluster: FakeCluster | None = None,
        apiserver_options: Mapping[str, Any] | None = None,
        ready_timeout: float = 15.0,
    ) -> None:
        self.mode: PoolMode = mode
        self.pool = pool
        self.labels = dict(labels or {"app": pool})
        self.namespace = namespace
        self._pod_count = pods
        self._sim_config = sim_config if sim_config is not None else SimConfig(max_loras=4)
        self._objects = list(objects)
        self._picker_args = list(picker_args)
        self._seed = seed
        self._crds = list(crds)
        self._given_cluster = cluster
        self._apiserver_options = dict(apiserver_options or {})
        self._ready_timeout = ready_timeout
        self._exit = AsyncExitStack()
        self._cluster: FakeCluster | None = cluster
        self._pods: SimulatedPods | None = None
        self._picker: InProcessPicker | None = None
        self._client: ExtProcClient | None = None

    # ------------------------------------------------------------------ parts

    @property
    def cluster(self) -> FakeCluster:
        return require(self._cluster, "HermeticPool", "cluster")

    @property
    def pods(self) -> SimulatedPods:
        return require(self._pods, "HermeticPool", "pods")

    @property
    def picker(self) -> InProcessPicker:
        return require(self._picker, "HermeticPool", "picker")

    @property
    def client(self) -> ExtProcClient:
        return require(self._client, "HermeticPool", "ext_proc client")

    @property
    def port(self) -> int:
        """The pool's target port (every pod listens on it)."""
        return self.pods.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        if self._cluster is None:
            self._cluster = await self._exit.enter_async_context(
                FakeCluster(namespace=self.namespace, **self._apiserver_options)
            )
        cluster = self._cluster
        if self._crds:
            await cluster.apply_manifests(*self._crds)
        # The simulators first: the pool's target port is the one they could all bind.
        self._pods = pods = SimulatedPods(
            None, self._pod_count, labels=self.labels, config=self._sim_config, namespace=self.namespace
        )
        await self._exit.enter_async_context(pods)
        if self.mode != "standalone":
            await cluster.apply(inference_pool(self.mode, self.pool, self.labels, pods.port, namespace=self.namespace))
        await cluster.apply_all(self._objects)
        for pod in pods:
            await cluster.create_ready_pod(pod.name, pod.ip, self.labels, port=pods.port, namespace=self.namespace)
        args = [*pool_arguments(self.mode, self.pool, self.labels, pods.port, self.namespace), *self._picker_args]
        if not any(a.startswith("--refresh-metrics-interval") for a in args):
            args.append("--refresh-metrics-interval=20ms")
        self._picker = picker = InProcessPicker(args, kubeconfig=cluster.kubeconfig, seed=self._seed)
        await self._exit.enter_async_context(picker)
        self._client = await self._exit.enter_async_context(ExtProcClient(picker.grpc_target))
        expected = set(pods.addresses)
        await wait_until(
            lambda: picker.runtime.ready and self.addresses() == expected,
            timeout=self._ready_timeout,
            message=f"picker synced pool {self.pool} ({self.mode}) with {sorted(expected)}",
        )
        await wait_until(
            lambda: all(s.metrics.updated_at for s in self.endpoints()),
            timeout=self._ready_timeout,
            message="picker scraped every pod",
        )

    async def stop(self) -> None:
        exit_stack, self._exit = self._exit, AsyncExitStack()
        await exit_stack.aclose()

    # ------------------------------------------------------------------ what the picker sees

    def endpoints(self) -> Sequence[EndpointState]:
        """The picker's endpoints of the (first) pool, with their last metrics."""
        return self.picker.runtime.pools[0].datastore.endpoints()

    def addresses(self) -> set[str]:
        return {e.endpoint.hostport for e in self.endpoints()}

    def hostport(self, index: int) -> str:
        return self.pods[index].address

    def sample(self, name: str, **labels: str) -> float:
        """A sample of the picker's own metrics registry (0 when the series does not exist)."""
        value = self.picker.runtime.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    # ------------------------------------------------------------------ driving

    async def route(
        self,
        body: Mapping[str, Any] | bytes,
        *,
        path: str = "/v1/completions",
        headers: Mapping[str, str] | None = None,
        chunks: int = 1,
        subset: list[Any] | None = None,
    ) -> Routed:
        """One request as Envoy sends it (GIE mode); what the picker answered."""
        return await self.client.route(body, path=path, headers=headers, chunks=chunks, subset=subset)

    async def set_pins(self, pins: Sequence[Mapping[str, Any]]) -> None:
        """Pin each simulator's reported metrics and wait until the picker has scraped them."""
        for pod, pin in zip(self.pods, pins, strict=True):
            pod.server.pin(**pin)
        await self.wait_scraped(pins)

    async def wait_scraped(self, pins: Sequence[Mapping[str, Any]]) -> None:
        """Until the picker's snapshots show each pod's pinned ``waiting``/``kv_cache_usage``/``running_loras``."""
        by_ip = {pod.ip: pin for pod, pin in zip(self.pods, pins, strict=True)}

        def matches() -> bool:
            states = {s.endpoint.address: s.metrics for s in self.endpoints()}
            for ip, pin in by_ip.items():
                m = states.get(ip)
                if m is None or not m.updated_at:
                    return False
                if "waiting" in pin and m.waiting_queue != pin["waiting"]:
                    return False
                if "kv_cache_usage" in pin and abs(m.kv_cache_usage - pin["kv_cache_usage"]) > 1e-9:
                    return False
                if "running_loras" in pin and m.active_adapters != frozenset(pin["running_loras"]):
                    return False
            return True

        await wait_until(matches, timeout=10, message=f"picker scraped pins {pins}")

    async def wait_for_addresses(self, expected: set[str], *, timeout: float = 10.0) -> None:
        """Until the picker's endpoints are exactly ``expected`` (after pods changed)."""
        await wait_until(lambda: self.addresses() == expected, timeout=timeout, message=f"endpoints == {expected}")
