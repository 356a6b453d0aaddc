"""Standalone mode (``--endpoint-selector``): a synthesised pool and a pod watch, no CRDs.

The pool comes from flags and is set at :meth:`StandaloneReconciler.start`; only pods are
watched, so a cluster without the InferencePool CRD works. Readiness (``synced``) is set once the
first pod list has reached the store, so the picker does not report SERVING with no endpoints
merely because the list had not arrived yet.
"""

from __future__ import annotations

import asyncio

from epp.datastore.types import DatastoreWriter, PoolSpec
from epp.kube.client import Api
from epp.kube.informer import Informer, InformerSettings
from epp.kube.pod_reconciler import PodReconciler
from epp.kube.resources import POD
from epp.kube.translate import standalone_pool, standalone_pool_name
from epp.labels import Selector

__all__ = ["StandaloneReconciler", "standalone_pool_name"]


class StandaloneReconciler:
    """Pods of ``namespace`` → the store, against a pool built from ``selector`` and ports."""

    def __init__(
        self,
        api: Api,
        datastore: DatastoreWriter,
        *,
        selector: Selector,
        target_ports: tuple[int, ...],
        namespace: str,
        pool_name: str,
        settings: InformerSettings | None = None,
    ) -> None:
        self.pool: PoolSpec = standalone_pool(
            selector=selector, target_ports=target_ports, namespace=namespace, pool_name=pool_name
        )
        self.synced = asyncio.Event()
        """Set once the first pod list has been applied."""
        self._datastore = datastore
        self._pods = PodReconciler(datastore, active=True, on_listed=self.synced.set)
        self._informer = Informer(api, POD, self._pods, namespace=namespace, settings=settings)

    @property
    def informer(self) -> Informer:
        """The pod informer (tests read its counters)."""
        return self._informer

    async def start(self) -> None:
        """Set the synthesised pool, then start watching pods."""
        self._datastore.set_pool(self.pool)
        self._informer.start()

    async def stop(self) -> None:
        """Stop watching; the store keeps what it has."""
        await self._informer.stop()
