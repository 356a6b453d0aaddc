"""Kubernetes protobuf request bodies → the JSON-shaped objects the rest of the server works on.

client-go (kubectl's ``create`` generators, ``create token``, any typed client configured for
protobuf) sends built-in kinds as ``application/vnd.kubernetes.protobuf``: the ``k8s\\x00``
magic, then a ``runtime.Unknown`` envelope (``typeMeta`` = apiVersion and kind, ``raw`` = the
object's message). :func:`decode` reads the envelope, finds the kind's message in the table
(``messages``), and converts field by field into what Go's JSON encoding of the same object
would be, so one write path serves both encodings. Answers are always JSON (clients that send
protobuf accept JSON back).

Failures are ``ApiError``s naming the problem: 400 for bytes that are not a protobuf message
(truncated, garbage, a field of the wrong wire type) with the field path where it broke; 400
naming every field this server does not know or does not decode (nothing is dropped silently);
415 for a kind it does not read in protobuf (custom resources are JSON-only, as on a real server).
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.protobuf import (
    apiextensions_v1,
    apps_v1,
    auth_v1,
    autoscaling,
    coordination_v1,
    core_v1,
    meta_v1,
    pod_status_v1,
    pod_v1,
    rbac_v1,
    volumes_v1,
)
from epp_sim.apiserver.protobuf.messages import UNSUPPORTED, Field, Message, Table, build
from epp_sim.apiserver.protobuf.wire import (
    FIXED64,
    LENGTH,
    VARINT,
    WireError,
    fields,
    packed_varints,
    signed,
    to_double,
)

__all__ = ["PROTOBUF", "decode", "table"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
_WIRE = {"string": LENGTH, "bytes": LENGTH, "json": LENGTH, "int": VARINT, "bool": VARINT, "double": FIXED64}
_WIRE_NAMES = {VARINT: "varint", FIXED64: "64-bit", LENGTH: "length-delimited", 5: "32-bit"}
_MAX_DEPTH = 100
"""Deeper than any real object (a CRD schema nests a few levels per property); bounds the recursion."""


@functools.cache
def table() -> Table:
    """Every message this server reads, built (and checked) once, on first use."""
    return build(
        meta_v1.PART,
        core_v1.PART,
        pod_v1.PART,
        volumes_v1.PART,
        pod_status_v1.PART,
        apps_v1.PART,
        rbac_v1.PART,
        auth_v1.PART,
        coordination_v1.PART,
        autoscaling.PART,
        apiextensions_v1.PART,
    )


class _MalformedError(Exception):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(why)
        self.path = path


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _zero(wire: int, value: int | bytes) -> bool:
    return not value or (wire == FIXED64 and to_double(bytes(value)) == 0.0)


def _wrong_wire(f: Field, wire: int, expected: str) -> WireError:
    return WireError(f"{f.name} (field {f.number}) is {_WIRE_NAMES.get(wire, wire)}, expected {expected}")


def _scalar(f: Field, wire: int, value: int | bytes) -> Any:
    if wire != _WIRE[f.type]:
        raise _wrong_wire(f, wire, f.type)
    if isinstance(value, int):
        return bool(value) if f.type == "bool" else signed(value)
    if f.type == "double":
        return to_double(value)
    if f.type == "bytes":
        return base64.b64encode(value).decode()
    try:
        return json.loads(value) if f.type == "json" else value.decode()
    except (UnicodeDecodeError, ValueError) as e:
        raise WireError(f"{f.name} (field {f.number}) is not valid {'JSON' if f.type == 'json' else 'UTF-8'}") from e


class _Reader:
    """One body's decoding: the fields it had to refuse are collected, not dropped."""

    def __init__(self, messages: Table) -> None:
        self.table = messages
        self.refused: list[str] = []
        self.depth = 0

    def message(self, message: Message, data: bytes, path: str) -> Any:
        if self.depth >= _MAX_DEPTH:
            raise _MalformedError(path, f"messages nested more than {_MAX_DEPTH} deep")
        self.depth += 1
        try:
            return self._message(message, data, path)
        finally:
            self.depth -= 1

    def _message(self, message: Message, data: bytes, path: str) -> Any:
        out: dict[str, Any] = {}
        try:
            for number, wire, value in fields(data):
                f = message.fields.get(number)
                if f is None:
                    self.refused.append(f"{path or '<object>'}: field {number} of {message.name}")
                elif f.type == UNSUPPORTED:
                    self.refused.append(f"{_join(path, f.name)} ({message.name} field {number})")
                else:
                    self._field(out, f, wire, value, path)
        except WireError as e:
            raise _MalformedError(path, str(e)) from e
        if message.form is None:
            return out
        try:
            return message.form(out)
        except ValueError as e:
            raise _MalformedError(path, str(e)) from e

    def _value(self, f: Field, wire: int, value: int | bytes, path: str) -> Any:
        if f.scalar:
            return _scalar(f, wire, value)
        if not isinstance(value, bytes) or wire != LENGTH:
            raise _wrong_wire(f, wire, f"a {f.type} message")
        return self.message(self.table.messages[f.type], value, path)

    def _field(self, out: dict[str, Any], f: Field, wire: int, value: int | bytes, path: str) -> None:
        here = _join(path, f.name)
        if f.map:
            key, item = self._entry(f, wire, value, here)
            out.setdefault(f.name, {})[key] = item
        elif f.repeated:
            items = out.setdefault(f.name, [])
            if f.type in ("int", "bool") and isinstance(value, bytes) and wire == LENGTH:  # packed
                items.extend(_scalar(f, VARINT, v) for v in packed_varints(value))
            else:
                items.append(self._value(f, wire, value, f"{here}[{len(items)}]"))
        elif f.scalar and _zero(wire, value) and not f.keep_zero:
            _scalar(f, wire, value)  # still checks the wire type
            out.pop(f.name, None)
        else:
            decoded = self._value(f, wire, value, path if f.inline else here)
            if f.inline:
                out.update(decoded)
            elif decoded is None:
                out.pop(f.name, None)
            else:
                out[f.name] = decoded

    def _entry(self, f: Field, wire: int, value: int | bytes, path: str) -> tuple[str, Any]:
        """A map entry: a message of key = 1 (a string) and value = 2."""
        if not isinstance(value, bytes) or wire != LENGTH:
            raise _wrong_wire(f, wire, "a map entry")
        key_field = Field(1, f"{f.name} key", "string")
        value_field = Field(2, f"{f.name} value", f.type)
        key, item = "", None
        for number, entry_wire, raw in fields(value):
            if number == 1:
                key = _scalar(key_field, entry_wire, raw)
            elif number == 2:
                item = self._value(value_field, entry_wire, raw, f"{path}[{key}]")
        if item is None:  # an entry without a value holds the zero value
            empty = {"string": "", "bytes": "", "int": 0, "bool": False, "double": 0.0, "json": None}
            item = empty[f.type] if f.scalar else self.message(self.table.messages[f.type], b"", f"{path}[{key}]")
        return key, item


