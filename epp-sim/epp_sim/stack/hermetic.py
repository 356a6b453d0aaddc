"""A hermetic pool: the local stack with the picker in-process, and the views a test needs.

What a hermetic test (ours, or a platform team's in their own CI) needs in one object: the
inference CRDs applied, the pool in the chosen mode (``v1``, ``v1alpha2``, or ``standalone``
with no pool object), the caller's own objects (objectives, rewrites, InferenceModels), N Ready
simulated pods, and ``epp serve`` with the caller's flags, started only once it has synced the
pool and scraped every pod. It is :class:`~epp_sim.stack.local.LocalStack` (one assembly for
every use) with the picker on the test's event loop, so a test can also look inside it.
Requests go in through :meth:`HermeticPool.route` exactly as Envoy would send them; the answer
says which endpoint was picked, with which headers, metadata and body. ``envoy=True`` puts a
real Envoy in front as well; ``process_pods=N`` adds N pods whose simulators run as their own
processes (:class:`~epp_sim.stack.pod_process.PodProcess`, serving the first simulator
configuration's model), for tests that kill or freeze one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.runtime import Runtime
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.extproc_client import ExtProcClient, Routed
from epp_sim.stack.local import LocalStack, StackConfig
from epp_sim.stack.picker import InProcessPicker
from epp_sim.stack.pod_process import PodProcess
from epp_sim.stack.pods import SimulatedPods
from epp_sim.stack.pool_spec import DEFAULT_POOL, PoolSpec
from epp_sim.stack.started import require
from epp_sim.waits import wait_until

__all__ = ["DEFAULT_POOL", "HermeticPool"]

_FAST_SCRAPES = "--refresh-metrics-interval=20ms"


class HermeticPool(LocalStack):
    """Everything up, the pool synced and every pod scraped; torn down in reverse on exit.

    ``picker_args`` are extra ``epp serve`` flags (``--config-file``, ``--config-text``, ...);
    ``objects`` are applied before the picker starts. With an existing ``cluster`` the pool is
    built inside it. Metrics are scraped every 20 ms unless ``picker_args`` say otherwise.
    ``roles``, ``sidecar_args`` and ``ranks`` make a disaggregated pool (:class:`PoolSpec`).
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
        cluster: FakeCluster | None = None,
        apiserver_options: Mapping[str, Any] | None = None,
        envoy: bool = False,
        envoy_streams_per_connection: int | None = None,
        first_host: int = 2,
        ready_timeout: float = 15.0,
        process_pods: int = 0,
        roles: Sequence[str | None] = (),
        sidecar_args: Sequence[str] | None = None,
        ranks: int = 1,
    ) -> None:
        spec = PoolSpec(
            name=pool,
            namespace=namespace,
            mode=mode,
            labels=labels or {},
            sim_config=sim_config if sim_config is not None else SimConfig(max_loras=4),
            objects=objects,
            roles=roles,
            sidecar_args=sidecar_args,
            ranks=ranks,
        )
        args = list(picker_args)
        if not any(a.startswith("--refresh-metrics-interval") for a in args):
            args.append(_FAST_SCRAPES)
        config = StackConfig(
            pods=pods,
            envoy=envoy,
            envoy_port=0,
            envoy_streams_per_connection=envoy_streams_per_connection,
            first_host=first_host,
            in_process_picker=True,
            picker_args=tuple(args),
            seed=seed,
            apiserver=dict(apiserver_options or {}),
            ready_timeout=ready_timeout,
        )
        model = (spec.sim_config if isinstance(spec.sim_config, SimConfig) else spec.sim_config[0]).model
        self.processes = [
            PodProcess(
                f"{spec.pod_prefix}-{pods + i}",
                f"127.0.0.{first_host + pods + i}",
                sim_args=["--model", model],
                ready_timeout=ready_timeout,
            )
            for i in range(process_pods)
        ]
        super().__init__(config, pool=spec, cluster=cluster, components=self.processes)
        self._client: ExtProcClient | None = None

    # ------------------------------------------------------------------ parts

    @property
    def mode(self) -> PoolMode:
        return self.pool.mode

    @property
    def picker(self) -> InProcessPicker:
        picker = super().picker
        assert isinstance(picker, InProcessPicker)
        return picker

    @property
    def runtime(self) -> Runtime:
        """The running picker: its datastore, metrics registry, ports, configuration."""
        return self.picker.runtime

    @property
    def sims(self) -> SimulatedPods:
        return self.simulated_pods

    @property
    def client(self) -> ExtProcClient:
        return require(self._client, "HermeticPool", "ext_proc client")

    @property
    def port(self) -> int:
        """The pool's target port (every pod listens on it)."""
        return self.target_port

    async def _start_all(self) -> None:
        await super()._start_all()
        self._client = await self._exit.enter_async_context(ExtProcClient(self.picker.grpc_target))
        expected = {*self.simulated_pods.addresses, *(p.address for p in self.processes)}
        await wait_until(
            lambda: self.runtime.ready and self.addresses() == expected,
            timeout=self.config.ready_timeout,
            message=f"picker synced pool {self.pool.name} ({self.mode}) with {sorted(expected)}",
        )

    # ------------------------------------------------------------------ what the picker sees

    def endpoints(self) -> Sequence[EndpointState]:
        """The picker's endpoints of the (first) pool, with their last metrics."""
        return self.runtime.pools[0].datastore.endpoints()

    def addresses(self) -> set[str]:
        return {e.endpoint.hostport for e in self.endpoints()}

    def hostport(self, index: int) -> str:
        return self.pods[index].address

    def sample(self, name: str, **labels: str) -> float:
        """A sample of the picker's own metrics registry (0 when the series does not exist)."""
        value = self.runtime.metrics.registry.get_sample_value(name, labels)
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

    async def label_pods(self, labels: Sequence[Mapping[str, str]]) -> None:
        """Add ``labels[i]`` to pod ``i``'s labels (e.g. each pod's zone) and wait until the picker's endpoints
        carry them: what a plugin reading ``Endpoint.labels`` sees."""
        for pod, added in zip(self.pods, labels, strict=True):
            patch = {"metadata": {"labels": dict(added)}}
            await self.cluster.patch("v1", "Pod", pod.name, patch, namespace=self.pool.namespace)
        wanted = {pod.ip: added for pod, added in zip(self.pods, labels, strict=True)}

        def carried() -> bool:
            seen = {e.endpoint.address: e.endpoint.labels for e in self.endpoints()}
            return all(all(seen.get(ip, {}).get(k) == v for k, v in added.items()) for ip, added in wanted.items())

        await wait_until(carried, timeout=10, message=f"picker's endpoints carry the labels {list(labels)}")

    async def wait_for_addresses(self, expected: set[str], *, timeout: float = 10.0) -> None:
        """Until the picker's endpoints are exactly ``expected`` (after pods changed)."""
        await wait_until(lambda: self.addresses() == expected, timeout=timeout, message=f"endpoints == {expected}")
