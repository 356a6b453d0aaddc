"""The picker's view of its pool; the one owner of the pool's invariants.

Reconcilers translate Kubernetes objects and call the writer methods; the request path reads.
Everything runs on the single event loop, so methods are synchronous and need no locks.

Invariants kept here (upstream ``pkg/epp/datastore/datastore.go``):

- an endpoint exists only for an eligible pod (Ready, not deleting, in the pool namespace, matching
  the selector), one per active target port, named ``<pod>-rank-<idx>`` (see ``endpoints.py``);
- every pod upserted is remembered, even before the pool exists or while it does not match, so a
  pool that appears or changes selector or ports resyncs at once without another API call;
- a pod whose address, ports or labels change gets a new :class:`EndpointState` (listeners see a
  remove and an add); its metrics carry over only when address and port are unchanged, its
  health never (a new state starts healthy, under the pool's :class:`HealthPolicy`);
- an endpoint a discovery plugin reports (``set_discovered``: the picker without Kubernetes) is taken
  as it is, with no pod behind it (the plugin is the authority); the set replaces the previous
  one whole, and a resync keeps it;
- InferenceModels: per ``modelName`` the oldest object wins (ties by namespace/name); every
  object is kept by key, so deleting the winner backfills from the rest;
- objectives are keyed by object name; rewrites are returned oldest first;
- ``endpoints()`` is a tuple rebuilt only after a change: O(1) and copy-free per request;
- listeners get ``(added, removed)`` after each change, e.g. to start and stop scrapers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from epp.datastore.endpoints import pod_endpoints
from epp.datastore.types import (
    EndpointListener,
    ModelSpec,
    ObjectiveSpec,
    PodInfo,
    PoolSpec,
    RewriteSpec,
)
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.health import HealthPolicy
from epp.labels import Requirement, Selector

__all__ = ["Datastore"]

_log = logging.getLogger(__name__)

_PodKey = tuple[str, str]  # (namespace, name)


def _selector_terms(selector: Selector) -> frozenset[Requirement]:
    """Selector identity regardless of term order (upstream compares the canonical string)."""
    return frozenset(selector.requirements)


def _same_endpoint(a: Endpoint, b: Endpoint) -> bool:
    # Endpoint equality leaves labels out (they are not identity); here a label change matters
    # because plugins and the engine choice read them.
    return a == b and a.labels == b.labels


def _model_age(model: ModelSpec) -> tuple[float, str, str]:
    return (model.created, model.namespace, model.name)


class Datastore:
    """Pool, endpoints, models, objectives and rewrites; implements DatastoreWriter and DatastoreReader."""

    def __init__(self, *, metrics_port: int = 0, health: HealthPolicy | None = None) -> None:
        """``metrics_port``: the deprecated ``--model-server-metrics-port`` (single-port pools only);
        ``health``: the policy (and transition listener) of every endpoint's health."""
        self._metrics_port = metrics_port
        self._health = health
        self._pool: PoolSpec | None = None
        self._pods: dict[_PodKey, PodInfo] = {}
        self._endpoints: dict[str, EndpointState] = {}
        self._pod_endpoint_keys: dict[_PodKey, tuple[str, ...]] = {}
        self._discovered: dict[_PodKey, Endpoint] = {}
        self._snapshot: tuple[EndpointState, ...] | None = ()
        self._listeners: list[EndpointListener] = []
        self._model_objects: dict[_PodKey, ModelSpec] = {}
        self._models: dict[str, ModelSpec] = {}
        self._objectives: dict[str, ObjectiveSpec] = {}
        self._rewrites: dict[_PodKey, RewriteSpec] = {}
        self._rewrites_sorted: tuple[RewriteSpec, ...] = ()

    # ---------------------------------------------------------------- reader

    @property
    def pool(self) -> PoolSpec | None:
        return self._pool

    @property
    def synced(self) -> bool:
        return self._pool is not None

    def endpoints(self) -> Sequence[EndpointState]:
        """Every endpoint, sorted by key; the same tuple object until the next change."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self._snapshot = tuple(self._endpoints[k] for k in sorted(self._endpoints))
        return snapshot

    def model(self, model_name: str) -> ModelSpec | None:
        return self._models.get(model_name)

    def objective(self, name: str) -> ObjectiveSpec | None:
        return self._objectives.get(name)

    def rewrites(self) -> Sequence[RewriteSpec]:
        return self._rewrites_sorted

    def subscribe(self, listener: EndpointListener) -> Callable[[], None]:
        """Call ``listener(added, removed)`` after every endpoint change; returns the unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # ---------------------------------------------------------------- pool and pods

    def set_pool(self, pool: PoolSpec, pods: Sequence[PodInfo] | None = None) -> bool:
        old = self._pool
        changed = (
            old is None
            or old.namespace != pool.namespace
            or old.target_ports != pool.target_ports
            or _selector_terms(old.selector) != _selector_terms(pool.selector)
        )
        self._pool = pool
        if pods is not None:
            self._pods = {(p.namespace, p.name): p for p in pods}
        if changed or pods is not None:
            if changed:
                _log.info(
                    "Pool set; resyncing endpoints",
                    extra={"pool": pool.name, "selector": str(pool.selector), "target_ports": pool.target_ports},
                )
                if self._metrics_port and len(pool.target_ports) > 1:
                    _log.warning(
                        "--model-server-metrics-port applies to single-port pools only (as in GIE); "
                        "scraping each target port instead",
                        extra={"pool": pool.name, "target_ports": pool.target_ports},
                    )
            self._resync()
        return changed

    def clear_pool(self) -> None:
        removed = list(self._endpoints.values())
        self._pool = None
        self._endpoints.clear()
        self._pod_endpoint_keys.clear()
        self._model_objects.clear()
        self._models.clear()
        self._objectives.clear()
        self._rewrites.clear()
        self._rewrites_sorted = ()
        _log.info("Pool cleared", extra={"removed_endpoints": len(removed)})
        self._changed([], removed)

    def resync_pods(self, pods: Sequence[PodInfo]) -> None:
        self._pods = {(p.namespace, p.name): p for p in pods}
        if self._pool is not None:
            self._resync()

    def upsert_pod(self, pod: PodInfo) -> None:
        key = (pod.namespace, pod.name)
        self._pods[key] = pod
        if self._pool is None:
            return
        added: list[EndpointState] = []
        removed: list[EndpointState] = []
        self._apply_pod(key, pod_endpoints(pod, self._pool, metrics_port=self._metrics_port), added, removed)
        self._changed(added, removed)

    def remove_pod(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._pods.pop(key, None)
        if key in self._pod_endpoint_keys:
            added: list[EndpointState] = []
            removed: list[EndpointState] = []
            self._apply_pod(key, (), added, removed)
            self._changed(added, removed)

    def set_discovered(self, endpoints: Sequence[Endpoint]) -> None:
        """The endpoints a discovery plugin reports now (each keyed by namespace/name); the others go."""
        self._discovered = {(e.namespace, e.name): e for e in endpoints}
        if self._pool is not None:
            self._resync()

    def _resync(self) -> None:
        """Make the endpoints exactly those the remembered pods (and discovered endpoints) give under the pool."""
        pool = self._pool
        assert pool is not None
        added: list[EndpointState] = []
        removed: list[EndpointState] = []
        discovered = self._discovered
        for key in [k for k in self._pod_endpoint_keys if k not in self._pods and k not in discovered]:
            self._apply_pod(key, (), added, removed)
        for key, pod in self._pods.items():
            desired = pod_endpoints(pod, pool, metrics_port=self._metrics_port)
            if desired or key in self._pod_endpoint_keys:
                self._apply_pod(key, desired, added, removed)
        for key, endpoint in discovered.items():
            self._apply_pod(key, (endpoint,), added, removed)
        self._changed(added, removed)

    def _apply_pod(
        self,
        key: _PodKey,
        desired: tuple[Endpoint, ...],
        added: list[EndpointState],
        removed: list[EndpointState],
    ) -> None:
        """Replace one pod's endpoints with ``desired``, recording the difference."""
        new_keys = tuple(ep.key for ep in desired)
        for ep in desired:
            current = self._endpoints.get(ep.key)
            metrics = None
            if current is not None:
                if _same_endpoint(current.endpoint, ep):
                    continue
                removed.append(current)
                old = current.endpoint
                if old.address == ep.address and old.port == ep.port:
                    metrics = current.metrics
            state = EndpointState(ep, metrics, self._health)
            self._endpoints[ep.key] = state
            added.append(state)
        for stale in self._pod_endpoint_keys.get(key, ()):
            if stale not in new_keys:
                removed.append(self._endpoints.pop(stale))
        if new_keys:
            self._pod_endpoint_keys[key] = new_keys
        else:
            self._pod_endpoint_keys.pop(key, None)

    def _changed(self, added: list[EndpointState], removed: list[EndpointState]) -> None:
        if not added and not removed:
            return
        self._snapshot = None
        for state in removed:
            _log.info("Endpoint removed", extra={"endpoint": state.endpoint.key})
        for state in added:
            _log.info("Endpoint added", extra={"endpoint": state.endpoint.key, "address": state.endpoint.hostport})
        for listener in tuple(self._listeners):
            try:
                listener(added, removed)
            except Exception:
                # A listener bug must not leave the store half-notified or kill the reconciler.
                _log.exception("Endpoint listener failed", extra={"listener": repr(listener)})

    # ---------------------------------------------------------------- models (v1alpha2)

    def set_model(self, model: ModelSpec) -> None:
        key = (model.namespace, model.name)
        previous = self._model_objects.get(key)
        self._model_objects[key] = model
        if previous is not None and previous.model_name != model.model_name:
            self._elect_model(previous.model_name)
        self._elect_model(model.model_name)

    def remove_model(self, namespace: str, name: str) -> None:
        previous = self._model_objects.pop((namespace, name), None)
        if previous is not None:
            self._elect_model(previous.model_name)

    def _elect_model(self, model_name: str) -> None:
        """The oldest stored object claiming ``model_name`` serves it (backfill on delete)."""
        candidates = [m for m in self._model_objects.values() if m.model_name == model_name]
        if candidates:
            self._models[model_name] = min(candidates, key=_model_age)
        else:
            self._models.pop(model_name, None)

    # ---------------------------------------------------------------- objectives and rewrites

    def set_objective(self, objective: ObjectiveSpec) -> None:
        self._objectives[objective.name] = objective

    def remove_objective(self, namespace: str, name: str) -> None:
        current = self._objectives.get(name)
        if current is not None and current.namespace == namespace:
            del self._objectives[name]

    def set_rewrite(self, rewrite: RewriteSpec) -> None:
        self._rewrites[(rewrite.namespace, rewrite.name)] = rewrite
        self._sort_rewrites()

    def remove_rewrite(self, namespace: str, name: str) -> None:
        if self._rewrites.pop((namespace, name), None) is not None:
            self._sort_rewrites()

    def _sort_rewrites(self) -> None:
        self._rewrites_sorted = tuple(sorted(self._rewrites.values(), key=lambda r: (r.created, r.namespace, r.name)))
