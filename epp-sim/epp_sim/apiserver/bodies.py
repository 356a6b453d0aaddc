"""Request bodies in, response encodings out: the media types the fake API server speaks.

A write's body is JSON, YAML (server-side apply) or Kubernetes protobuf (what client-go's typed
clients send for built-in kinds: ``kubectl create namespace|secret|deployment|token``, …); each
becomes the same JSON-shaped object, so one write path serves all three. Answers are JSON: a
client that sends protobuf accepts JSON back, and a request that accepts nothing else is refused
with 406 rather than answered in a format it did not ask for.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.kinds import Obj
from epp_sim.apiserver.protobuf import PROTOBUF, decode

__all__ = ["PROTOBUF", "check_accept", "parse_body", "parse_object"]

_JSON_COMPATIBLE = ("application/json", "application/*", "*/*", "application/yaml")
"""JSON, or what JSON satisfies (YAML is a superset of JSON)."""


def parse_body(raw: bytes, content_type: str, *, yaml_ok: bool = False) -> Any:
    """The decoded body: protobuf by its content type, YAML where allowed (apply), else JSON."""
    if not raw:
        raise ApiError(400, "BadRequest", "the request body is empty")
    if content_type == PROTOBUF:
        return decode(raw)
    try:
        if yaml_ok:
            return yaml.load(raw, Loader=yaml.CSafeLoader)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise ApiError(400, "BadRequest", f"the request body is not valid {'YAML' if yaml_ok else 'JSON'}: {e}") from e


def parse_object(raw: bytes, content_type: str) -> Obj:
    """A body that must be one object (a review, a TokenRequest)."""
    body = parse_body(raw, content_type)
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body must be a JSON object")
    return body


def check_accept(accept: str) -> None:
    """406 when the client accepts only encodings this server does not write (protobuf alone)."""
    if not accept.strip():
        return
    types = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    if not any(t in _JSON_COMPATIBLE for t in types):
        raise ApiError(
            406,
            "NotAcceptable",
            f"only application/json is served, and the request accepts only {accept!r}",
        )
