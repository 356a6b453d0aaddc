"""InferenceObjective (priority by object name) and v1alpha2 InferenceModel → the store.

Objectives are kept by object name (the ``x-llm-d-inference-objective`` header, or its older
``x-gateway-…`` spelling, selects one) and filtered on ``spec.poolRef`` name and group; one
reconciler per API group serving them, each writing through its side of a
:class:`~epp.kube.group_merge.GroupMerge`. InferenceModels (the v0.3 API, used with
v1alpha2 pools) are filtered on ``spec.poolRef.name`` only, as upstream; which of several models
with the same ``modelName`` wins (the oldest) is the store's rule.
"""

from __future__ import annotations

from functools import partial

from epp.datastore.types import DatastoreWriter, ModelSpec, ObjectiveSpec
from epp.kube.group_merge import Sink
from epp.kube.keyed import KeyedReconciler
from epp.kube.resources import ResourceKind
from epp.kube.translate import model_spec, objective_spec

__all__ = ["model_reconciler", "objective_reconciler"]


def objective_reconciler(
    sink: Sink[ObjectiveSpec], kind: ResourceKind, *, pool_name: str, pool_group: str
) -> KeyedReconciler[ObjectiveSpec]:
    """Informer handler for the InferenceObjectives of our pool in ``kind``'s group."""
    return KeyedReconciler(
        kind=kind.qualified,
        translate=partial(objective_spec, pool_name=pool_name, pool_group=pool_group),
        store=sink.store,
        remove=sink.remove,
    )


def model_reconciler(datastore: DatastoreWriter, *, pool_name: str) -> KeyedReconciler[ModelSpec]:
    """Informer handler for v1alpha2 InferenceModels of our pool."""
    return KeyedReconciler(
        kind="InferenceModel",
        translate=partial(model_spec, pool_name=pool_name),
        store=datastore.set_model,
        remove=datastore.remove_model,
    )
