"""JSON bodies as the llm-d router's Go parsers read and write them: decode once, errors like Go's, print like Go.

A body is decoded exactly once, by ``orjson`` (a C parser about three times as fast as the standard
library's) on the joined bytes; the standard library re-reads only a body orjson refuses, for what
Go accepts and orjson does not (integers past 64 bits) and for the error text. A body whose model
is rewritten is re-serialised the way Go's ``encoding/json`` prints a ``map[string]any`` (sorted
keys, compact, HTML-safe escapes, raw UTF-8), so byte-exact tests and caches behave as with the
upstream picker; otherwise the client's bytes are forwarded untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeGuard

import orjson

from epp.errors import EppError, ErrorCode

__all__ = ["bad_request", "decode_object", "non_empty_list", "output_cap", "serialize_go", "with_model"]

# Go's encoding/json escapes these inside strings; Python's json module does not.
_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
# What Go's json.Unmarshal calls each JSON value kind that cannot fill a map.
_GO_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "bool"}


def bad_request(msg: str) -> EppError:
    return EppError(ErrorCode.BAD_REQUEST, msg)


def _reject_constant(name: str) -> Any:
    # Go rejects NaN/Infinity; accepting them would forward a body the model server cannot parse.
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def decode_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object; ``EppError(BAD_REQUEST)`` with Go's unmarshal message when it is not one."""
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            decoded = json.loads(raw, parse_constant=_reject_constant)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors.
            raise bad_request(f"error unmarshaling request bodyMap: {e}") from e
    if decoded is None:
        return {}  # Go unmarshals `null` into a nil map without error.
    if not isinstance(decoded, dict):
        kind = _GO_KINDS.get(type(decoded), "value")
        raise bad_request(
            f"error unmarshaling request bodyMap: json: cannot unmarshal {kind} "
            "into Go value of type map[string]interface {}"
        )
    return decoded


def non_empty_list(value: Any) -> TypeGuard[list[Any]]:
    return isinstance(value, list) and len(value) > 0


def output_cap(fields: Mapping[str, Any] | Any, keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` set in ``fields``, when it is a non-negative integer (the client's output cap)."""
    if not isinstance(fields, Mapping):
        return None
    value: Any = None
    for key in keys:
        value = fields.get(key)
        if value is not None:
            break
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _go_escape(text: str) -> str:
    for char, escape in _GO_ESCAPES:
        if char in text:
            text = text.replace(char, escape)
    return text


def serialize_go(body: Mapping[str, Any]) -> bytes:
    """``body`` as Go's ``json.Marshal(map[string]any)`` prints it (floats keep Python's form)."""
    try:
        return _go_escape(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)).encode()
    except UnicodeEncodeError:
        # A lone surrogate from a "\ud800" escape cannot be UTF-8; keep everything escaped instead.
        return _go_escape(json.dumps(body, sort_keys=True, separators=(",", ":"))).encode()


def with_model(body: Mapping[str, Any], model: str) -> bytes:
    """A copy of ``body`` with ``model`` set, serialised like Go; ``body`` itself is not changed."""
    return serialize_go({**body, "model": model})
