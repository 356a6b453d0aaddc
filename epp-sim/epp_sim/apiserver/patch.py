"""PATCH bodies: JSON merge patch, JSON patch, strategic merge patch, and server-side apply.

Strategic merge and apply read list semantics from the schema: a list with a merge key
(``x-kubernetes-patch-merge-key`` / ``x-kubernetes-list-map-keys``) merges item by item, a
``set`` list unions, any other list is replaced. Strategic-merge directives kubectl sends
(``$patch``, ``$retainKeys``, ``$setElementOrder/…``, ``$deleteFromPrimitiveList/…``) are honoured.
Server-side apply records what each manager applied in ``managedFields`` (FieldsV1) and removes
fields a manager applied before and no longer applies (unless another applier also owns them);
it never reports conflicts.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from epp_sim.apiserver.errors import ApiError

__all__ = [
    "patch_object",
    "MERGE",
    "JSON_PATCH",
    "STRATEGIC",
    "APPLY",
    "apply_fields",
    "json_patch",
    "merge_patch",
    "remove_stale",
    "strategic_merge",
]

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

Schema = dict[str, Any]
FieldSet = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _bad(msg: str) -> ApiError:
    return ApiError(422, "Invalid", msg)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _bad(f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise _bad(f"json patch: path {path!r} does not exist")
    return cur


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _bad(f"json patch: path {path!r} does not exist")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _bad(f"json patch: cannot remove {path!r}: it does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _bad(f"json patch: index {last!r} out of range at {path!r}")
    else:
        raise _bad(f"json patch: cannot add at {path!r}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test; applied in order to a copy."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, "BadRequest", f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            parts = _pointer(path)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                parent = _parent(doc, parts, path)
                parent[int(parts[-1]) if isinstance(parent, list) else parts[-1]] = copy.deepcopy(op.get("value"))
        elif kind in ("move", "copy"):
            value = _remove(doc, op["from"]) if kind == "move" else copy.deepcopy(_get(doc, op["from"]))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise _bad(f"json patch test failed at {path!r}")
        else:
            raise ApiError(400, "BadRequest", f"unknown json patch operation {kind!r}")
    return doc


def _sub(schema: Schema, key: str) -> Schema:
    props = schema.get("properties") or {}
    if key in props:
        return dict(props[key])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else {}


def _list_keys(schema: Schema) -> list[str] | None:
    keys = schema.get("x-kubernetes-list-map-keys")
    if keys:
        return [str(k) for k in keys]
    key = schema.get("x-kubernetes-patch-merge-key")
    return [str(key)] if key else None


def _merges(schema: Schema) -> bool:
    return "merge" in str(schema.get("x-kubernetes-patch-strategy", "")) or schema.get("x-kubernetes-list-type") in (
        "map",
        "set",
    )


def _item_key(item: Any, keys: list[str]) -> tuple[Any, ...]:
    return tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def strategic_merge(original: Any, patch: Any, schema: Schema) -> Any:
    """Apply a strategic merge patch; returns the new value (None when ``$patch: delete``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip(patch)
    result: dict[str, Any] = dict(original) if isinstance(original, dict) else {}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [x for x in result.get(name) or [] if x not in (value or [])]
            continue
        sub = _sub(schema, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and _merges(sub):
            result[key] = _merge_list(result.get(key) or [], value, sub)
        else:
            result[key] = copy.deepcopy(value)
    for name, order in orders.items():
        keys = _list_keys(_sub(schema, name)) or []
        if isinstance(result.get(name), list):
            rank = {_item_key(o, keys) if keys else (o,): i for i, o in enumerate(order)}
            result[name] = sorted(result[name], key=lambda it: rank.get(_item_key(it, keys), len(rank)))
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: list[Any], patch: list[Any], schema: Schema) -> list[Any]:
    keys = _list_keys(schema)
    items = schema.get("items") or {}
    if keys is None:
        out = list(original)
        for x in patch:
            if x not in out:
                out.append(copy.deepcopy(x))
        return out
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and p.get("$patch"))]
    out = [copy.deepcopy(o) for o in original]
    for item in patch:
        k = _item_key(item, keys)
        idx = next((i for i, o in enumerate(out) if _item_key(o, keys) == k), None)
        if isinstance(item, dict) and item.get("$patch") == "delete":
            out = [o for o in out if _item_key(o, keys) != k]
        elif idx is None:
            out.append(_strip(strategic_merge({}, item, items)))
        else:
            out[idx] = strategic_merge(out[idx], item, items)
    return out


