"""RBAC evaluation: may this user do this verb on this resource or non-resource URL?

What the real server's RBAC authorizer does (``plugin/pkg/auth/authorizer/rbac`` and
``pkg/registry/rbac/validation``), over the Roles, ClusterRoles and bindings in the store:
ClusterRoleBindings apply everywhere; RoleBindings only to resource requests in their own
namespace, with the rules of the Role or ClusterRole they name. A subject matches a User by name,
a Group by membership, a ServiceAccount by ``system:serviceaccount:<ns>:<name>`` (a RoleBinding's
own namespace when the subject names none). A rule matches on verbs (``*``), API groups (``*``),
resources (``*``, ``pods/log``, ``*/scale``), resource names (any when none are listed) or
non-resource URLs (``*``, exact, or a prefix ending in ``*``). Members of ``system:masters`` may do
everything, as the real server's privileged group.

Not modelled: aggregated ClusterRoles (only their own ``rules`` count) and the bootstrap policy
a real cluster starts with (``system:discovery`` and friends): a fresh fake server grants nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epp_sim.apiserver.kinds import Obj

if TYPE_CHECKING:  # the store imports builtin_kinds, which imports the reviews that use this
    from epp_sim.apiserver.store import Store

__all__ = ["Attributes", "Decision", "authorize"]

_MASTERS = "system:masters"


@dataclass(frozen=True, slots=True)
class Attributes:
    """One request to authorize: who, which verb, and either a resource or a non-resource path."""

    user: str
    groups: tuple[str, ...]
    verb: str
    resource_request: bool
    path: str = ""
    namespace: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """``allowed`` and the reason the real server gives (``RBAC: allowed by ...``, or errors met)."""

    allowed: bool
    reason: str = ""


def _subject_matches(subject: Obj, attrs: Attributes, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "User":
        return attrs.user == name
    if kind == "Group":
        return name in attrs.groups
    if kind == "ServiceAccount":
        namespace = str(subject.get("namespace") or binding_namespace)
        return bool(namespace) and attrs.user == f"system:serviceaccount:{namespace}:{name}"
    return False


def _describe(subject: Obj, binding_namespace: str) -> str:
    name = str(subject.get("name"))
    if subject.get("kind") == "ServiceAccount":
        name = f"{name}/{subject.get('namespace') or binding_namespace}"
    return f'{subject.get("kind")} "{name}"'


def _resource_matches(rule: Obj, attrs: Attributes) -> bool:
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for allowed in rule.get("resources") or []:
        if allowed in ("*", combined):
            return True
        if attrs.subresource and allowed == f"*/{attrs.subresource}":
            return True
    return False


def _url_matches(rule: Obj, path: str) -> bool:
    for allowed in rule.get("nonResourceURLs") or []:
        if allowed in ("*", path):
            return True
        if allowed.endswith("*") and path.startswith(allowed.rstrip("*")):
            return True
    return False


def _rule_allows(rule: Obj, attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    groups = rule.get("apiGroups") or []
    names = rule.get("resourceNames") or []
    return (
        ("*" in groups or attrs.group in groups)
        and _resource_matches(rule, attrs)
        and (not names or attrs.name in names)
    )


class _Policy:
    """The bindings and roles of one store, walked in the real server's order."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.errors: list[str] = []

    def _role_rules(self, ref: Obj, namespace: str) -> list[Obj]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        rt = self._store.type_of(str(kind))
        role = self._store.lookup(rt, name, namespace if kind == "Role" else None)
        if role is None:
            self.errors.append(f'{rt.qualified()} "{name}" not found')
            return []
        return list(role.get("rules") or [])

    def rules_for(self, attrs: Attributes) -> Iterator[tuple[str, Obj]]:
        """``(source, rule)`` for every rule bound to the user; source says which binding granted it."""
        for binding in self._store.select(self._store.type_of("ClusterRoleBinding"), None):
            yield from self._bound(binding, "ClusterRoleBinding", binding["metadata"]["name"], "", attrs)
        if attrs.resource_request and attrs.namespace:
            for binding in self._store.select(self._store.type_of("RoleBinding"), attrs.namespace):
                label = f"{binding['metadata']['name']}/{attrs.namespace}"
                yield from self._bound(binding, "RoleBinding", label, attrs.namespace, attrs)

    def _bound(
        self, binding: Obj, kind: str, label: str, namespace: str, attrs: Attributes
    ) -> Iterator[tuple[str, Obj]]:
        for subject in binding.get("subjects") or []:
            if _subject_matches(subject, attrs, namespace):
                ref = binding.get("roleRef") or {}
                source = f'{kind} "{label}" of {ref.get("kind")} "{ref.get("name")}" to {_describe(subject, namespace)}'
                for rule in self._role_rules(ref, namespace):
                    yield source, rule
                return


def authorize(store: Store, attrs: Attributes) -> Decision:
    """The RBAC decision for ``attrs`` over what ``store`` holds now."""
    if _MASTERS in attrs.groups:
        return Decision(True)
    policy = _Policy(store)
    for source, rule in policy.rules_for(attrs):
        if _rule_allows(rule, attrs):
            return Decision(True, f"RBAC: allowed by {source}")
    if not policy.errors:
        return Decision(False)
    errors = policy.errors[0] if len(policy.errors) == 1 else f"[{', '.join(policy.errors)}]"
    return Decision(False, f"RBAC: {errors}")
