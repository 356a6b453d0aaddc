"""Protobuf table: ``rbac.authorization.k8s.io/v1`` roles and bindings (``kubectl create role|rolebinding|…``)."""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

_GROUP = "rbac.authorization.k8s.io/v1"
_BINDING = "metadata=1:ObjectMeta subjects=2:[Subject] roleRef=3:RoleRef"

PART = Part(
    messages={
        "Role": "metadata=1:ObjectMeta rules=2:[PolicyRule]",
        "ClusterRole": "metadata=1:ObjectMeta rules=2:[PolicyRule] aggregationRule=3:AggregationRule",
        "PolicyRule": """verbs=1:[string] apiGroups=2:[string] resources=3:[string] resourceNames=4:[string]
            nonResourceURLs=5:[string]""",
        "AggregationRule": "clusterRoleSelectors=1:[LabelSelector]",
        "RoleBinding": _BINDING,
        "ClusterRoleBinding": _BINDING,
        "Subject": "kind=1? apiGroup=2 name=3? namespace=4",
        "RoleRef": "apiGroup=1? kind=2? name=3?",
    },
    kinds=tuple((_GROUP, kind) for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")),
)
