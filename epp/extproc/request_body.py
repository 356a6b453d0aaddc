"""Request bodies: parse once, validate like the upstream parser of their API, re-serialise like Go.

The parser plugin that claims the request's path (``epp.framework.parsing``) names the API; this
module decodes and checks the body for it: OpenAI's APIs as ``openai-parser``, Anthropic's
Messages and count_tokens as ``anthropic-parser`` (``messages`` must be a non-empty list; as
upstream, ``model`` may be absent), vLLM's generate as ``vllmhttp-parser`` (non-empty
``token_ids``), and a passthrough body not at all (it is never decoded, and forwarded as sent).
Errors are 400s with upstream's messages, naming the field.

The body is decoded exactly once, by ``orjson`` (a C parser about three times as fast as the
standard library's) on the joined bytes; the standard library re-reads only a body orjson
refuses, for what Go accepts and orjson does not (integers past 64 bits) and for the error text.
The resulting dict is what the scheduler and plugins read; nothing here copies it. When the target model differs from
the requested one the body is re-serialised the way Go's ``encoding/json`` prints a
``map[string]any`` (sorted keys, compact, HTML-safe escapes, raw UTF-8), so byte-exact tests and
caches behave as with the upstream picker; otherwise the client's bytes are forwarded untouched.
The client's output cap (``max_tokens`` and its per-API spellings) is read for the in-flight
token estimate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from epp.errors import EppError, ErrorCode
from epp.framework.request import ApiKind, InferenceRequest

__all__ = ["ParsedBody", "parse_request_body", "serialize_go"]

# Go's encoding/json escapes these inside strings; Python's json module does not.
_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
# What Go's json.Unmarshal calls each JSON value kind that cannot fill a map.
_GO_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "bool"}


# Where each API keeps the client's output cap, first spelling first (upstream's per-parser fields).
_MAX_OUTPUT_FIELDS: dict[ApiKind, tuple[str, ...]] = {
    ApiKind.CHAT_COMPLETIONS: ("max_completion_tokens", "max_tokens"),
    ApiKind.COMPLETIONS: ("max_tokens",),
    ApiKind.RESPONSES: ("max_output_tokens",),
    ApiKind.MESSAGES: ("max_tokens",),
}
# The APIs whose body needs a model (GIE's openai-parser; Anthropic and vLLM's generate do not).
_MODEL_REQUIRED = frozenset(
    {
        ApiKind.COMPLETIONS,
        ApiKind.CHAT_COMPLETIONS,
        ApiKind.RESPONSES,
        ApiKind.CONVERSATIONS,
        ApiKind.EMBEDDINGS,
        ApiKind.IMAGES_GENERATIONS,
    }
)
_PASSTHROUGH_BODY: dict[str, Any] = {}


@dataclass(slots=True)
class ParsedBody:
    """A validated request body. ``body`` is the decoded dict itself, not a copy (empty for passthrough)."""

    body: dict[str, Any]
    model: str
    api: ApiKind
    stream: bool
    max_output_tokens: int | None = None

    def apply_to(self, request: InferenceRequest, size: int) -> None:
        """Give ``request`` what routing reads from its body (``size``: the body's bytes as received)."""
        request.body = self.body
        request.model = self.model
        request.api = self.api
        request.stream = self.stream
        request.max_output_tokens = self.max_output_tokens
        request.size = size


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
    elif api is ApiKind.EMBEDDINGS:
        if body.get("input") is None:
            raise _bad("invalid embeddings request: must have input field")
    elif api is ApiKind.IMAGES_GENERATIONS:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise _bad("invalid images generations request: must have prompt field")
    elif api is ApiKind.MESSAGES or api is ApiKind.COUNT_TOKENS:
        if not _non_empty_list(body.get("messages")):
            raise _bad("invalid messages request: must have at least one message")
    elif api is ApiKind.GENERATE and not _non_empty_list(body.get("token_ids")):
        raise _bad("invalid generate request: must have non-empty token_ids field")


def _max_output_tokens(body: Mapping[str, Any], api: ApiKind) -> int | None:
    """The client's output cap, when it set a non-negative integer one (generate: in ``sampling_params``)."""
    value: Any = None
    if api is ApiKind.GENERATE:
        params = body.get("sampling_params")
        value = params.get("max_tokens") if isinstance(params, dict) else None
    else:
        for key in _MAX_OUTPUT_FIELDS.get(api, ()):
            value = body.get(key)
            if value is not None:
                break
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def parse_request_body(raw: bytes, api: ApiKind) -> ParsedBody:
    """Decode and validate ``raw`` as a body of ``api``; raise ``EppError(BAD_REQUEST)`` with the upstream message.

    Checks run in upstream order: JSON, then the API's required field, then ``model``. A
    passthrough body is not decoded.
    """
    if api is ApiKind.PASSTHROUGH:
        return ParsedBody(body=_PASSTHROUGH_BODY, model="", api=api, stream=False)
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
    _validate(decoded, api)
    model = decoded.get("model")
    if not isinstance(model, str):
        if api in _MODEL_REQUIRED:
            raise _bad("model not found in request body")
        model = ""
    return ParsedBody(
        body=decoded,
        model=model,
        api=api,
        stream=decoded.get("stream") is True,
        max_output_tokens=_max_output_tokens(decoded, api),
    )


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
