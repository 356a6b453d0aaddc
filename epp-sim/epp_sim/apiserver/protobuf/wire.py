"""The protobuf wire format, read generically: fields as ``(number, wire type, raw value)``.

Knows nothing of Kubernetes or of any message: ``fields`` splits a message's bytes into its
fields (a varint's value, a fixed-width field's bytes, a length-delimited field's bytes), and the
helpers turn a raw value into what a field type means (a signed integer, a double, packed
repeated values). Every malformed input raises :class:`WireError` saying what and where (the
byte offset), never an ``IndexError``: the bytes come from clients.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = ["FIXED64", "LENGTH", "VARINT", "WireError", "fields", "packed_varints", "signed", "to_double"]

VARINT, FIXED64, LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
_U64 = 1 << 64


class WireError(ValueError):
    """The bytes are not a protobuf message (truncated, an unknown wire type, an overlong varint)."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if at + i >= len(data):
            raise WireError(f"truncated varint at byte {at}")
        byte = data[at + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, at + i + 1
    raise WireError(f"varint longer than {_MAX_VARINT_BYTES} bytes at byte {at}")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Each field of a message: ``(number, wire type, value)``; an int for varints, else the bytes."""
    at = 0
    while at < len(data):
        start = at
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {start}")
        if wire == VARINT:
            value, at = _varint(data, at)
            yield number, wire, value
            continue
        if wire == LENGTH:
            size, at = _varint(data, at)
        elif wire in (FIXED64, _FIXED32):
            size = 8 if wire == FIXED64 else 4
        else:
            raise WireError(f"unsupported wire type {wire} (field {number}) at byte {start}")
        if at + size > len(data):
            raise WireError(f"field {number} at byte {start} needs {size} bytes, {len(data) - at} left (truncated)")
        yield number, wire, data[at : at + size]
        at += size


def signed(value: int) -> int:
    """A varint as Go's int32/int64 writes it (negative numbers are sign-extended to 64 bits)."""
    return value - _U64 if value >= _U64 >> 1 else value


def to_double(raw: bytes) -> float:
    if len(raw) != 8:
        raise WireError(f"a double needs 8 bytes, got {len(raw)}")
    value: float = struct.unpack("<d", raw)[0]
    return value


def packed_varints(data: bytes) -> Iterator[int]:
    """The values of a packed repeated varint field."""
    at = 0
    while at < len(data):
        value, at = _varint(data, at)
        yield value