def _envelope(body: bytes) -> tuple[str, str, bytes]:
    """``(apiVersion, kind, raw)`` of a ``k8s\\x00`` + ``runtime.Unknown`` body."""
    if not body.startswith(_MAGIC):
        raise ApiError(400, "BadRequest", "the request body is not Kubernetes protobuf: no k8s\\x00 magic")
    type_meta, raw, encoding, content_type = b"", b"", b"", b""
    try:
        for number, wire, value in fields(body[len(_MAGIC) :]):
            if wire != LENGTH or not isinstance(value, bytes):
                raise WireError(f"envelope field {number} is {_WIRE_NAMES.get(wire, wire)}, not length-delimited")
            if number == 1:
                type_meta = value
            elif number == 2:
                raw = value
            elif number == 3:
                encoding = value
            elif number == 4:
                content_type = value
        names = {n: v for n, w, v in fields(type_meta) if w == LENGTH and isinstance(v, bytes)}
        api_version, kind = names.get(1, b"").decode(), names.get(2, b"").decode()
    except (WireError, UnicodeDecodeError) as e:
        raise ApiError(400, "BadRequest", f"the request body is not a valid Kubernetes protobuf envelope: {e}") from e
    if not kind or not api_version:
        raise ApiError(400, "BadRequest", "the protobuf envelope names no apiVersion and kind")
    if encoding or content_type not in (b"", PROTOBUF.encode()):
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the protobuf envelope holds content type {content_type.decode(errors='replace')!r} "
            f"with encoding {encoding.decode(errors='replace')!r}; only plain protobuf is read",
        )
    return api_version, kind, raw


def decode(body: bytes) -> dict[str, Any]:
    """The object in a protobuf request body, JSON-shaped, with its ``apiVersion`` and ``kind``."""
    api_version, kind, raw = _envelope(body)
    messages = table()
    message = messages.root(api_version, kind)
    if message is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"this API server reads protobuf only for the built-in kinds it serves, not {api_version} {kind}: "
            f"send it as application/json",
        )
    reader = _Reader(messages)
    try:
        obj = reader.message(message, raw, "")
    except _MalformedError as e:
        where = f" at {e.path}" if e.path else ""
        raise ApiError(400, "BadRequest", f"the request body is not a valid protobuf {kind}{where}: {e}") from e
    if reader.refused:
        raise ApiError(
            400,
            "BadRequest",
            f"the protobuf {kind} has fields this API server does not decode: {'; '.join(reader.refused)} "
            f"(send the object as application/json, e.g. with kubectl apply)",
        )
    return {"apiVersion": api_version, "kind": kind, **obj}
