"""The InferencePool (by name, v1 or v1alpha2) → ``set_pool`` / ``clear_pool``.

The informer watches only our pool (``fieldSelector=metadata.name=<pool>``). A pool that is
listed as absent, deleted, or being deleted clears the store, as upstream. Every pool change is
handed to ``set_pool`` together with the pod reconciler's cache of the namespace, so the store
resyncs its endpoints (new pool, selector or port change) without another API call; a pool
update that changes nothing we use (status) is not passed on. An unreadable pool spec is logged and the last good pool
kept; an unreachable API server never reaches this class at all (the informer keeps retrying).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from epp.datastore.types import DatastoreWriter, PoolSpec
from epp.kube.client import JsonObject
from epp.kube.pod_reconciler import PodReconciler
from epp.kube.translate import TranslationError, object_key, pool_spec

__all__ = ["PoolReconciler"]

log = logging.getLogger(__name__)


class PoolReconciler:
    """Informer handler for one InferencePool; ``on_change`` fires when it appears or goes."""

    def __init__(
        self,
        datastore: DatastoreWriter,
        pods: PodReconciler,
        *,
        pool_name: str,
        pool_group: str,
        on_change: Callable[[PoolSpec | None], None] | None = None,
    ) -> None:
        self._datastore = datastore
        self._pods = pods
        self._pool_name = pool_name
        self._pool_group = pool_group
        self._on_change = on_change
        self.pool: PoolSpec | None = None
        """The pool last handed to the store (None: not observed, or deleted)."""

    def resync(self, objects: Sequence[JsonObject]) -> None:
        ours = [obj for obj in objects if _name(obj) == self._pool_name]
        if ours:
            self.apply("MODIFIED", ours[0])
        else:
            self._clear("not found")

    def apply(self, event: str, obj: JsonObject) -> None:
        if _name(obj) != self._pool_name:
            return
        if event == "DELETED":
            self._clear("deleted")
            return
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._clear("being deleted")
            return
        try:
            spec = pool_spec(obj, group=self._pool_group)
        except TranslationError as e:
            log.error("unusable InferencePool; keeping the last good one", extra={"error": str(e)})
            return
        self._set(spec)

    def _set(self, spec: PoolSpec) -> None:
        first = self.pool is None
        if spec == self.pool:
            return
        self.pool = spec
        # The full pod list goes with the pool, so a new pool or a selector or port change is
        # resynced in one step (no window with the new pool and the old endpoints).
        self._datastore.set_pool(spec, self._pods.pods)
        self._pods.activate()
        log.info(
            "InferencePool set",
            extra={"pool": spec.name, "selector": str(spec.selector), "target_ports": list(spec.target_ports)},
        )
        if first and self._on_change is not None:
            self._on_change(spec)

    def _clear(self, why: str) -> None:
        if self.pool is None:
            return
        self.pool = None
        self._pods.deactivate()
        self._datastore.clear_pool()
        log.warning("InferencePool gone; endpoints cleared", extra={"pool": self._pool_name, "reason": why})
        if self._on_change is not None:
            self._on_change(None)


def _name(obj: JsonObject) -> str | None:
    try:
        return object_key(obj)[1]
    except TranslationError:
        return None
