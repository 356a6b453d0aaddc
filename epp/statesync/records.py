"""What pickers tell each other, and how a batch of it is packed: msgpack, one list per batch.

A record is one of:

- ``("p", topic, payload)``: a :class:`~epp.framework.replication.Replicated` plugin's change;
  ``topic`` is the plugin's name (every picker of a pool loads the same configuration);
- ``("f", "", counts)``: the sender's own in-flight counts, whole (``{endpoint key: [requests,
  tokens]}``, zeros left out), so a lost or repeated record never leaves a count behind.

:func:`unpack` checks the shape and raises ``ValueError`` on anything else; a picker never trusts
the far side of a network link with more than that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

__all__ = ["IN_FLIGHT", "PLUGIN", "Counts", "Record", "in_flight_record", "pack", "unpack"]

PLUGIN = "p"
IN_FLIGHT = "f"

Record = tuple[str, str, Any]
Counts = Mapping[str, tuple[int, int]]
"""Endpoint key → (requests, tokens) in flight."""


def in_flight_record(counts: Counts) -> Record:
    return (IN_FLIGHT, "", {key: [r, t] for key, (r, t) in counts.items()})


def pack(records: Sequence[Record]) -> bytes:
    data: bytes = msgpack.packb([list(r) for r in records], use_bin_type=True)
    return data


def _counts(value: Any) -> dict[str, tuple[int, int]]:
    if not isinstance(value, dict):
        raise ValueError("in-flight record: counts must be a map")
    out: dict[str, tuple[int, int]] = {}
    for key, pair in value.items():
        if (
            not isinstance(key, str)
            or not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair)
        ):
            raise ValueError(f"in-flight record: bad entry {key!r}: {pair!r}")
        out[key] = (pair[0], pair[1])
    return out


def unpack(data: bytes) -> list[Record]:
    """The records of a batch; ``ValueError`` names what is wrong with one that is not a batch."""
    try:
        items = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError) as e:
        raise ValueError(f"not a state-sync batch: {e}") from e
    if not isinstance(items, list):
        raise ValueError("not a state-sync batch: not a list")
    out: list[Record] = []
    for item in items:
        if not isinstance(item, list) or len(item) != 3 or not isinstance(item[1], str):
            raise ValueError(f"not a state-sync record: {item!r:.80}")
        kind, topic, body = item
        if kind == PLUGIN and isinstance(body, bytes):
            out.append((PLUGIN, topic, body))
        elif kind == IN_FLIGHT:
            out.append((IN_FLIGHT, "", _counts(body)))
        else:
            raise ValueError(f"unknown state-sync record kind {kind!r}")
    return out
