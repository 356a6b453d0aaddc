"""Starts and stops the reconcilers of one InferencePool; ``synced`` gates readiness.

Always: the pod informer (the pool namespace) and the pool informer (our pool by name, v1 or
v1alpha2 by ``--pool-group``). Then, in a background task that retries while the API server is
away, discovery decides which optional kinds exist: InferenceObjective and
InferenceModelRewrite, and for v1alpha2 pools InferenceModel. A cluster without those CRDs simply
runs without them.

InferenceObjective and InferenceModelRewrite are looked up in both groups that serve them,
``llm-d.ai`` (the llm-d router's) and ``inference.networking.x-k8s.io`` (GIE's), and watched in
each group that does. When both do, their objects are merged with one rule: an ``llm-d.ai``
object wins over a legacy one of the same namespace and name, which is ignored with a warning and
counted (``group_merge.py``). The llm-d router, in that case, ignores every legacy object.

``synced`` is set while the pool is known, the first pod list has arrived and every optional
kind found by discovery has been listed once, and cleared when the pool is deleted. Upstream's
``PoolHasSynced`` waits for the pool and pods only; waiting for the rest too means a picker never
reports ready while it would still answer a v1alpha2 model 404 or give an objective's request
the default priority, merely because those lists had not arrived yet. Losing the API server
later changes nothing: the informers retry and the store keeps serving its last known state.
:class:`KubeSeries` declares the one series this package writes.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from epp.datastore.types import DatastoreWriter, ObjectiveSpec, PoolSpec, RewriteSpec
from epp.kube.client import Api, KubeError, served_kinds
from epp.kube.group_merge import GroupMerge, Sink
from epp.kube.informer import Informer, InformerHandler, InformerSettings
from epp.kube.keyed import KeyedReconciler
from epp.kube.objective_reconciler import model_reconciler, objective_reconciler
from epp.kube.pod_reconciler import PodReconciler
from epp.kube.pool_reconciler import PoolReconciler
from epp.kube.resources import (
    INFERENCE_MODEL,
    OPTIONAL_KINDS,
    POD,
    V1ALPHA2_GROUP,
    ResourceKind,
    pool_kind,
)
from epp.kube.rewrite_reconciler import rewrite_reconciler
from epp.kube.standalone import StandaloneReconciler
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Gauge

__all__ = ["KubeSeries", "PoolReconcilers", "StandaloneReconciler"]

log = logging.getLogger(__name__)


class KubeSeries:
    """``epp_api_group_shadowed_objects`` (ours): legacy objects an ``llm-d.ai`` one of the same name hides."""

    def __init__(self, metrics: EppMetrics) -> None:
        self.shadowed_objects = Gauge(
            "epp_api_group_shadowed_objects",
            "Objects of inference.networking.x-k8s.io ignored because an object of the same kind, namespace "
            "and name exists in llm-d.ai, which wins (both groups are watched and merged).",
            ("pool", "kind"),
            registry=metrics.registry,
        )


class PoolReconcilers:
    """Everything that keeps the store in step with one pool's Kubernetes objects."""

    def __init__(
        self,
        api: Api,
        datastore: DatastoreWriter,
        *,
        pool_name: str,
        namespace: str,
        pool_group: str,
        settings: InformerSettings | None = None,
        metrics: EppMetrics | None = None,
    ) -> None:
        self._api = api
        self._datastore = datastore
        self._metrics = metrics
        self._pool_name = pool_name
        self._namespace = namespace
        self._pool_group = pool_group
        self._settings = settings or InformerSettings()
        self.synced = asyncio.Event()
        """Set while the pool is known and pods have been listed; cleared when the pool goes."""
        self._pods = PodReconciler(datastore, on_listed=self._update_synced)
        self._pool = PoolReconciler(
            datastore, self._pods, pool_name=pool_name, pool_group=pool_group, on_change=self._pool_changed
        )
        self._keyed: list[KeyedReconciler[Any]] = []
        self._informers: list[Informer] = [
            self._informer(POD, self._pods),
            self._informer(pool_kind(pool_group), self._pool, field_selector=f"metadata.name={pool_name}"),
        ]
        self._discovery: asyncio.Task[None] | None = None
        self.discovered = asyncio.Event()
        """Set once discovery has decided which optional kinds to watch and each was listed once."""

    @property
    def pool(self) -> PoolSpec | None:
        """The pool as last handed to the store."""
        return self._pool.pool

    @property
    def informers(self) -> dict[str, Informer]:
        """Running informers by qualified kind (``Pod``, ``InferenceObjective.llm-d.ai``; tests read them)."""
        return {inf.kind.qualified: inf for inf in self._informers}

    async def start(self) -> None:
        """Start the pod and pool informers, and discovery of the optional kinds."""
        for informer in self._informers:
            informer.start()
        if self._discovery is None:
            self._discovery = start_guarded(self._discover(), f"discover:{self._pool_name}")

    async def stop(self) -> None:
        """Stop discovery and every informer; the store keeps its state."""
        task, self._discovery = self._discovery, None
        await cancel_and_wait(task)
        await asyncio.gather(*(informer.stop() for informer in self._informers))

    def _informer(self, kind: ResourceKind, handler: InformerHandler, *, field_selector: str = "") -> Informer:
        return Informer(
            self._api,
            kind,
            handler,
            namespace=self._namespace,
            field_selector=field_selector,
            settings=self._settings,
        )

    def _pool_changed(self, pool: PoolSpec | None) -> None:
        if pool is not None:  # the store may have dropped objectives and rewrites with the pool
            for reconciler in self._keyed:
                reconciler.replay()
        self._update_synced()

    def _update_synced(self) -> None:
        if self._pool.pool is not None and self._pods.listed and self.discovered.is_set():
            self.synced.set()
        else:
            self.synced.clear()

    async def _discover(self) -> None:
        """Find which optional CRDs are served (retrying while the API server is away)."""
        group_versions = sorted({k.group_version for kinds in OPTIONAL_KINDS.values() for k in kinds})
        if self._pool_group == V1ALPHA2_GROUP:
            group_versions.append(INFERENCE_MODEL.group_version)
        rng = random.Random()
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(self._settings.request_timeout):
                    served = {gv: await served_kinds(self._api, gv) for gv in dict.fromkeys(group_versions)}
                break
            except (KubeError, TimeoutError) as e:
                delay = self._settings.backoff.delay(attempt, rng)
                attempt += 1
                log.warning("discovery failed; retrying", extra={"error": str(e), "retry_in": round(delay, 3)})
                await self._settings.clock.sleep(delay)
        ds, pool = self._datastore, {"pool_name": self._pool_name, "pool_group": self._pool_group}
        objective_kinds, rewrite_kinds = OPTIONAL_KINDS["InferenceObjective"], OPTIONAL_KINDS["InferenceModelRewrite"]
        objectives = GroupMerge[ObjectiveSpec](
            objective_kinds,
            Sink(ds.set_objective, ds.remove_objective),
            on_shadowed=self._shadow_gauge(objective_kinds),
        )
        rewrites = GroupMerge[RewriteSpec](
            rewrite_kinds, Sink(ds.set_rewrite, ds.remove_rewrite), on_shadowed=self._shadow_gauge(rewrite_kinds)
        )
        winning_objective, legacy_objective = objective_kinds
        winning_rewrite, legacy_rewrite = rewrite_kinds
        optional: list[tuple[ResourceKind, KeyedReconciler[Any]]] = [
            (winning_objective, objective_reconciler(objectives.winning, winning_objective, **pool)),
            (legacy_objective, objective_reconciler(objectives.legacy, legacy_objective, **pool)),
            (winning_rewrite, rewrite_reconciler(rewrites.winning, winning_rewrite, **pool)),
            (legacy_rewrite, rewrite_reconciler(rewrites.legacy, legacy_rewrite, **pool)),
        ]
        if self._pool_group == V1ALPHA2_GROUP:
            optional.append((INFERENCE_MODEL, model_reconciler(self._datastore, pool_name=self._pool_name)))
        started: list[Informer] = []
        for kind, reconciler in optional:
            if kind.kind not in served[kind.group_version]:
                log.info(
                    "kind not served; not watching it", extra={"kind": kind.kind, "group_version": kind.group_version}
                )
                continue
            informer = self._informer(kind, reconciler)
            self._keyed.append(reconciler)
            self._informers.append(informer)
            started.append(informer)
            informer.start()
        for name, kinds in OPTIONAL_KINDS.items():
            if all(k.kind in served[k.group_version] for k in kinds):
                log.info(
                    "kind served in both API groups; watching both, the first group wins a name both hold",
                    extra={"kind": name, "groups": [k.group for k in kinds]},
                )
        await asyncio.gather(*(informer.synced.wait() for informer in started))
        self.discovered.set()
        self._update_synced()

    def _shadow_gauge(self, kinds: tuple[ResourceKind, ResourceKind]) -> Callable[[int], None] | None:
        """Sets ``epp_api_group_shadowed_objects`` for this pool and kind."""
        if self._metrics is None:
            return None
        return self._metrics.series(KubeSeries).shadowed_objects.labels(self._pool_name, kinds[0].kind).set
