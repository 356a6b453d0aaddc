"""InferenceObjective (priority by object name) and v1alpha2 InferenceModel → the store.

Objectives are kept by object name (the ``x-gateway-inference-objective`` header selects one)
and filtered on ``spec.poolRef`` name and group. InferenceModels (the v0.3 API, used with
v1alpha2 pools) are filtered on ``spec.poolRef.name`` only, as upstream; which of several models
with the same ``modelName`` wins (the oldest) is the store's rule.
"""

from __future__ import annotations

from functools import partial

from epp.datastore.types import DatastoreWriter, ModelSpec, ObjectiveSpec
from epp.kube.keyed import KeyedReconciler
from epp.kube.translate import model_spec, objective_spec

__all__ = ["model_reconciler", "objective_reconciler"]


def objective_reconciler(
    datastore: DatastoreWriter, *, pool_name: str, pool_group: str
) -> KeyedReconciler[ObjectiveSpec]:
    """Informer handler for InferenceObjectives of our pool."""
    return KeyedReconciler(
        kind="InferenceObjective",
        translate=partial(objective_spec, pool_name=pool_name, pool_group=pool_group),
        store=datastore.set_objective,
        remove=datastore.remove_objective,
    )


def model_reconciler(datastore: DatastoreWriter, *, pool_name: str) -> KeyedReconciler[ModelSpec]:
    """Informer handler for v1alpha2 InferenceModels of our pool."""
    return KeyedReconciler(
        kind="InferenceModel",
        translate=partial(model_spec, pool_name=pool_name),
        store=datastore.set_model,
        remove=datastore.remove_model,
    )
