"""SSRF protection: the sidecar calls only hosts that are pods of its InferencePool.

A request names its prefill pod in a header; a client able to send that header straight to a
decode pod could otherwise make the sidecar POST to any address it reaches. With
``--enable-ssrf-protection`` the sidecar watches its InferencePool (``--inference-pool``,
``--pool-group``) and the pods its selector matches, through the same list-and-watch machinery the
picker uses, and allows a prefill or encode host only when it is the IP (or the name) of such a pod,
whatever the port, as upstream's allowlist (llm-d router ``pkg/sidecar/proxy/allowlist.go``).
Start-up waits for the first lists (and fails, naming the pool, when they do not come); until the
pool exists every host is refused. Pods that are not Ready are not the pool's endpoints and are
refused too (upstream allows every matching pod).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from epp.datastore.store import Datastore
from epp.kube.client import Api, close_api, make_api
from epp.kube.informer import Informer
from epp.kube.pod_reconciler import PodReconciler
from epp.kube.pool_reconciler import PoolReconciler
from epp.kube.resources import POD, pool_kind
from epp.tasks import Service

__all__ = ["AllowEverything", "Allowlist", "PoolAllowlist", "host_of"]

log = logging.getLogger(__name__)

_SYNC_TIMEOUT = 30.0


def host_of(hostport: str) -> str:
    """The host of ``host:port`` (``[v6]:port`` unbracketed; a bare host as it is; ``http://`` dropped)."""
    value = hostport.strip().removeprefix("http://").removeprefix("https://")
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    host, sep, port = value.rpartition(":")
    return host if sep and port.isdigit() else value


class Allowlist(Protocol):
    def allows(self, hostport: str) -> bool: ...


class AllowEverything:
    """Without ``--enable-ssrf-protection``: every host (upstream's default)."""

    def allows(self, hostport: str) -> bool:
        return True


class PoolAllowlist(Service):
    """The pods of one InferencePool, kept current; ``start`` returns once both lists arrived."""

    def __init__(self, *, namespace: str, pool_name: str, pool_group: str, kubeconfig: str = "") -> None:
        self._namespace = namespace
        self._pool_name = pool_name
        self._pool_group = pool_group
        self._kubeconfig = kubeconfig
        self.datastore = Datastore()
        self._api: Api | None = None
        self._informers: list[Informer] = []

    def allows(self, hostport: str) -> bool:
        host = host_of(hostport)
        for state in self.datastore.endpoints():
            endpoint = state.endpoint
            if host in (endpoint.address, endpoint.pod_name):
                return True
        return False

    async def start(self) -> None:
        self._api = api = await make_api(self._kubeconfig or None)
        pods = PodReconciler(self.datastore)
        pool = PoolReconciler(self.datastore, pods, pool_name=self._pool_name, pool_group=self._pool_group)
        self._informers = [
            Informer(api, POD, pods, namespace=self._namespace),
            Informer(
                api,
                pool_kind(self._pool_group),
                pool,
                namespace=self._namespace,
                field_selector=f"metadata.name={self._pool_name}",
            ),
        ]
        for informer in self._informers:
            informer.start()
        where = f"InferencePool {self._namespace}/{self._pool_name} ({self._pool_group})"
        try:
            async with asyncio.timeout(_SYNC_TIMEOUT):
                await asyncio.gather(*(informer.synced.wait() for informer in self._informers))
        except TimeoutError:
            raise RuntimeError(
                f"SSRF protection: could not list {where} and its pods within {_SYNC_TIMEOUT:g}s "
                "(check the API server, RBAC for inferencepools and pods, and that the pool exists)"
            ) from None
        if self.datastore.pool is None:
            log.warning(
                "SSRF protection: the pool does not exist yet; every prefill host is refused", extra={"pool": where}
            )
        log.info("SSRF protection allowlist started", extra={"pool": where, "pods": len(self.datastore.endpoints())})

    async def stop(self) -> None:
        informers, self._informers = self._informers, []
        await asyncio.gather(*(informer.stop() for informer in informers))
        api, self._api = self._api, None
        if api is not None:
            await close_api(api)
