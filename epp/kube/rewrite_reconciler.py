"""InferenceModelRewrite objects of our pool → the store.

Filtered on ``spec.poolRef`` name and group; one reconciler per API group serving the kind,
each writing through its side of a :class:`~epp.kube.group_merge.GroupMerge`. An update
replaces the object's rules as a whole (``set_rewrite`` with the new spec), so old rules never
linger; precedence between objects (exact before generic, oldest first) is applied when a
request is routed, not here.
"""

from __future__ import annotations

from functools import partial

from epp.datastore.types import RewriteSpec
from epp.kube.group_merge import Sink
from epp.kube.keyed import KeyedReconciler
from epp.kube.resources import ResourceKind
from epp.kube.translate import rewrite_spec

__all__ = ["rewrite_reconciler"]


def rewrite_reconciler(
    sink: Sink[RewriteSpec], kind: ResourceKind, *, pool_name: str, pool_group: str
) -> KeyedReconciler[RewriteSpec]:
    """Informer handler for the InferenceModelRewrites of our pool in ``kind``'s group."""
    return KeyedReconciler(
        kind=kind.qualified,
        translate=partial(rewrite_spec, pool_name=pool_name, pool_group=pool_group),
        store=sink.store,
        remove=sink.remove,
    )
