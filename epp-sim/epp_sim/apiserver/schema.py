"""Structural-schema work on objects: defaults, pruning of unknown fields, validation.

One walker per job over an ``openAPIV3Schema`` (the CRD dialect: ``x-kubernetes-*`` extensions,
``x-kubernetes-int-or-string``, ``additionalProperties`` maps). ``apiVersion``, ``kind`` and
``metadata`` at the root are the server's business, not the schema's, and are skipped.
A small builder vocabulary (``obj``, ``arr``, ``string``, …) keeps the built-in schemas short.
"""

from __future__ import annotations

import copy
import re
from typing import Any

__all__ = [
    "any_object",
    "apply_defaults",
    "arr",
    "boolean",
    "integer",
    "int_or_string",
    "number",
    "obj",
    "prune",
    "string",
    "string_map",
    "validate",
]

Schema = dict[str, Any]
Cause = tuple[str, str, str]
_ROOT_META = ("apiVersion", "kind", "metadata")
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def integer(**extra: Any) -> Schema:
    return {"type": "integer", "format": "int32", **extra}


def number(**extra: Any) -> Schema:
    return {"type": "number", **extra}


def boolean(**extra: Any) -> Schema:
    return {"type": "boolean", **extra}


def int_or_string(**extra: Any) -> Schema:
    return {"x-kubernetes-int-or-string": True, **extra}


def string_map() -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"}}


def any_object() -> Schema:
    """An object whose content the server keeps but does not describe."""
    return {"type": "object", PRESERVE: True}


def obj(
    properties: dict[str, Schema], *, required: tuple[str, ...] = (), preserve: bool = False, **extra: Any
) -> Schema:
    """An object with known ``properties``; ``preserve`` also keeps fields it does not describe."""
    schema: Schema = {"type": "object", "properties": properties, **extra}
    if preserve:
        schema[PRESERVE] = True
    if required:
        schema["required"] = list(required)
    return schema


def arr(items: Schema, *, merge_key: str | None = None, list_type: str | None = None, **extra: Any) -> Schema:
    """A list; ``merge_key`` makes it a strategic-merge list keyed by that field (and a map list)."""
    schema: Schema = {"type": "array", "items": items, **extra}
    if merge_key:
        schema["x-kubernetes-patch-merge-key"] = merge_key
        schema["x-kubernetes-patch-strategy"] = "merge"
        schema["x-kubernetes-list-type"] = "map"
        schema["x-kubernetes-list-map-keys"] = [merge_key]
    elif list_type:
        schema["x-kubernetes-list-type"] = list_type
    return schema


def apply_defaults(schema: Schema, value: Any, *, root: bool = True) -> None:
    """Fill in ``default`` for absent properties, recursively, in place."""
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        for key, sub in props.items():
            if root and key in _ROOT_META:
                continue
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(sub, value[key], root=False)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    apply_defaults(extra, item, root=False)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item, root=False)


def prune(schema: Schema, value: Any, *, remove: bool, path: str = "", root: bool = True) -> list[str]:
    """Unknown fields (paths) per the schema; removed from ``value`` when ``remove``."""
    unknown: list[str] = []
    if isinstance(value, dict):
        props: dict[str, Schema] | None = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get(PRESERVE))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            sub_path = f"{path}.{key}" if path else key
            if (root or embedded) and key in _ROOT_META:
                continue
            if props is not None and key in props:
                unknown += prune(props[key], value[key], remove=remove, path=sub_path, root=False)
            elif isinstance(extra, dict):
                unknown += prune(extra, value[key], remove=remove, path=sub_path, root=False)
            elif preserve or extra is True or (props is None and extra is None and not _typed(schema)):
                continue
            else:
                unknown.append(sub_path)
                if remove:
                    del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            unknown += prune(schema["items"], item, remove=remove, path=f"{path}[{i}]", root=False)
    return unknown


def _typed(schema: Schema) -> bool:
    return schema.get("type") == "object"


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _type_ok(schema: Schema, value: Any) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    expected = schema.get("type")
    if expected is None:
        return True
    if expected in ("integer", "number") and isinstance(value, bool):
        return False
    if expected == "integer" and isinstance(value, float) and value.is_integer():
        return True
    return isinstance(value, _TYPES.get(expected, (object,)))


def validate(schema: Schema, value: Any, *, path: str = "", root: bool = True) -> list[Cause]:
    """Causes (field, reason, message) where ``value`` breaks the schema; empty when valid."""
    if value is None:
        if schema.get("nullable") or root:
            return []
        return [(path, "FieldValueRequired", "Required value")] if schema.get("type") else []
    if not _type_ok(schema, value):
        want = "integer or string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        return [
            (
                path,
                "FieldValueTypeInvalid",
                f'Invalid value: "{_kind_of(value)}": {path or "body"} in body '
                f'must be of type {want}: "{_kind_of(value)}"',
            )
        ]
    causes: list[Cause] = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        causes.append((path, "FieldValueNotSupported", f"Unsupported value: {value!r}: supported values: {allowed}"))
    causes += _bounds(schema, value, path)
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in value or value[req] is None:
                causes.append((_join(path, req), "FieldValueRequired", "Required value"))
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key in _ROOT_META:
                continue
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                causes += validate(sub, item, path=_join(path, key), root=False)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            causes += validate(schema["items"], item, path=f"{path}[{i}]", root=False)
        keys = schema.get("x-kubernetes-list-map-keys")
        if schema.get("x-kubernetes-list-type") == "map" and keys:
            seen: set[tuple[Any, ...]] = set()
            for i, item in enumerate(value):
                k = tuple(item.get(key) for key in keys) if isinstance(item, dict) else (item,)
                if k in seen:
                    causes.append((f"{path}[{i}]", "FieldValueDuplicate", f"Duplicate value: {k!r}"))
                seen.add(k)
    return causes


def _bounds(schema: Schema, value: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append((path, "FieldValueInvalid", f"Invalid value: {value}: should be >= {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            causes.append((path, "FieldValueInvalid", f"Invalid value: {value}: should be <= {schema['maximum']}"))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                (
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {value!r}: should be at least {schema['minLength']} chars long",
                )
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append((path, "FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append((path, "FieldValueInvalid", f"Invalid value: {value!r}: should match {schema['pattern']!r}"))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                (path, "FieldValueInvalid", f"Invalid value: should have at least {schema['minItems']} items")
            )
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                (path, "FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
            )
    return causes


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
