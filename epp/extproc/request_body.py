"""OpenAI request bodies: parse once, validate like upstream's ``openai-parser``, re-serialise like Go.

The body is decoded exactly once, by ``orjson`` (a C parser about three times as fast as the
standard library's) on the joined bytes; the standard library re-reads only a body orjson
refuses, for what Go accepts and orjson does not (integers past 64 bits) and for the error text.
The resulting dict is what the scheduler and plugins read; nothing here copies it. When the target model differs from
the requested one the body is re-serialised the way Go's ``encoding/json`` prints a
``map[string]any`` (sorted keys, compact, HTML-safe escapes, raw UTF-8), so byte-exact tests and
caches behave as with the upstream picker; otherwise the client's bytes are forwarded untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from epp.errors import EppError, ErrorCode
from epp.framework.request import ApiKind

__all__ = ["ParsedBody", "api_kind", "parse_request_body", "serialize_go"]

_PATH_HEADERS = (":path", "x-original-path", "x-forwarded-path")
_DEFAULT_PATH = "/v1/completions"
# Order matters: "/chat/completions" must be tried before "/completions".
_SUFFIXES = (
    ("/conversations", ApiKind.CONVERSATIONS),
    ("/responses", ApiKind.RESPONSES),
    ("/chat/completions", ApiKind.CHAT_COMPLETIONS),
    ("/completions", ApiKind.COMPLETIONS),
    ("/embeddings", ApiKind.EMBEDDINGS),
)
# Go's encoding/json escapes these inside strings; Python's json module does not.
_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
# What Go's json.Unmarshal calls each JSON value kind that cannot fill a map.
_GO_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "bool"}


@dataclass(slots=True)
class ParsedBody:
    """A validated request body. ``body`` is the decoded dict itself, not a copy."""

    body: dict[str, Any]
    model: str
    api: ApiKind
    stream: bool


def api_kind(headers: Mapping[str, str]) -> ApiKind:
    """The OpenAI API a request targets, by path suffix (``:path``, then the forwarded-path headers).

    The query string is ignored, so ``/v1/chat/completions?x=1`` is still chat; anything unknown
    is completions, as upstream.
    """
    path = _DEFAULT_PATH
    for name in _PATH_HEADERS:
        value = headers.get(name)
        if value:
            path = value
            break
    path = path.partition("?")[0]
    for suffix, kind in _SUFFIXES:
        if path.endswith(suffix):
            return kind
    return ApiKind.COMPLETIONS


def _reject_constant(name: str) -> Any:
    # Go rejects NaN/Infinity; accepting them would forward a body the model server cannot parse.
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _bad(msg: str) -> EppError:
    return EppError(ErrorCode.BAD_REQUEST, msg)


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def _validate(body: Mapping[str, Any], api: ApiKind) -> None:
    if api is ApiKind.CHAT_COMPLETIONS:
        if not _non_empty_list(body.get("messages")):
            raise _bad("invalid chat completions request: must have valid messages field")
    elif api is ApiKind.COMPLETIONS:
        prompt = body.get("prompt")
        if not (isinstance(prompt, str | list) and len(prompt) > 0):
            raise _bad("invalid completions request: must have prompt field")
    elif api is ApiKind.RESPONSES:
        if body.get("input") is None:
            raise _bad("invalid responses request: must have input field")
    elif api is ApiKind.CONVERSATIONS:
        if not _non_empty_list(body.get("items")):
            raise _bad("invalid conversations request: must have items field")
    elif api is ApiKind.EMBEDDINGS and body.get("input") is None:
        raise _bad("invalid embeddings request: must have input field")


def parse_request_body(raw: bytes, headers: Mapping[str, str]) -> ParsedBody:
    """Decode and validate ``raw``; raise ``EppError(BAD_REQUEST)`` with the upstream message.

    Checks run in upstream order: JSON, then the API's required field, then ``model``.
    """
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            decoded = json.loads(raw, parse_constant=_reject_constant)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors.
            raise _bad(f"error unmarshaling request bodyMap: {e}") from e
    if decoded is None:
        decoded = {}  # Go unmarshals `null` into a nil map without error.
    elif not isinstance(decoded, dict):
        kind = _GO_KINDS.get(type(decoded), "value")
        raise _bad(
            f"error unmarshaling request bodyMap: json: cannot unmarshal {kind} "
            "into Go value of type map[string]interface {}"
        )
    api = api_kind(headers)
    _validate(decoded, api)
    model = decoded.get("model")
    if not isinstance(model, str):
        raise _bad("model not found in request body")
    return ParsedBody(body=decoded, model=model, api=api, stream=decoded.get("stream") is True)


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
