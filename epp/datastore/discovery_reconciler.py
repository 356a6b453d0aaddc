"""A discovery plugin (``dataLayer.discovery``) → the store: the pool of a picker running without Kubernetes.

The counterpart of the Kubernetes reconcilers for upstream's file-discovery mode: the pool is
synthesised from the flags (``--pool-name``, else ``epp``; ``--pool-namespace``), with no selector
and no target ports, and its endpoints are exactly what the plugin reports, each served and
scraped on its own ``address:port``. ``start`` reads the source once (a source that cannot be
read fails the picker's start, as upstream's), sets the pool, applies the set, then leaves the
plugin watching on a task it owns; ``synced`` (readiness) is set after that first set. No
InferencePool, InferenceObjective or InferenceModelRewrite exists in this mode: requests get the
default priority and no rewrite.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from epp.datastore.store import Datastore
from epp.datastore.types import PoolSpec
from epp.framework.discovery import DiscoveredEndpoint, EndpointDiscovery
from epp.framework.endpoint import Endpoint
from epp.labels import Selector
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["DEFAULT_POOL_NAME", "DiscoveryReconciler"]

DEFAULT_POOL_NAME = "epp"
"""Upstream's pool name in file-discovery mode when ``--pool-name`` is not given."""
log = logging.getLogger(__name__)


def _endpoint(found: DiscoveredEndpoint) -> Endpoint:
    return Endpoint(
        namespace=found.namespace,
        name=found.name,
        pod_name=found.name,
        address=found.address,
        port=found.port,
        labels=found.labels,
    )


class DiscoveryReconciler:
    """Runs one discovery plugin against one store."""

    def __init__(self, discovery: EndpointDiscovery, datastore: Datastore, *, pool_name: str, namespace: str) -> None:
        self.discovery = discovery
        self.pool = PoolSpec(name=pool_name, namespace=namespace, selector=Selector(), target_ports=())
        self.synced = asyncio.Event()
        """Set once the first set of endpoints is in the store."""
        self._datastore = datastore
        self._task: asyncio.Task[Any] | None = None

    def replace(self, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        """The plugin's notifier: this set is the pool's endpoints now."""
        self._datastore.set_discovered([_endpoint(e) for e in endpoints])

    async def start(self) -> None:
        endpoints = await self.discovery.load()
        self._datastore.set_pool(self.pool)
        self.replace(endpoints)
        self.synced.set()
        log.info(
            "endpoints from discovery",
            extra={"plugin": str(self.discovery.typed_name), "pool": self.pool.name, "endpoints": len(endpoints)},
        )
        self._task = start_guarded(self.discovery.watch(self), name=f"discovery:{self.discovery.typed_name}")

    async def stop(self) -> None:
        """Stop watching; the store keeps what it has."""
        await cancel_and_wait(self._task)
        self._task = None
