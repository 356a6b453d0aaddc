"""``meta.k8s.io/v1 Table`` output: what ``kubectl get`` prints (server-side printing).

Built-in kinds compute their cells (pods: READY, STATUS, RESTARTS, AGE, …); CRDs use their
``additionalPrinterColumns`` JSONPaths (the subset ``.a.b``, ``[n]``, ``[*]`` and
``[?(@.k=="v")]``); anything else gets NAME and AGE. Rows carry ``PartialObjectMetadata`` unless
``includeObject=Object`` asks for the whole object.
"""

from __future__ import annotations

import re
from typing import Any

from epp_sim.apiserver.kinds import Column, Obj, ResourceType
from epp_sim.apiserver.timefmt import human_age, parse_time

__all__ = ["wants_table", "table"]

_TOKEN = re.compile(r"\.([A-Za-z0-9_$-]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]")


def wants_table(accept: str) -> bool:
    """True when the Accept header asks for ``as=Table`` in ``meta.k8s.io``."""
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def jsonpath(o: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``o`` (empty when none)."""
    values = [o]
    text = path.strip().removeprefix("{").removesuffix("}").strip()
    pos = 0
    while pos < len(text) and values:
        m = _TOKEN.match(text, pos)
        if m is None:
            return []
        pos = m.end()
        field, index, fkey, fval = m.groups()
        nxt: list[Any] = []
        for v in values:
            if field is not None and isinstance(v, dict) and field in v:
                nxt.append(v[field])
            elif index == "*" and isinstance(v, list):
                nxt.extend(v)
            elif index is not None and index != "*" and isinstance(v, list) and int(index) < len(v):
                nxt.append(v[int(index)])
            elif fkey is not None and isinstance(v, list):
                nxt.extend(i for i in v if _first_text(i, fkey) == fval)
        values = nxt
    return values


def _first_text(o: Any, dotted: str) -> str | None:
    found = jsonpath(o, "." + dotted)
    return str(found[0]) if found else None


def _cell(column: Column, o: Obj, now: float) -> Any:
    found = jsonpath(o, column.json_path)
    if not found:
        return None
    value = found[0] if len(found) == 1 else ",".join(str(v) for v in found)
    if column.type == "date" and isinstance(value, str):
        created = parse_time(value)
        return human_age(now - created) if created is not None else value
    return value


def _definitions(rt: ResourceType) -> list[Obj]:
    cols = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "priority": 0,
            "description": "Name must be unique within a namespace.",
        }
    ]
    if rt.row is None and not rt.columns:
        cols.append({"name": "Age", "type": "string", "format": "", "priority": 0, "description": "CreationTimestamp"})
    for c in rt.columns:
        cols.append(
            {
                "name": c.name,
                "type": "string" if c.type == "date" and rt.builtin else c.type,
                "format": c.format,
                "priority": c.priority,
                "description": c.description,
            }
        )
    return cols


def _row(rt: ResourceType, o: Obj, now: float, include: str, api_version: str) -> Obj:
    if rt.row is not None:
        cells = rt.row(o, now)
    elif rt.columns:
        cells = [_cell(c, o, now) for c in rt.columns]
    else:
        created = parse_time(str(o["metadata"].get("creationTimestamp", "")))
        cells = [human_age(now - created) if created is not None else "<unknown>"]
    row: Obj = {"cells": [o["metadata"].get("name", ""), *cells]}
    if include == "Object":
        row["object"] = {**o, "apiVersion": api_version}
    elif include != "None":
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
    return row


def table(
    rt: ResourceType,
    objs: list[Obj],
    *,
    now: float,
    include: str = "Metadata",
    version: str | None = None,
    list_meta: Obj | None = None,
) -> Obj:
    """A Table of ``objs`` (a list, or the single object of a get or a watch event)."""
    api_version = rt.api_version(version)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": _definitions(rt),
        "rows": [_row(rt, o, now, include, api_version) for o in objs],
    }
