"""Pods in the pool namespace → ``upsert_pod`` / ``remove_pod`` / ``resync_pods``.

Every pod event is translated and passed on; the store decides whether the pod is an endpoint
(Ready, not deleting, matching the selector), so a pod that turns NotReady, gets a
``deletionTimestamp`` or loses its label is removed by the same ``upsert_pod`` call.

The reconciler also keeps the latest :class:`PodInfo` of every pod in the namespace. While no
pool is set it only updates that cache (as upstream, which skips pod events until the pool is
synced); the pool reconciler then resyncs the store from it on the first pool, and on every
selector or target-port change, without asking the API server again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from epp.datastore.types import DatastoreWriter, PodInfo
from epp.kube.client import JsonObject
from epp.kube.translate import TranslationError, object_key, pod_info

__all__ = ["PodReconciler"]

log = logging.getLogger(__name__)


class PodReconciler:
    """Informer handler for ``v1/pods``; forwards to the store only while a pool is set."""

    def __init__(
        self,
        datastore: DatastoreWriter,
        *,
        active: bool = False,
        on_listed: Callable[[], None] | None = None,
    ) -> None:
        self._datastore = datastore
        self._active = active
        self._on_listed = on_listed
        self._pods: dict[tuple[str, str], PodInfo] = {}
        self.listed = False
        """True once the first full list has arrived."""

    @property
    def pods(self) -> list[PodInfo]:
        """Every pod of the namespace as last seen (routable or not)."""
        return list(self._pods.values())

    def activate(self) -> None:
        """A pool is set: forward events from now on (the caller resyncs the store)."""
        self._active = True

    def deactivate(self) -> None:
        """The pool is gone: keep caching, stop forwarding."""
        self._active = False

    def resync(self, objects: Sequence[JsonObject]) -> None:
        pods: dict[tuple[str, str], PodInfo] = {}
        for obj in objects:
            pod = self._translate(obj)
            if pod is not None:
                pods[(pod.namespace, pod.name)] = pod
            else:  # unreadable now: keep what we knew, if anything
                key = _key_or_none(obj)
                if key is not None and key in self._pods:
                    pods[key] = self._pods[key]
        self._pods = pods
        if self._active:
            self._datastore.resync_pods(self.pods)
        if not self.listed:
            self.listed = True
            if self._on_listed is not None:
                self._on_listed()

    def apply(self, event: str, obj: JsonObject) -> None:
        if event == "DELETED":
            key = _key_or_none(obj)
            if key is None:
                return
            self._pods.pop(key, None)
            if self._active:
                self._datastore.remove_pod(*key)
            return
        pod = self._translate(obj)
        if pod is None:
            return
        self._pods[(pod.namespace, pod.name)] = pod
        if self._active:
            self._datastore.upsert_pod(pod)

    @staticmethod
    def _translate(obj: JsonObject) -> PodInfo | None:
        try:
            return pod_info(obj)
        except TranslationError as e:
            log.warning("ignoring unreadable pod", extra={"error": str(e)})
            return None


def _key_or_none(obj: JsonObject) -> tuple[str, str] | None:
    try:
        return object_key(obj)
    except TranslationError as e:
        log.warning("ignoring pod event without a name", extra={"error": str(e)})
        return None
