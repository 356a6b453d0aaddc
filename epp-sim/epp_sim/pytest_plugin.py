"""pytest plugin: test your own InferencePool and EndpointPickerConfig against the real picker.

Installed with epp-sim (``pytest11`` entry point), so the fixtures below are available in any
test suite of a project that has epp-sim installed; nothing to import or register. Every fixture
is function-scoped and tears down what it started, in reverse order. Tests using them are
``async def`` tests run by pytest-asyncio (``asyncio_mode = "auto"``, or mark them
``@pytest.mark.asyncio``).

- ``epp_cluster`` — a :class:`~epp_sim.stack.cluster.FakeCluster`: the fake Kubernetes API
  server (served kinds, watches, server-side apply, status subresources, ...), a REST client for
  it, ``await cluster.kubectl("get", "pods")`` with the real kubectl, and ``.server`` for faults.
- ``epp_sim_pods(count, labels=..., config=SimConfig(...))`` — simulated vLLM pods on their own
  127.0.0.x addresses, registered in ``epp_cluster`` as Ready pods; ``pods.pin(i, waiting=5)``
  pins what pod ``i`` reports, otherwise its performance model reports its own load.
- ``epp_picker(*serve_args)`` — the real ``epp serve`` with your flags (``--pool-name``,
  ``--config-file``, ...), in-process, on loopback, against ``epp_cluster``; ``.runtime`` is the
  running picker, ``await picker.wait_routing(pool, n)`` waits until it routes to ``n`` pods.
- ``epp_extproc(picker)`` — an ext_proc client that sends a request the way Envoy does and
  returns what the picker decided (``.route(body, path=..., headers=...)`` → ``Routed``).
- ``epp_pool(mode, pods=..., objects=..., picker_args=...)`` — all of the above in one call,
  started only once the picker has synced the pool and scraped every pod.
- ``epp_envoy(picker, ...)`` — a real Envoy (the GIE data plane: ext_proc in FULL_DUPLEX_STREAMED,
  ORIGINAL_DST on ``envoy.lb`` metadata) in front of a picker, or of several replicas balanced
  round robin; ``envoy.port`` takes HTTP.

See docs/testing.md for a worked example.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap
from epp_sim.stack.extproc_client import ExtProcClient
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.stack.picker import InProcessPicker
from epp_sim.stack.pods import SimulatedPods

__all__ = [
    "ClientFactory",
    "EnvoyFactory",
    "PickerFactory",
    "PodsFactory",
    "PoolFactory",
    "epp_cluster",
    "epp_envoy",
    "epp_extproc",
    "epp_picker",
    "epp_pool",
    "epp_sim_pods",
]

PodsFactory = Callable[..., Awaitable[SimulatedPods]]
PickerFactory = Callable[..., Awaitable[InProcessPicker]]
ClientFactory = Callable[[InProcessPicker], Awaitable[ExtProcClient]]
PoolFactory = Callable[..., Awaitable[HermeticPool]]
EnvoyFactory = Callable[..., Awaitable[EnvoyProcess]]


_APISERVER_MARKER = "epp_apiserver"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_APISERVER_MARKER}(**options): options of the fake API server behind epp_cluster "
        "(pod_grace_seconds, history_limit, bookmark_interval, ...)",
    )


@pytest_asyncio.fixture
async def epp_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """A fresh fake cluster (API server on a free loopback port, kubeconfig in ``tmp_path``).

    ``@pytest.mark.epp_apiserver(pod_grace_seconds=60)`` sets the API server's options.
    """
    marker = request.node.get_closest_marker(_APISERVER_MARKER)
    options = dict(marker.kwargs) if marker is not None else {}
    async with FakeCluster(work_dir=tmp_path, **options) as cluster:
        yield cluster


class _LoopbackHosts:
    """The 127.0.0.x addresses handed out within one test, so pod sets and pools never share one."""

    def __init__(self) -> None:
        self._next = 2

    def take(self, count: int) -> int:
        first = self._next
        self._next += count
        return first


@pytest.fixture
def _epp_hosts() -> _LoopbackHosts:
    return _LoopbackHosts()


@pytest_asyncio.fixture
async def epp_sim_pods(epp_cluster: FakeCluster, _epp_hosts: _LoopbackHosts) -> AsyncIterator[PodsFactory]:
    """``await epp_sim_pods(3, labels={"app": "m"})``: Ready simulated pods in ``epp_cluster``.

    Each call takes the next free loopback addresses, so several sets (two pools, say) coexist.
    """
    async with AsyncExitStack() as stack:

        async def make(
            count: int,
            *,
            labels: Mapping[str, str],
            config: SimConfig | Sequence[SimConfig] | None = None,
            name_prefix: str = "pod",
            namespace: str | None = None,
        ) -> SimulatedPods:
            pods = SimulatedPods(
                epp_cluster,
                count,
                labels=labels,
                config=config,
                name_prefix=name_prefix,
                namespace=namespace,
                first_host=_epp_hosts.take(count),
            )
            return await stack.enter_async_context(pods)

        yield make


@pytest_asyncio.fixture
async def epp_picker(epp_cluster: FakeCluster) -> AsyncIterator[PickerFactory]:
    """``await epp_picker("--pool-name", "my-pool", "--config-file", path)``: ``epp serve``, in-process."""
    async with AsyncExitStack() as stack:

        async def make(*serve_args: str, seed: int | None = None) -> InProcessPicker:
            picker = InProcessPicker(serve_args, kubeconfig=epp_cluster.kubeconfig, seed=seed)
            return await stack.enter_async_context(picker)

        yield make


@pytest_asyncio.fixture
async def epp_extproc() -> AsyncIterator[ClientFactory]:
    """``client = await epp_extproc(picker)``; ``await client.route({"model": ..., "prompt": ...})``."""
    async with AsyncExitStack() as stack:

        async def make(picker: InProcessPicker) -> ExtProcClient:
            return await stack.enter_async_context(ExtProcClient(picker.grpc_target))

        yield make


@pytest_asyncio.fixture
async def epp_pool(epp_cluster: FakeCluster, _epp_hosts: _LoopbackHosts) -> AsyncIterator[PoolFactory]:
    """``pool = await epp_pool("v1", pods=3, objects=[...], picker_args=[...])``: a whole hermetic pool.

    Options are :class:`~epp_sim.stack.hermetic.HermeticPool`'s; the pool is built in
    ``epp_cluster``, its pods on loopback addresses no other pool of the test uses.
    """
    async with AsyncExitStack() as stack:

        async def make(mode: PoolMode = "v1", *, pods: int = 3, **options: Any) -> HermeticPool:
            first_host = _epp_hosts.take(pods + options.get("process_pods", 0))
            pool = HermeticPool(mode, pods=pods, cluster=epp_cluster, first_host=first_host, **options)
            return await stack.enter_async_context(pool)

        yield make


@pytest_asyncio.fixture
async def epp_envoy(tmp_path: Path) -> AsyncIterator[EnvoyFactory]:
    """``envoy = await epp_envoy(picker)``: a real Envoy whose ext_proc filter calls ``picker``.

    ``epp_envoy(first, second)`` puts active-active replicas behind it: one ext_proc cluster,
    round robin per request; it returns once Envoy has found every replica healthy.
    """
    async with AsyncExitStack() as stack:
        count = 0

        async def make(picker: InProcessPicker, *replicas: InProcessPicker) -> EnvoyProcess:
            nonlocal count
            count += 1
            targets = []
            for each in (picker, *replicas):
                host, _, port = each.grpc_target.rpartition(":")
                targets.append(ExtProcTarget(host, int(port)))
            bootstrap = envoy_bootstrap(listen_port=0, ext_proc=targets, admin_port=0)
            envoy = EnvoyProcess(bootstrap, name=f"envoy-{count}", work_dir=tmp_path / f"envoy-{count}")
            await stack.enter_async_context(envoy)
            await envoy.wait_ext_proc_healthy(timeout=30)
            return envoy

        yield make
