"""What a served resource is (``ResourceType``) and the registry of served resources.

Built-in kinds and CRD-defined kinds share one description, so discovery, OpenAPI, storage,
tables and watches treat them alike. The registry resolves the names clients and in-process
callers use: a kind (``Pod``), a plural (``pods``), a short name (``po``), optionally qualified
by group (``deployments.apps``, ``Deployment.apps``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from epp_sim.apiserver.errors import ApiError

__all__ = ["Column", "KindRegistry", "Obj", "ResourceType", "ScaleSpec"]

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""


@dataclass(frozen=True, slots=True)
class Column:
    """One Table column: ``json_path`` (``.status.phase``) or a computed cell from ``ResourceType.row``."""

    name: str
    type: str = "string"
    json_path: str = ""
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True, slots=True)
class ScaleSpec:
    """Where the ``scale`` subresource reads and writes replicas (CRD ``subresources.scale`` paths)."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = None
    selector_from_spec: bool = False
    """Built-in workloads: the selector string comes from the ``spec.selector`` LabelSelector."""


@dataclass(frozen=True)
class ResourceType:
    """A served resource: names, scope, versions and their schemas, subresources, table columns."""

    group: str
    versions: tuple[str, ...]
    """Served versions; the first is the storage (and preferred) version."""
    kind: str
    plural: str
    singular: str
    namespaced: bool
    schemas: Mapping[str, Obj]
    """openAPIV3Schema of the whole object, per version."""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    scale: ScaleSpec | None = None
    columns: tuple[Column, ...] = ()
    """Extra Table columns after NAME (AGE is always added)."""
    row: Callable[[Obj, float], list[Any]] | None = None
    """Computes the extra cells of a built-in kind from (object, now)."""
    builtin: bool = True
    """Built-in kinds keep unknown fields (reported under fieldValidation=Strict); CRDs prune them."""
    tracks_generation: bool = True
    prepare: Callable[[Obj, Obj | None], list[tuple[str, str, str]]] | None = None
    """Kind-specific defaulting and validation on write: (new, old) → invalid causes."""
    openapi_name: str = ""
    path_segment_names: bool = False
    """Names need only be valid URL path segments (RBAC: ``system:auth-delegator``), not DNS subdomains."""
    review: bool = False
    """A review (TokenReview, SubjectAccessReview): only ``create``, answered from the request, never stored."""
    token_request: bool = False
    """Has the ``token`` subresource (ServiceAccounts): ``create`` mints a token (TokenRequest)."""

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        """``(group, plural)``: identifies the resource across its versions."""
        return (self.group, self.plural)

    def api_version(self, version: str | None = None) -> str:
        v = version or self.storage_version
        return f"{self.group}/{v}" if self.group else v

    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


class KindRegistry:
    """Served resources by ``(group, plural)``; bumps ``revision`` on every change (OpenAPI hashes)."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str], ResourceType] = {}
        self.revision = 0

    def add(self, rt: ResourceType) -> None:
        self._types[rt.key] = rt
        self.revision += 1

    def remove(self, key: tuple[str, str]) -> ResourceType | None:
        self.revision += 1
        return self._types.pop(key, None)

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def get(self, key: tuple[str, str]) -> ResourceType | None:
        return self._types.get(key)

    def for_path(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/<group>/<version>/<plural>``, or None."""
        rt = self._types.get((group, plural))
        return rt if rt is not None and version in rt.versions else None

    def groups(self) -> dict[str, list[str]]:
        """Group name → served versions (preferred first), in registration order."""
        out: dict[str, list[str]] = {}
        for rt in self._types.values():
            versions = out.setdefault(rt.group, [])
            for v in rt.versions:
                if v not in versions:
                    versions.append(v)
        return out

    def resolve(self, ref: str) -> ResourceType:
        """Find a type by kind, plural, singular or short name, optionally ``.group``-qualified."""
        name, _, group = ref.partition(".")
        matches = [rt for rt in self._types.values() if _named(rt, name) and (not group or rt.group == group)]
        if not matches:
            matches = [rt for rt in self._types.values() if _named(rt, ref) and rt.group == ""]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ApiError(404, "NotFound", f"the server doesn't have a resource type {ref!r}")
        names = ", ".join(rt.qualified() for rt in matches)
        raise ApiError(400, "BadRequest", f"resource type {ref!r} is ambiguous: {names}")


def _named(rt: ResourceType, name: str) -> bool:
    low = name.lower()
    return low in (rt.kind.lower(), rt.plural, rt.singular) or low in rt.short_names
