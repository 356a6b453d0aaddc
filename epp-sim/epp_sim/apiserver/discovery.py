"""Legacy discovery documents: ``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/<g>/<v>``.

kubectl, kr8s and the kubernetes client find resources, verbs, scope, short names and
subresources (``pods/status``, ``deployments/scale``, ``serviceaccounts/token``) here. Aggregated
discovery is not served: clients that ask for it accept the legacy ``application/json`` answer.
"""

from __future__ import annotations

from typing import Any

from epp_sim.apiserver.kinds import KindRegistry, Obj, ResourceType

__all__ = ["SERVER_VERSION", "api_group_list", "api_versions", "group", "resource_list", "version_info"]

SERVER_VERSION = (1, 35, 0)
"""Reported version: kr8s warns above v1.35."""

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUB_VERBS = ["get", "patch", "update"]


def version_info() -> Obj:
    major, minor, patch = SERVER_VERSION
    return {
        "major": str(major),
        "minor": str(minor),
        "gitVersion": f"v{major}.{minor}.{patch}",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(kinds: KindRegistry) -> Obj:
    groups = [_group(name, versions) for name, versions in kinds.groups().items() if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(kinds: KindRegistry, name: str) -> Obj | None:
    versions = kinds.groups().get(name)
    if not versions or not name:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _entries(rt: ResourceType) -> list[Obj]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": ["create"] if rt.review else _VERBS,
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    out = [main]
    if rt.status_subresource:
        out.append(
            {
                "name": f"{rt.plural}/status",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": _SUB_VERBS,
            }
        )
    if rt.scale is not None:
        out.append(
            {
                "name": f"{rt.plural}/scale",
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": _SUB_VERBS,
            }
        )
    if rt.token_request:
        out.append(
            {
                "name": f"{rt.plural}/token",
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }
        )
    return out


def resource_list(kinds: KindRegistry, group_name: str, version: str) -> Obj | None:
    """The APIResourceList of one group-version, or None when nothing is served there."""
    types = [rt for rt in kinds if rt.group == group_name and version in rt.versions]
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": [entry for rt in types for entry in _entries(rt)],
    }
