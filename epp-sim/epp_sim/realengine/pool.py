"""Real vLLM servers as an InferencePool: the fake cluster's Pods point at them, the real picker and Envoy in front.

The hermetic harness with its simulated pods swapped for the fleet's real servers: the inference
CRDs and a v1 InferencePool whose target port is the fleet's, one Ready Pod per server with its
``127.0.0.x`` as podIP (labelled for llm-d's KV-event pod discovery too), ``epp serve`` with the
caller's flags on the test's loop, and a real Envoy (GIE mode) in front. Returned once the picker
has synced the pool and scraped every server, and Envoy has found the picker healthy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from epp.framework.endpoint import EndpointState
from epp.runtime import Runtime
from epp_sim.kube_objects import inference_pool
from epp_sim.precise_prefix import SERVING_LABELS
from epp_sim.realengine.servers import VllmFleet, VllmServer
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.manifests import CRDS_DIR, read_manifests
from epp_sim.stack.picker import InProcessPicker

__all__ = ["POOL", "RealEnginePool", "real_engine_pool"]

POOL = "vllm-cpu-pool"
_LABELS = {"app": POOL, **SERVING_LABELS}


@dataclass(frozen=True)
class RealEnginePool:
    """The fleet served by one picker (and Envoy, unless asked without): what a test reads and drives."""

    fleet: VllmFleet
    cluster: FakeCluster
    picker: InProcessPicker
    envoy: EnvoyProcess | None
    name: str = POOL

    @property
    def servers(self) -> list[VllmServer]:
        return self.fleet.servers

    @property
    def envoy_url(self) -> str:
        if self.envoy is None:
            raise RuntimeError("this pool was built without Envoy (envoy=False)")
        return f"http://127.0.0.1:{self.envoy.port}"

    @property
    def runtime(self) -> Runtime:
        return self.picker.runtime

    def endpoints(self) -> Sequence[EndpointState]:
        return self.runtime.pools[0].datastore.endpoints()

    def state(self, server: VllmServer) -> EndpointState:
        """The picker's view of ``server``: its endpoint, last scraped metrics and health."""
        return next(s for s in self.endpoints() if s.endpoint.hostport == server.hostport)

    def sample(self, name: str, **labels: str) -> float:
        """A sample of the picker's own metrics (0 when the series does not exist)."""
        value = self.runtime.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


PickerStarter = Callable[..., Awaitable[InProcessPicker]]
EnvoyStarter = Callable[..., Awaitable[EnvoyProcess]]


async def real_engine_pool(
    fleet: VllmFleet,
    cluster: FakeCluster,
    start_picker: PickerStarter,
    start_envoy: EnvoyStarter,
    *,
    picker_args: Sequence[str] = (),
    envoy: bool = True,
    labels: Mapping[str, str] | None = None,
) -> RealEnginePool:
    """Register ``fleet`` as a v1 pool in ``cluster``, then start the picker (and Envoy) on it."""
    labels = dict(labels or _LABELS)
    crds = await asyncio.to_thread(read_manifests, CRDS_DIR)
    await cluster.apply_all([*crds, inference_pool("v1", POOL, labels, fleet.port)])
    for server in fleet.servers:
        await cluster.create_ready_pod(server.name, server.host, labels, port=fleet.port)
    picker = await start_picker("--pool-name", POOL, "--pool-namespace", cluster.namespace, *picker_args)
    await picker.wait_routing(POOL, len(fleet.servers), timeout=60)
    front = await start_envoy(picker) if envoy else None
    return RealEnginePool(fleet, cluster, picker, front)
