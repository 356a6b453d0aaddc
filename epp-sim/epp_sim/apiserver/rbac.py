"""What the real server checks on RBAC writes (``rbac.authorization.k8s.io/v1``), beyond the schema.

Roles and ClusterRoles: every rule names verbs, and either resources with API groups or (only in
a ClusterRole) non-resource URLs, never both. RoleBindings and ClusterRoleBindings: the roleRef
names a Role or ClusterRole (a ClusterRoleBinding only a ClusterRole) of the RBAC group and
cannot change once created; subjects are ServiceAccounts (namespaced in a ClusterRoleBinding),
Users or Groups, the latter two defaulting to the RBAC group as ``rbac/v1`` defaulting does.
Messages follow ``pkg/apis/rbac/validation``.
"""

from __future__ import annotations

import json
from typing import Any

from epp_sim.apiserver.admission import SUBDOMAIN, SUBDOMAIN_RULE, path_segment_problems
from epp_sim.apiserver.builtin_schemas import RBAC_GROUP
from epp_sim.apiserver.kinds import Obj

__all__ = ["prepare_cluster_role", "prepare_cluster_role_binding", "prepare_role", "prepare_role_binding"]

Cause = tuple[str, str, str]
_SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


def _show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _not_supported(field: str, value: Any, allowed: tuple[str, ...]) -> Cause:
    supported = ", ".join(f'"{a}"' for a in allowed)
    return (field, "FieldValueNotSupported", f"Unsupported value: {_show(value)}: supported values: {supported}")


def _rule_causes(rules: list[Obj], *, namespaced: bool) -> list[Cause]:
    causes: list[Cause] = []
    for i, rule in enumerate(rules):
        at = f"rules[{i}]"
        if not rule.get("verbs"):
            causes.append(
                (f"{at}.verbs", "FieldValueRequired", "Required value: verbs must contain at least one value")
            )
        urls = rule.get("nonResourceURLs")
        if urls:
            if namespaced:
                causes.append(
                    (
                        f"{at}.nonResourceURLs",
                        "FieldValueInvalid",
                        f"Invalid value: {_show(urls)}: namespaced rules cannot apply to non-resource URLs",
                    )
                )
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(
                    (
                        f"{at}.nonResourceURLs",
                        "FieldValueInvalid",
                        f"Invalid value: {_show(urls)}: rules cannot apply to both regular resources and "
                        "non-resource URLs",
                    )
                )
            continue
        if not rule.get("apiGroups"):
            causes.append(
                (
                    f"{at}.apiGroups",
                    "FieldValueRequired",
                    "Required value: resource rules must supply at least one api group",
                )
            )
        if not rule.get("resources"):
            causes.append(
                (
                    f"{at}.resources",
                    "FieldValueRequired",
                    "Required value: resource rules must supply at least one resource",
                )
            )
    return causes


def prepare_role(new: Obj, old: Obj | None) -> list[Cause]:
    return _rule_causes(new.get("rules") or [], namespaced=True)


def prepare_cluster_role(new: Obj, old: Obj | None) -> list[Cause]:
    return _rule_causes(new.get("rules") or [], namespaced=False)


def _subject_causes(subject: Obj, at: str, *, namespaced: bool) -> list[Cause]:
    """Defaults ``apiGroup`` by kind (in place), then checks the subject."""
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind in ("User", "Group") and not subject.get("apiGroup"):
        subject["apiGroup"] = RBAC_GROUP
    causes: list[Cause] = []
    if kind == "ServiceAccount":
        if name and not SUBDOMAIN.match(name):
            causes.append((f"{at}.name", "FieldValueInvalid", f"Invalid value: {_show(name)}: {SUBDOMAIN_RULE}"))
        if subject.get("apiGroup"):
            causes.append(_not_supported(f"{at}.apiGroup", subject["apiGroup"], ("",)))
        if not namespaced and not subject.get("namespace"):
            causes.append((f"{at}.namespace", "FieldValueRequired", "Required value"))
    elif kind in ("User", "Group"):
        if subject["apiGroup"] != RBAC_GROUP:
            causes.append(_not_supported(f"{at}.apiGroup", subject["apiGroup"], (RBAC_GROUP,)))
    else:
        causes.append(_not_supported(f"{at}.kind", kind, _SUBJECT_KINDS))
    return causes


def _binding_causes(new: Obj, old: Obj | None, *, role_kinds: tuple[str, ...], namespaced: bool) -> list[Cause]:
    ref: Obj = new.get("roleRef") or {}
    causes: list[Cause] = []
    if ref.get("apiGroup") != RBAC_GROUP:
        causes.append(_not_supported("roleRef.apiGroup", ref.get("apiGroup"), (RBAC_GROUP,)))
    if ref.get("kind") not in role_kinds:
        causes.append(_not_supported("roleRef.kind", ref.get("kind"), role_kinds))
    name = str(ref.get("name") or "")
    if not name:
        causes.append(("roleRef.name", "FieldValueRequired", "Required value"))
    causes += [
        ("roleRef.name", "FieldValueInvalid", f"Invalid value: {_show(name)}: {problem}")
        for problem in path_segment_problems(name)
    ]
    for i, subject in enumerate(new.get("subjects") or []):
        causes += _subject_causes(subject, f"subjects[{i}]", namespaced=namespaced)
    if old is not None and old.get("roleRef") != ref:
        causes.append(("roleRef", "FieldValueInvalid", f"Invalid value: {_show(ref)}: cannot change roleRef"))
    return causes


def prepare_role_binding(new: Obj, old: Obj | None) -> list[Cause]:
    return _binding_causes(new, old, role_kinds=("Role", "ClusterRole"), namespaced=True)


def prepare_cluster_role_binding(new: Obj, old: Obj | None) -> list[Cause]:
    return _binding_causes(new, old, role_kinds=("ClusterRole",), namespaced=False)
