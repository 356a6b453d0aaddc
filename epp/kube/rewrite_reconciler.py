"""InferenceModelRewrite objects of our pool → the store.

Filtered on ``spec.poolRef`` name and group. An update replaces the object's rules as a whole
(``set_rewrite`` with the new spec), so old rules never linger; precedence between objects
(exact before generic, oldest first) is applied when a request is routed, not here.
"""

from __future__ import annotations

from functools import partial

from epp.datastore.types import DatastoreWriter, RewriteSpec
from epp.kube.keyed import KeyedReconciler
from epp.kube.translate import rewrite_spec

__all__ = ["rewrite_reconciler"]


def rewrite_reconciler(datastore: DatastoreWriter, *, pool_name: str, pool_group: str) -> KeyedReconciler[RewriteSpec]:
    """Informer handler for InferenceModelRewrites of our pool."""
    return KeyedReconciler(
        kind="InferenceModelRewrite",
        translate=partial(rewrite_spec, pool_name=pool_name, pool_group=pool_group),
        store=datastore.set_rewrite,
        remove=datastore.remove_rewrite,
    )
