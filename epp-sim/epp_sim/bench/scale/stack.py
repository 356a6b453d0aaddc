"""The processes ``epp bench scale`` measures, and the pool it grows and shrinks under the picker.

- the fast backend (``epp_sim.bench.backend``) on as many loopback addresses as the largest pool;
- a fake Kubernetes API server (in this process) holding that many Ready pods; the first
  ``base_pods`` are always in every pool, the rest join or leave a picker's pool by a label of
  its own (:meth:`ScaleStack.set_pool_size`), so one picker is measured with 8 pods and with
  hundreds while the others scrape only the base pods;
- ``epp serve`` with the default configuration per scrape mode (``in-loop``: the serving
  loop scrapes; ``process``: ``--metrics-scrape-process``), and ``precise`` (the base pods,
  tokenizing with a local tokenizer) once per ``--workers`` count (``precise`` is one worker,
  ``precise-w2`` two, ...), each behind its own Envoy in the GIE mode; the precise pickers' Envoys
  put one stream on each connection to the picker, so the kernel spreads them over the workers.

Sizes are read back from the picker itself (:meth:`ScaleStack.fresh_endpoints`: its per-endpoint
``epp_endpoint_metrics_age_seconds`` series), so a measurement starts only when every pod of the
new pool has been scraped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from epp.datalayer.promtext import parse
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.bench.backend import pod_host
from epp_sim.bench.children import http_ok, python_child
from epp_sim.bench.overhead.stack import start_envoy, start_picker
from epp_sim.bench.scale.options import ScaleOptions
from epp_sim.kube_objects import pod, pod_status_ready
from epp_sim.ports import free_port
from epp_sim.precise_prefix import precise_picker_config
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap
from epp_sim.stack.processes import ChildProcess
from epp_sim.tiny_tokenizer import write_tiny_tokenizer
from epp_sim.waits import wait_until

__all__ = ["ScaleStack", "precise_picker", "start_scale_stack"]

_BASE = {"epp-scale-base": "true"}
_AGE = "epp_endpoint_metrics_age_seconds"
_MODE_ARGS = {"in-loop": [], "process": ["--metrics-scrape-process"]}


def precise_picker(workers: int) -> str:
    """The name of the precise picker serving with ``workers`` processes."""
    return "precise" if workers == 1 else f"precise-w{workers}"


def _pool_label(mode: str) -> str:
    return f"epp-scale-{mode}"


@dataclass
class ScaleStack:
    """The running processes, where they listen, and each scrape mode's pool size."""

    work: Path
    apiserver: RunningApiServer
    base_pods: int
    backend: ChildProcess
    pickers: dict[str, ChildProcess] = field(default_factory=dict)
    metrics_urls: dict[str, str] = field(default_factory=dict)
    envoys: dict[str, EnvoyProcess] = field(default_factory=dict)
    tokenizer: str = ""
    pool_sizes: dict[str, int] = field(default_factory=dict)

    def set_pool_size(self, mode: str, size: int) -> None:
        """Label pods ``base_pods`` … ``size - 1`` into ``mode``'s picker's pool and the others out."""
        store = self.apiserver.server.store
        low, high = sorted((self.pool_sizes[mode], size))
        for i in range(max(low, self.base_pods), high):
            labels = {_pool_label(mode): "on" if i < size else None}
            store.patch("Pod", f"scale-{i}", {"metadata": {"labels": labels}}, namespace="default")
        self.pool_sizes[mode] = size

    async def picker_page(self, session: aiohttp.ClientSession, picker: str) -> str:
        """The ``/metrics`` page of ``picker`` (a scrape mode, or ``precise``) now."""
        async with session.get(self.metrics_urls[picker]) as resp:
            resp.raise_for_status()
            return await resp.text()

    async def fresh_endpoints(
        self, session: aiohttp.ClientSession, mode: str, *, max_age: float = 2.0
    ) -> tuple[int, int]:
        """(endpoints in ``mode``'s picker's pool, those scraped within ``max_age`` seconds: the default staleness)."""
        ages = parse(await self.picker_page(session, mode), [_AGE]).samples.get(_AGE, [])
        return len(ages), sum(1 for s in ages if s.value <= max_age)

    async def resize(self, session: aiohttp.ClientSession, mode: str, size: int) -> None:
        """Make ``mode``'s pool ``size`` pods and return once its picker has them all, each freshly scraped."""
        self.set_pool_size(mode, size)

        async def settled() -> bool:
            count, fresh = await self.fresh_endpoints(session, mode)
            return count == fresh == size

        await wait_until(settled, timeout=60, interval=0.2, message=f"{mode}: never {size} fresh endpoints")


def _add_pods(running: RunningApiServer, count: int, base: int, modes: Sequence[str]) -> None:
    store = running.server.store
    for i in range(count):
        name = f"scale-{i}"
        labels = {**_BASE, **{_pool_label(m): "on" for m in modes}} if i < base else {}
        store.create("Pod", pod(name, labels), namespace="default")
        store.patch("Pod", name, {"status": pod_status_ready(pod_host(i))}, namespace="default", subresource="status")


@asynccontextmanager
async def start_scale_stack(options: ScaleOptions, work: Path) -> AsyncIterator[ScaleStack]:
    """Start backend, API server, the pickers and their Envoys; stop them all on exit."""
    hosts = max(options.pods)
    async with AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)))
        port = free_port("127.0.0.2")
        backend = python_child(work, "backend", "epp_sim.bench.backend", "--count", str(hosts), "--port", str(port))
        await stack.enter_async_context(backend)
        await backend.wait_ready(lambda: http_ok(session, f"http://127.0.0.2:{port}/health"), timeout=60)
        running = await stack.enter_async_context(running_apiserver(kubeconfig_path=work / "kubeconfig"))
        _add_pods(running, hosts, options.base_pods, options.scrape_modes)
        result = ScaleStack(work, running, options.base_pods, backend)
        tokenizer = options.tokenizer
        if tokenizer is None:
            tokenizer = await asyncio.to_thread(write_tiny_tokenizer, work / "tokenizer", vocab_size=1000)
        result.tokenizer = str(options.tokenizer or "tiny (trained on the bench's words, 1,000 tokens)")
        pickers: list[tuple[str, dict[str, str], list[str]]] = [
            (mode, {_pool_label(mode): "on"}, _MODE_ARGS[mode]) for mode in options.scrape_modes
        ]
        if "precise" in options.configs:
            path = work / "precise.yaml"
            await asyncio.to_thread(path.write_text, precise_picker_config(tokenizer, free_port()), "utf-8")
            for workers in sorted({1, *options.workers}):
                args = [f"--config-file={path}", f"--workers={workers}"]
                pickers.append((precise_picker(workers), _BASE, args))
        for name, labels, args in pickers:
            picker, grpc, metrics_url = await start_picker(
                stack,
                work,
                f"epp-{name}",
                kubeconfig=running.kubeconfig,
                backend_port=port,
                session=session,
                labels=labels,
                args=args,
            )
            result.pickers[name], result.metrics_urls[name] = picker, metrics_url
            bootstrap = envoy_bootstrap(
                listen_port=0,
                ext_proc=ExtProcTarget("127.0.0.1", grpc),
                admin_port=0,
                ext_proc_streams_per_connection=1 if name.startswith("precise") else None,
            )
            result.envoys[name] = await start_envoy(stack, work, name, bootstrap, session)
        for mode in options.scrape_modes:
            result.pool_sizes[mode] = options.base_pods
            await result.resize(session, mode, options.base_pods)
        yield result
