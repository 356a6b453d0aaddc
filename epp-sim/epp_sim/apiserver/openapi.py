"""OpenAPI documents generated from the served resource types (built-in and CRD schemas).

``/openapi/v3`` lists one document per group-version (``serverRelativeURL`` with a content hash,
which kubectl uses as its cache key); each document has the object schemas (tagged with
``x-kubernetes-group-version-kind``) and the paths with their operations. PATCH operations
declare the ``fieldValidation`` query parameter, so kubectl validates server-side (it sends
``fieldValidation=Strict``). ``/openapi/v2`` is the same content as one Swagger 2.0 document.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from epp_sim.apiserver.discovery import version_info
from epp_sim.apiserver.kinds import KindRegistry, Obj, ResourceType

__all__ = ["OpenApi"]

_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)

_WRITE_QUERY = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _gvk(rt: ResourceType, version: str, kind: str | None = None) -> list[Obj]:
    return [{"group": rt.group, "version": version, "kind": kind or rt.kind}]


def _name(rt: ResourceType, version: str) -> str:
    """The component name: Kubernetes' own for built-ins, reversed-group.version.Kind for CRDs."""
    if rt.builtin:
        return rt.openapi_name
    return f"{'.'.join(reversed(rt.group.split('.')))}.{version}.{rt.kind}"


def _param(name: str, where: str, *, required: bool = False, typ: str = "string") -> Obj:
    return {"name": name, "in": where, "required": required, "schema": {"type": typ}}


def _operation(
    rt: ResourceType,
    version: str,
    action: str,
    ref: str,
    *,
    kind: str | None = None,
    query: tuple[str, ...] = (),
    body: tuple[str, ...] = (),
) -> Obj:
    op: Obj = {
        "operationId": f"{action}{rt.kind}",
        "parameters": [_param(q, "query") for q in query],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt, version, kind)[0],
    }
    if body:
        op["requestBody"] = {"content": {t: {"schema": {"$ref": ref}} for t in body}, "required": True}
    return op


class OpenApi:
    """Builds and caches the documents; rebuilt when the registry's revision changes."""

    def __init__(self, kinds: KindRegistry) -> None:
        self._kinds = kinds
        self._revision = -1
        self._docs: dict[str, Obj] = {}
        self._hashes: dict[str, str] = {}

    def _refresh(self) -> None:
        if self._revision == self._kinds.revision:
            return
        docs: dict[str, Obj] = {}
        for rt in self._kinds:
            for version in rt.versions:
                doc = docs.setdefault(
                    _gv_path(rt.group, version),
                    {
                        "openapi": "3.0.0",
                        "info": {"title": "Kubernetes", "version": version_info()["gitVersion"]},
                        "paths": {},
                        "components": {"schemas": {}},
                    },
                )
                self._add(doc, rt, version)
        self._docs = docs
        self._hashes = {
            k: hashlib.sha512(json.dumps(d, sort_keys=True).encode()).hexdigest()[:64].upper() for k, d in docs.items()
        }
        self._revision = self._kinds.revision

    def _add(self, doc: Obj, rt: ResourceType, version: str) -> None:
        schemas = doc["components"]["schemas"]
        name = _name(rt, version)
        schema = dict(rt.schemas[version])
        schema["x-kubernetes-group-version-kind"] = _gvk(rt, version)
        schemas[name] = schema
        if rt.review:  # create-only (cluster-scoped): one POST, no list kind
            ref = f"#/components/schemas/{name}"
            post = _operation(rt, version, "post", ref, query=_WRITE_QUERY, body=("application/json",))
            doc["paths"][f"/{_gv_path(rt.group, version)}/{rt.plural}"] = {"post": post}
            return
        schemas[f"{name}List"] = {
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{name}"}},
            },
            "x-kubernetes-group-version-kind": _gvk(rt, version, rt.list_kind),
        }
        ref, list_ref = f"#/components/schemas/{name}", f"#/components/schemas/{name}List"
        prefix = "/" + _gv_path(rt.group, version) + ("/namespaces/{namespace}" if rt.namespaced else "")
        write_q = _WRITE_QUERY
        patch_q = (*write_q, "force")
        list_q = (
            "labelSelector",
            "fieldSelector",
            "limit",
            "continue",
            "resourceVersion",
            "timeoutSeconds",
            "watch",
            "allowWatchBookmarks",
        )
        ns_param = [_param("namespace", "path", required=True)] if rt.namespaced else []
        name_param = [_param("name", "path", required=True)]
        doc["paths"][f"{prefix}/{rt.plural}"] = {
            "get": _operation(rt, version, "list", list_ref, kind=rt.list_kind, query=list_q),
            "post": _operation(rt, version, "post", ref, query=write_q, body=("application/json",)),
            "delete": _operation(rt, version, "deletecollection", ref, query=list_q),
            "parameters": ns_param,
        }
        doc["paths"][f"{prefix}/{rt.plural}/{{name}}"] = {
            "get": _operation(rt, version, "get", ref),
            "put": _operation(rt, version, "put", ref, query=write_q, body=("application/json",)),
            "patch": _operation(
                rt,
                version,
                "patch",
                ref,
                query=patch_q,
                body=_PATCH_TYPES if rt.builtin else tuple(t for t in _PATCH_TYPES if "strategic" not in t),
            ),
            "delete": _operation(rt, version, "delete", ref, query=("gracePeriodSeconds", "propagationPolicy")),
            "parameters": ns_param + name_param,
        }
        if rt.status_subresource:
            doc["paths"][f"{prefix}/{rt.plural}/{{name}}/status"] = {
                "get": _operation(rt, version, "get", ref),
                "put": _operation(rt, version, "put", ref, query=write_q, body=("application/json",)),
                "patch": _operation(rt, version, "patch", ref, query=patch_q, body=_PATCH_TYPES),
                "parameters": ns_param + name_param,
            }

    def root(self) -> Obj:
        """``/openapi/v3``: every group-version document with its hashed URL."""
        self._refresh()
        return {"paths": {k: {"serverRelativeURL": f"/openapi/v3/{k}?hash={self._hashes[k]}"} for k in self._docs}}

    def document(self, gv_path: str) -> tuple[Obj, str] | None:
        """``/openapi/v3/<gv_path>`` and its hash, or None."""
        self._refresh()
        doc = self._docs.get(gv_path)
        return None if doc is None else (doc, self._hashes[gv_path])

    def swagger(self) -> Obj:
        """``/openapi/v2``: the definitions of every group-version in one Swagger 2.0 document (no paths)."""
        self._refresh()
        definitions: dict[str, Any] = {}
        for doc in self._docs.values():
            definitions.update(doc["components"]["schemas"])
        text = json.dumps(definitions).replace("#/components/schemas/", "#/definitions/")
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": version_info()["gitVersion"]},
            "paths": {},
            "definitions": json.loads(text),
        }
