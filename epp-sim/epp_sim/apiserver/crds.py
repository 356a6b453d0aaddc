"""CustomResourceDefinitions: validating them and turning them into served ``ResourceType``s.

A CRD is stored like any object; the store calls ``resource_type`` after each CRD write and
registers the result, so the kind is served (every served version, the storage version first)
with its schema, scope, status/scale subresources and printer columns; deleting the CRD
unregisters it. Defaults and pruning then follow the schema (``epp_sim.apiserver.schema``).
"""

from __future__ import annotations

import re
from typing import Any

from epp_sim.apiserver.kinds import Column, Obj, ResourceType, ScaleSpec

__all__ = ["prepare_crd", "resource_type"]

Cause = tuple[str, str, str]
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def prepare_crd(new: Obj, old: Obj | None) -> list[Cause]:
    """Validate names and versions; write the status a healthy server reports (Established)."""
    spec = new.get("spec") or {}
    names = spec.get("names") or {}
    group, plural = str(spec.get("group", "")), str(names.get("plural", ""))
    causes: list[Cause] = []
    if (new.get("metadata") or {}).get("name") != f"{plural}.{group}":
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: must be spec.names.plural+"."+spec.group ({plural}.{group})',
            )
        )
    if plural and not _DNS_LABEL.match(plural):
        causes.append(("spec.names.plural", "FieldValueInvalid", f"Invalid value: {plural!r}: must be lowercase"))
    if "." not in group:
        causes.append(
            ("spec.group", "FieldValueInvalid", f"Invalid value: {group!r}: should be a domain with at least one dot")
        )
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    if sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            (
                "spec.versions",
                "FieldValueInvalid",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for i, v in enumerate(versions):
        if not ((v.get("schema") or {}).get("openAPIV3Schema")):
            causes.append(
                (
                    f"spec.versions[{i}].schema.openAPIV3Schema",
                    "FieldValueRequired",
                    "Required value: schemas are required",
                )
            )
    if old is not None:
        old_spec = old.get("spec") or {}
        if old_spec.get("group") != group or old_spec.get("scope") != spec.get("scope"):
            causes.append(("spec", "FieldValueInvalid", "Invalid value: group and scope are immutable"))
    if causes:
        return causes
    accepted = dict(names)
    accepted.setdefault("singular", str(names.get("kind", "")).lower())
    accepted.setdefault("listKind", f"{names.get('kind')}List")
    stored = list((old or {}).get("status", {}).get("storedVersions") or [])
    storage = next(str(v["name"]) for v in versions if v.get("storage"))
    if storage not in stored:
        stored.append(storage)
    now = (new.get("metadata") or {}).get("creationTimestamp")
    new["status"] = {
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
    }
    return []


def resource_type(crd: Obj) -> ResourceType:
    """The served description of a valid CRD (``prepare_crd`` returned no causes)."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served")]
    served.sort(key=lambda v: not v.get("storage"))
    storage = next((v for v in spec["versions"] if v.get("storage")), served[0] if served else spec["versions"][0])
    subresources: dict[str, Any] = {}
    for v in served:
        subresources.update(v.get("subresources") or {})
    scale = subresources.get("scale")
    columns = tuple(
        Column(
            str(c.get("name")),
            str(c.get("type", "string")),
            str(c.get("jsonPath", "")),
            str(c.get("description", "")),
            int(c.get("priority", 0)),
            str(c.get("format", "")),
        )
        for c in storage.get("additionalPrinterColumns") or []
    )
    if not columns:
        columns = (Column("Age", "date", ".metadata.creationTimestamp"),)
    return ResourceType(
        group=spec["group"],
        versions=tuple(str(v["name"]) for v in served),
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        namespaced=spec["scope"] == "Namespaced",
        schemas={str(v["name"]): v["schema"]["openAPIV3Schema"] for v in served},
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        status_subresource="status" in subresources,
        scale=ScaleSpec(
            spec_replicas_path=scale.get("specReplicasPath", ".spec.replicas"),
            status_replicas_path=scale.get("statusReplicasPath", ".status.replicas"),
            label_selector_path=scale.get("labelSelectorPath"),
        )
        if isinstance(scale, dict)
        else None,
        columns=columns,
        builtin=False,
    )
