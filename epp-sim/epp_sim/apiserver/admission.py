"""Per-write object rules that need no store state: body checks, admission, subresource views.

``admit`` is the real server's admission chain for one object: schema defaults, pruning of
unknown fields (CRDs) or strict-decoding errors (``fieldValidation=Strict``), schema and
metadata validation, then the kind's own ``prepare`` hook; failures are 422 Invalid with causes.
``scale_of`` is the ``autoscaling/v1 Scale`` view of a scalable object.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar, cast

from epp.labels import selector_from_object
from epp_sim.apiserver.errors import ApiError, conflict, invalid, not_found
from epp_sim.apiserver.kinds import Obj, ResourceType
from epp_sim.apiserver.schema import apply_defaults, prune, validate

__all__ = [
    "SUBDOMAIN",
    "SUBDOMAIN_RULE",
    "SYSTEM_META",
    "admit",
    "check_rv",
    "copy_json",
    "fresh",
    "path_get",
    "path_segment_problems",
    "path_set",
    "same",
    "scale_of",
    "spec_part",
    "without_system_meta",
]

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SUBDOMAIN_RULE = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink")
"""Metadata only the server writes; updates cannot change it."""
T = TypeVar("T")


def copy_json(value: T) -> T:
    """A deep copy of a JSON tree (several times faster than ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return cast(T, {k: copy_json(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [copy_json(v) for v in value])
    return value


def fresh(rt: ResourceType, obj: Obj) -> Obj:
    """A private copy of a request body with apiVersion/kind checked (filled in when absent)."""
    if not isinstance(obj, dict):
        raise ApiError(400, "BadRequest", "the body must be a JSON object")
    new: Obj = copy_json(obj)
    new.setdefault("apiVersion", rt.api_version())
    new.setdefault("kind", rt.kind)
    if new["kind"] != rt.kind or new["apiVersion"] not in [rt.api_version(v) for v in rt.versions]:
        raise ApiError(
            400,
            "BadRequest",
            f"the API version in the data ({new['apiVersion']}) and kind "
            f"({new['kind']}) do not match the resource {rt.qualified()}",
        )
    if not isinstance(new.setdefault("metadata", {}), dict):
        raise ApiError(400, "BadRequest", "metadata must be an object")
    return new


def check_rv(rt: ResourceType, old: Obj, new: Obj) -> None:
    """409 Conflict when ``new`` names a resourceVersion other than the stored one."""
    rv = (new.get("metadata") or {}).get("resourceVersion")
    if rv and str(rv) != old["metadata"]["resourceVersion"]:
        raise conflict(
            rt.plural,
            rt.group,
            old["metadata"]["name"],
            "the object has been modified; please apply your changes to the latest version and try again",
        )


def admit(rt: ResourceType, new: Obj, old: Obj | None, *, strict: bool) -> None:
    """Defaults, pruning (or strict unknown-field errors), schema and kind validation."""
    version = str(new["apiVersion"]).rpartition("/")[2]
    schema = rt.schemas.get(version) or rt.schemas[rt.storage_version]
    apply_defaults(schema, new)
    unknown = prune(schema, new, remove=not strict and not rt.builtin)
    if strict and unknown:
        raise ApiError(
            400,
            "BadRequest",
            f'{rt.kind} in version "{version}" cannot be handled as a '
            f"{rt.kind}: strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown),
        )
    meta = new["metadata"]
    name = str(meta.get("name", ""))
    causes = validate(schema, new)
    if rt.path_segment_names:
        causes += [
            ("metadata.name", "FieldValueInvalid", f"Invalid value: {name!r}: {p}") for p in path_segment_problems(name)
        ]
    elif not SUBDOMAIN.match(name) or len(name) > 253:
        causes.append(("metadata.name", "FieldValueInvalid", f"Invalid value: {name!r}: {SUBDOMAIN_RULE}"))
    for field in ("labels", "annotations"):
        if not isinstance(meta.get(field) or {}, dict) or not all(
            isinstance(v, str) for v in (meta.get(field) or {}).values()
        ):
            causes.append((f"metadata.{field}", "FieldValueTypeInvalid", "Invalid value: values must be strings"))
    if not causes and rt.prepare is not None:
        causes = rt.prepare(new, old)
    if causes:
        raise invalid(rt.kind, rt.group, name, causes)
    new["apiVersion"] = rt.api_version()


def path_segment_problems(name: str) -> list[str]:
    """Why ``name`` is not a valid URL path segment (the rule for RBAC names such as ``system:auth-delegator``)."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


def scale_of(rt: ResourceType, o: Obj) -> Obj:
    """The ``autoscaling/v1 Scale`` view of a scalable object."""
    if rt.scale is None:
        raise not_found(f"{rt.plural}/scale", rt.group, o["metadata"]["name"])
    meta = o["metadata"]
    selector = ""
    if rt.scale.selector_from_spec:
        selector = str(selector_from_object((o.get("spec") or {}).get("selector")))
    elif rt.scale.label_selector_path:
        selector = str(path_get(o, rt.scale.label_selector_path) or "")
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
        },
        "spec": {"replicas": int(path_get(o, rt.scale.spec_replicas_path) or 0)},
        "status": {"replicas": int(path_get(o, rt.scale.status_replicas_path) or 0), "selector": selector},
    }


def spec_part(rt: ResourceType, o: Obj) -> Obj:
    """What generation tracks: everything but metadata (and status when it is a subresource)."""
    skip = ("metadata", "status") if rt.status_subresource else ("metadata",)
    return {k: v for k, v in o.items() if k not in skip and k not in ("apiVersion", "kind")}


def same(a: Obj, b: Obj) -> bool:
    """Equal apart from managedFields timestamps: such a write is a no-op (no new resourceVersion)."""

    def strip(o: Obj) -> Obj:
        return {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "managedFields"}}

    return strip(a) == strip(b) and [m.get("fieldsV1") for m in a["metadata"].get("managedFields") or []] == [
        m.get("fieldsV1") for m in b["metadata"].get("managedFields") or []
    ]


def without_system_meta(o: Obj) -> Obj:
    out = dict(o)
    out["metadata"] = {
        k: v for k, v in o["metadata"].items() if k not in (*SYSTEM_META, "resourceVersion", "managedFields")
    }
    return out


def path_get(o: Obj, path: str) -> Any:
    cur: Any = o
    for part in path.strip(".").split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def path_set(o: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    cur = o
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = value