def apply_fields(value: Any, schema: Schema, *, root: bool = True) -> FieldSet:
    """The FieldsV1 set of ``value``: ``f:<field>``, ``k:<keys json>`` for map-list items, ``v:`` for sets."""
    out: FieldSet = {}
    if isinstance(value, dict):
        for key, sub_value in value.items():
            if root and key in ("apiVersion", "kind"):
                continue
            if root and key == "metadata" and isinstance(sub_value, dict):
                meta = {
                    k: v
                    for k, v in sub_value.items()
                    if k in ("labels", "annotations", "finalizers", "ownerReferences")
                }
                if meta:
                    out["f:metadata"] = apply_fields(meta, _sub(schema, "metadata"), root=False)
                continue
            sub = _sub(schema, key)
            child = apply_fields(sub_value, sub, root=False)
            out[f"f:{key}"] = {".": {}, **child} if child and isinstance(sub_value, dict) else child
    elif isinstance(value, list) and _merges(schema):
        keys = _list_keys(schema)
        for item in value:
            if keys is None:
                out[f"v:{json.dumps(item, separators=(',', ':'))}"] = {}
            else:
                token = json.dumps({k: item.get(k) for k in keys if isinstance(item, dict)}, separators=(",", ":"))
                out[f"k:{token}"] = {".": {}, **apply_fields(item, schema.get("items") or {}, root=False)}
    return out


def _difference(old: FieldSet, new: FieldSet) -> FieldSet:
    out: FieldSet = {}
    for token, children in old.items():
        if token == ".":
            continue
        if token not in new:
            out[token] = _difference(children, {}) if children else {}
        elif children and new[token]:
            diff = _difference(children, new[token])
            if diff:
                out[token] = diff
    return out


def remove_stale(target: Any, old: FieldSet, new: FieldSet, protected: FieldSet) -> None:
    """Remove from ``target`` the fields in ``old`` but not ``new``, keeping ``protected`` ones."""
    _remove_paths(target, _difference(old, new), protected)


def _remove_paths(target: Any, stale: FieldSet, protected: FieldSet) -> None:
    for token, children in stale.items():
        kind, _, name = token.partition(":")
        guard = protected.get(token)
        if kind == "f" and isinstance(target, dict) and name in target:
            if children:
                _remove_paths(target[name], children, guard or {})
            if guard is None and (not children or target[name] in ({}, [])):
                del target[name]
        elif kind in ("k", "v") and isinstance(target, list):
            wanted = json.loads(name)
            for i, item in enumerate(target):
                hit = (
                    (isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()))
                    if kind == "k"
                    else item == wanted
                )
                if not hit:
                    continue
                if children:
                    _remove_paths(item, children, guard or {})
                if guard is None and (not children or all(k in wanted for k in item)):
                    del target[i]
                break


def server_side_apply(
    live: dict[str, Any], applied: dict[str, Any], entry: dict[str, Any], schema: Schema
) -> dict[str, Any]:
    """Merge ``applied`` into ``live`` (a private copy) as ``entry["manager"]``; record ``entry`` in managedFields.

    Fields this manager applied last time and no longer applies are removed, unless another
    applier owns them too.
    """
    managed = [m for m in live["metadata"].get("managedFields") or [] if isinstance(m, dict)]
    mine = next(
        (
            m
            for m in managed
            if m.get("manager") == entry["manager"]
            and m.get("operation") == "Apply"
            and m.get("subresource") == entry.get("subresource")
        ),
        None,
    )
    merged: dict[str, Any] = strategic_merge(live, applied, schema)
    if mine is not None:
        others: FieldSet = {}
        for m in managed:
            if m is not mine and m.get("operation") == "Apply":
                others = merge_patch(others, m.get("fieldsV1") or {})
        remove_stale(merged, mine.get("fieldsV1") or {}, entry["fieldsV1"], others)
    unchanged = mine is not None and mine.get("fieldsV1") == entry["fieldsV1"]
    merged.setdefault("metadata", {})["managedFields"] = (
        managed if unchanged else [m for m in managed if m is not mine] + [entry]
    )
    return merged


def patch_object(base: Any, body: Any, patch_type: str, schema: Schema, *, strategic: bool) -> dict[str, Any]:
    """``base`` patched with ``body`` of a merge, JSON or (when ``strategic``) strategic-merge type.

    415 for a type the resource does not take (custom resources take no strategic merge), 422 when
    the result is not an object with object metadata.
    """
    if patch_type == MERGE:
        patched = merge_patch(base, body)
    elif patch_type == JSON_PATCH:
        patched = json_patch(base, body)
    elif patch_type == STRATEGIC and strategic:
        patched = strategic_merge(base, body, schema)
    else:
        accepted = ", ".join(t for t in (JSON_PATCH, MERGE, STRATEGIC, APPLY) if strategic or t != STRATEGIC)
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: {accepted}",
        )
    if not isinstance(patched, dict) or not isinstance(patched.setdefault("metadata", {}), dict):
        raise ApiError(422, "Invalid", "the patch must produce an object with object metadata")
    return patched
