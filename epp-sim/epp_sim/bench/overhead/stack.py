"""The processes ``epp bench overhead`` measures, started in order and stopped by PID.

- a fast backend (``epp_sim.bench.backend``) on ``127.0.0.2`` … ``127.0.0.<N+1>``, serving completions
  and a realistic vLLM ``/metrics`` page on each address (the N "pods");
- a fake Kubernetes API server (in this process) holding N Ready pods with those IPs;
- the no-op ext_proc server (``epp_sim.bench.noop_server``) routing round robin over the N pods;
- ``epp serve`` in standalone mode over the N pods, scraping them every 50 ms;
- three Envoys, the :data:`VARIANTS`: ``envoy`` straight to the first pod, ``noop`` with the
  ext_proc filter to the no-op processor, ``epp`` with the same filter to the picker (the GIE
  mode: full-duplex streamed bodies, routing by ``envoy.lb`` metadata).

:func:`start_stack` yields only when a request passes through every Envoy and the picker has
scraped every pod, so the first measured round does not pay for start-up.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from epp.datalayer.promtext import parse
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.bench.children import http_ok, python_child, tcp_open
from epp_sim.bench.overhead.options import OverheadOptions, prompt_body
from epp_sim.kube_objects import pod, pod_status_ready
from epp_sim.ports import free_port
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap, envoy_bootstrap_plain
from epp_sim.stack.processes import ChildProcess
from epp_sim.waits import wait_until

__all__ = [
    "VARIANTS",
    "Stack",
    "picker_metrics",
    "pod_addresses",
    "start_envoy",
    "start_noop",
    "start_picker",
    "start_stack",
]

VARIANTS = ("envoy", "noop", "epp")
"""The three Envoys compared, in the order each round runs them."""

_POOL_LABELS = {"app": "epp-bench"}
_CHILD_ENV = {"NAMESPACE": "default"}


def _add_pods(running: RunningApiServer, count: int) -> None:
    store = running.server.store
    for i in range(count):
        name = f"bench-{i}"
        store.create("Pod", pod(name, _POOL_LABELS), namespace="default")
        status = pod_status_ready(f"127.0.0.{2 + i}")
        store.patch("Pod", name, {"status": status}, namespace="default", subresource="status")


@dataclass
class Stack:
    """The running processes and where they listen."""

    work: Path
    kubeconfig: Path
    backend_port: int
    backend: ChildProcess
    noop: ChildProcess
    epp: ChildProcess
    epp_grpc: str
    noop_grpc: str
    epp_metrics_url: str
    envoys: dict[str, EnvoyProcess] = field(default_factory=dict)

    def pids(self, variant: str) -> dict[str, int]:
        """The processes whose CPU a round of ``variant`` is charged with."""
        pids = {"envoy": self.envoys[variant].pid, "backend": self.backend.pid}
        if variant == "noop":
            pids["processor"] = self.noop.pid
        elif variant == "epp":
            pids["processor"] = self.epp.pid
        return pids


def pod_addresses(endpoints: int, port: int) -> str:
    """The bench pods' ``ip:port`` list (127.0.0.2 …), as the no-op processor's ``--destination``."""
    return ",".join(f"127.0.0.{2 + i}:{port}" for i in range(endpoints))


async def start_noop(exit: AsyncExitStack, work: Path, name: str, destination: str) -> tuple[ChildProcess, int]:
    """The no-op processor routing to ``destination`` (an ``ip:port`` list), as child ``name``; its gRPC port."""
    port = free_port()
    noop = python_child(
        work, name, "epp_sim.bench.noop_server", "--port", str(port), "--destination", destination, env=_CHILD_ENV
    )
    await exit.enter_async_context(noop)
    await noop.wait_ready(lambda: tcp_open("127.0.0.1", port), timeout=30)
    return noop, port


async def start_picker(
    exit: AsyncExitStack,
    work: Path,
    name: str,
    *,
    kubeconfig: Path,
    backend_port: int,
    session: aiohttp.ClientSession,
    labels: Mapping[str, str] = _POOL_LABELS,
    args: Sequence[str] = (),
) -> tuple[ChildProcess, int, str]:
    """``epp serve`` in standalone mode over the pods with ``labels``, as child ``name``; gRPC port and metrics URL.

    ``args``: more ``epp serve`` flags (e.g. ``--config-file``).
    """
    grpc, health, metrics = free_port(), free_port(), free_port()
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    epp = python_child(
        work,
        name,
        "epp",
        "serve",
        "--secure-serving=false",
        f"--endpoint-selector={selector}",
        f"--endpoint-target-ports={backend_port}",
        f"--kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--grpc-port={grpc}",
        f"--grpc-health-port={health}",
        f"--metrics-port={metrics}",
        "--metrics-endpoint-auth=false",  # the bench reads the picker's /metrics without a token
        "--health-checking=true",  # Envoy health-checks the ext_proc cluster over gRPC
        "--drain-timeout=0s",  # stopped after the runs: no drain window to wait out
        "--v=1",
        *args,
        env=_CHILD_ENV,
    )
    await exit.enter_async_context(epp)
    metrics_url = f"http://127.0.0.1:{metrics}/metrics"
    await epp.wait_ready(lambda: http_ok(session, metrics_url), timeout=60)
    return epp, grpc, metrics_url


async def start_envoy(
    exit: AsyncExitStack, work: Path, name: str, bootstrap: dict[str, Any], session: aiohttp.ClientSession
) -> EnvoyProcess:
    """An Envoy as child ``envoy-<name>``, returned once a 1 KB completion passes through it."""
    envoy = await exit.enter_async_context(
        EnvoyProcess(bootstrap, name=f"envoy-{name}", work_dir=work / f"envoy-{name}")
    )
    url = f"http://127.0.0.1:{envoy.port}/v1/completions"
    probe = functools.partial(http_ok, session, url, prompt_body(1024))
    await wait_until(probe, timeout=60, interval=0.1, message=f"{name}: no 200 through Envoy")
    return envoy


@asynccontextmanager
async def start_stack(options: OverheadOptions, work: Path) -> AsyncIterator[Stack]:
    """Start backend, API server, processors and the three Envoys; stop them all on exit."""
    hosts = max(options.endpoints, *options.scrape_endpoints)
    async with AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)))
        port = free_port("127.0.0.2")
        backend = python_child(
            work, "backend", "epp_sim.bench.backend", "--count", str(hosts), "--port", str(port), env=_CHILD_ENV
        )
        await stack.enter_async_context(backend)
        await backend.wait_ready(lambda: http_ok(session, f"http://127.0.0.2:{port}/health"), timeout=30)

        running = await stack.enter_async_context(running_apiserver(kubeconfig_path=work / "kubeconfig"))
        _add_pods(running, options.endpoints)

        noop, noop_port = await start_noop(stack, work, "noop", pod_addresses(options.endpoints, port))
        epp, grpc, metrics_url = await start_picker(
            stack, work, "epp", kubeconfig=running.kubeconfig, backend_port=port, session=session
        )
        result = Stack(
            work=work,
            kubeconfig=running.kubeconfig,
            backend_port=port,
            backend=backend,
            noop=noop,
            epp=epp,
            epp_grpc=f"127.0.0.1:{grpc}",
            noop_grpc=f"127.0.0.1:{noop_port}",
            epp_metrics_url=metrics_url,
        )
        bootstraps = {
            "envoy": envoy_bootstrap_plain(0, "127.0.0.2", port, 0),
            "noop": envoy_bootstrap(listen_port=0, ext_proc=ExtProcTarget("127.0.0.1", noop_port), admin_port=0),
            "epp": envoy_bootstrap(listen_port=0, ext_proc=ExtProcTarget("127.0.0.1", grpc), admin_port=0),
        }
        for name, bootstrap in bootstraps.items():
            result.envoys[name] = await start_envoy(stack, work, name, bootstrap, session)
        await wait_until(
            functools.partial(_picker_sees_all, session, result, options.endpoints),
            timeout=30,
            interval=0.1,
            message="picker never scraped every pod",
        )
        yield result


async def picker_metrics(session: aiohttp.ClientSession, stack: Stack) -> str:
    """The picker's ``/metrics`` page now."""
    async with session.get(stack.epp_metrics_url) as resp:
        resp.raise_for_status()
        return await resp.text()


async def _picker_sees_all(session: aiohttp.ClientSession, stack: Stack, endpoints: int) -> bool:
    """The picker has scraped (about) every pod twice, so the datastore holds them all with metrics."""
    text = await picker_metrics(session, stack)
    samples = parse(text, ["epp_scrape_duration_seconds_count"]).samples.get("epp_scrape_duration_seconds_count", [])
    return sum(s.value for s in samples) >= endpoints * 2
