"""Reading the one protobuf body our clients send: ``kubectl create token``'s TokenRequest.

kubectl's typed clients (client-go's clientset) send built-in kinds as
``application/vnd.kubernetes.protobuf`` and accept JSON back. The fake server answers in JSON
and, rather than carry generated protobuf code for every kind, decodes just the TokenRequest by
hand: the ``k8s\\x00`` magic, the ``runtime.Unknown`` envelope (typeMeta, raw), then the fields of
``authentication.k8s.io/v1`` ``TokenRequestSpec`` (audiences = 1, boundObjectRef = 3,
expirationSeconds = 4; BoundObjectReference kind = 1, apiVersion = 2, name = 3, uid = 4), as
generated.proto numbers them. The result is the JSON form, so one code path serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from epp_sim.apiserver.errors import ApiError

__all__ = ["PROTOBUF", "decode_token_request"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
_VARINT, _LENGTH = 0, 2
Field = tuple[int, int | bytes]


def _bad(why: str) -> ApiError:
    return ApiError(400, "BadRequest", f"the request body is not a valid protobuf TokenRequest: {why}")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _bad("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[Field]:
    """``(number, value)`` of each field: an int for varints, bytes for length-delimited ones."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _varint(data, at)
            yield number, value
        elif wire == _LENGTH:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise _bad("truncated field")
            yield number, data[at : at + size]
            at += size
        else:
            raise _bad(f"unexpected wire type {wire}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise _bad("expected a string")
    return value.decode()


def _message(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise _bad("expected a message")
    return value


def _spec(data: bytes) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            spec.setdefault("audiences", []).append(_text(value))
        elif number == 3:
            names = {1: "kind", 2: "apiVersion", 3: "name", 4: "uid"}
            ref = {names[n]: _text(v) for n, v in _fields(_message(value)) if n in names}
            spec["boundObjectRef"] = {k: v for k, v in ref.items() if v}
        elif number == 4 and isinstance(value, int):
            spec["expirationSeconds"] = value
    return spec


def decode_token_request(body: bytes) -> dict[str, Any]:
    """The TokenRequest in ``body`` as JSON-shaped data: ``{"apiVersion", "kind", "spec"}``."""
    if not body.startswith(_MAGIC):
        raise _bad("missing the k8s protobuf envelope")
    type_meta: dict[str, str] = {}
    raw = b""
    for number, value in _fields(body[len(_MAGIC) :]):
        if number == 1:
            names = {1: "apiVersion", 2: "kind"}
            type_meta = {names[n]: _text(v) for n, v in _fields(_message(value)) if n in names}
        elif number == 2:
            raw = _message(value)
    if type_meta.get("kind") != "TokenRequest":
        raise ApiError(
            415, "UnsupportedMediaType", f"protobuf is accepted only for TokenRequest, not {type_meta.get('kind')!r}"
        )
    spec: dict[str, Any] = {}
    for number, value in _fields(raw):
        if number == 2:
            spec = _spec(_message(value))
    return {**type_meta, "spec": spec}
