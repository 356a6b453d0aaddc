"""List and watch query parameters: label and field selectors, ``limit``/``continue`` tokens.

Label selectors use ``epp.labels`` (the one selector grammar of the project). Field selectors
accept ``path=value``, ``path==value`` and ``path!=value`` on any dotted path (the real server
supports ``metadata.name``, ``metadata.namespace`` and a few per kind such as ``status.phase``
and ``spec.nodeName``). Continue tokens are opaque base64 JSON.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from epp.labels import SelectorError, parse_selector
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.kinds import Obj

__all__ = ["decode_continue", "encode_continue", "make_matcher", "parse_field_selector"]

Matcher = Callable[[Obj], bool]


def _lookup(o: Obj, path: str) -> Any:
    cur: Any = o
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str) -> Matcher | None:
    """A matcher for ``a.b=c,d!=e``; None for the empty selector; 400 on a malformed term."""
    terms: list[tuple[str, bool, str]] = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            path, _, value = term.partition("!=")
            positive = False
        elif "==" in term:
            path, _, value = term.partition("==")
            positive = True
        elif "=" in term:
            path, _, value = term.partition("=")
            positive = True
        else:
            raise ApiError(
                400, "BadRequest", f"invalid field selector: invalid selector: '{text}'; can't understand '{term}'"
            )
        if not path.strip():
            raise ApiError(400, "BadRequest", f"invalid field selector: empty field in {term!r}")
        terms.append((path.strip(), positive, value.strip()))
    if not terms:
        return None

    def match(o: Obj) -> bool:
        return all((_as_text(_lookup(o, path)) == value) == positive for path, positive, value in terms)

    return match


def make_matcher(label_selector: str | None, field_selector: str | None) -> Matcher | None:
    """Combine both selectors; None when neither filters anything."""
    try:
        labels = parse_selector(label_selector or "")
    except SelectorError as e:
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {e}") from e
    fields = parse_field_selector(field_selector or "")
    if labels.empty and fields is None:
        return None

    def match(o: Obj) -> bool:
        if not labels.empty and not labels.matches(o.get("metadata", {}).get("labels") or {}):
            return False
        return fields is None or fields(o)

    return match


def encode_continue(rv: int, after: tuple[str, str]) -> str:
    """An opaque token: the list's resourceVersion and the last key returned."""
    raw = json.dumps({"rv": rv, "ns": after[0], "name": after[1]}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    """Inverse of ``encode_continue``; 400 BadRequest for a token this server did not issue."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["ns"]), str(data["name"]))
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        raise ApiError(400, "BadRequest", f"continue key is not valid: {token!r}") from e
