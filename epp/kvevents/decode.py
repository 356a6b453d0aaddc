"""vLLM's KV-event wire format → typed events, accepting both encodings at both levels.

A message payload is an ``EventBatch`` (``ts``, ``events``, ``data_parallel_rank``) encoded by
msgspec either positionally (``[ts, [...], rank]``, events ``[tag, f1, ...]``) or as maps
(``{"ts": ...}``, events ``{"type": tag, ...}``); vLLM moved from one to the other (#42892) and
captures mix them, so each level is read whichever way it comes (as llm-d's vLLM adapter does).
Positional fields are read with length guards: a missing trailing field is null, extra fields
are ignored. Anything else raises :class:`EventDecodeError` naming what was wrong.

Every field vLLM 0.32 sends is taken (a real engine's ``BlockStored`` carries ``medium``,
``lora_name``, ``extra_keys``, ``group_idx`` and ``kv_cache_spec_kind``, which the index needs to
know which blocks it can reproduce from token ids); ``lora_id`` (deprecated) and
``kv_cache_spec_sliding_window`` are read past and dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "EventBatch", "EventDecodeError", "decode_batch"]

BlockHash = int | bytes


class EventDecodeError(ValueError):
    """A payload that is not a vLLM ``EventBatch``."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_name: str | None = None
    medium: str | None = None
    extra_keys: tuple[tuple[Any, ...] | None, ...] | None = None
    """Per block, what vLLM hashed beside the tokens (the LoRA name, multimodal items, a cache salt), or null."""
    group_idx: int | None = None
    """The KV-cache group (hybrid models have several)."""
    kv_cache_spec_kind: str | None = None
    """The group's attention kind (``full_attention``, ``sliding_window``, ...)."""


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[BlockHash, ...]
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


Event = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    ts: float
    events: tuple[Event, ...]
    data_parallel_rank: int | None = None


# Field order of the positional form (after the tag), per vLLM's struct declarations.
_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
)
_REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")
_BATCH_FIELDS = ("ts", "events", "data_parallel_rank")


def _fields(raw: Any, names: Sequence[str], what: str) -> tuple[str, Mapping[str, Any]]:
    """(tag, fields by name) of a positional ``[tag, ...]`` or a map ``{"type": tag, ...}`` event."""
    if isinstance(raw, Mapping):
        tag = raw.get("type")
        if not isinstance(tag, str):
            raise EventDecodeError(f"{what}: map without a string 'type'")
        return tag, raw
    if isinstance(raw, list | tuple) and raw and isinstance(raw[0], str):
        return raw[0], dict(zip(names, raw[1:], strict=False))
    raise EventDecodeError(f"{what}: expected [tag, ...] or a map with 'type', got {type(raw).__name__}")


def _hashes(value: Any, what: str) -> tuple[BlockHash, ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(h, bytes) or (isinstance(h, int) and not isinstance(h, bool)) for h in value
    ):
        raise EventDecodeError(f"{what}.block_hashes: expected a list of ints or bytes")
    return tuple(value)


def _extra_keys(value: Any, blocks: int, what: str) -> tuple[tuple[Any, ...] | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != blocks:
        raise EventDecodeError(f"{what}.extra_keys: expected null or one entry per block ({blocks})")
    if not all(k is None or isinstance(k, list | tuple) for k in value):
        raise EventDecodeError(f"{what}.extra_keys: each entry must be null or a list")
    return tuple(None if k is None else tuple(k) for k in value)


def _group(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EventDecodeError(f"{what}.group_idx: expected null or a non-negative int, got {value!r}")
    return value


def _event(raw: Any, what: str) -> Event:
    tag = raw[0] if isinstance(raw, list | tuple) and raw else raw.get("type") if isinstance(raw, Mapping) else None
    if tag == "BlockStored":
        _, f = _fields(raw, _STORED_FIELDS, what)
        tokens = f.get("token_ids") or ()
        if not isinstance(tokens, list | tuple) or not all(isinstance(t, int) for t in tokens):
            raise EventDecodeError(f"{what}.token_ids: expected a list of ints")
        block_size = f.get("block_size")
        if not isinstance(block_size, int) or block_size < 1:
            raise EventDecodeError(f"{what}.block_size: expected a positive int, got {block_size!r}")
        parent = f.get("parent_block_hash")
        if parent is not None and not isinstance(parent, int | bytes):
            raise EventDecodeError(f"{what}.parent_block_hash: expected an int, bytes or null")
        lora = f.get("lora_name")
        medium = f.get("medium")
        hashes = _hashes(f.get("block_hashes"), what)
        kind = f.get("kv_cache_spec_kind")
        return BlockStored(
            block_hashes=hashes,
            parent_block_hash=parent,
            token_ids=tuple(tokens),
            block_size=block_size,
            lora_name=lora if isinstance(lora, str) and lora else None,
            medium=medium if isinstance(medium, str) else None,
            extra_keys=_extra_keys(f.get("extra_keys"), len(hashes), what),
            group_idx=_group(f.get("group_idx"), what),
            kv_cache_spec_kind=kind if isinstance(kind, str) else None,
        )
    if tag == "BlockRemoved":
        _, f = _fields(raw, _REMOVED_FIELDS, what)
        medium = f.get("medium")
        return BlockRemoved(
            _hashes(f.get("block_hashes"), what),
            medium if isinstance(medium, str) else None,
            _group(f.get("group_idx"), what),
        )
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    raise EventDecodeError(f"{what}: unknown event type {tag!r}")


def decode_batch(payload: bytes) -> EventBatch:
    """Decode one message's msgpack payload; raises :class:`EventDecodeError`."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise EventDecodeError(f"payload is not msgpack: {e}") from e
    if isinstance(raw, Mapping):
        batch: Mapping[str, Any] = raw
    elif isinstance(raw, list | tuple):
        batch = dict(zip(_BATCH_FIELDS, raw, strict=False))
    else:
        raise EventDecodeError(f"batch: expected an array or a map, got {type(raw).__name__}")
    ts, events, rank = batch.get("ts"), batch.get("events"), batch.get("data_parallel_rank")
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise EventDecodeError(f"batch.ts: expected a number, got {ts!r}")
    if not isinstance(events, list | tuple):
        raise EventDecodeError("batch.events: expected a list")
    return EventBatch(
        ts=float(ts),
        events=tuple(_event(e, f"events[{i}]") for i, e in enumerate(events)),
        data_parallel_rank=rank if isinstance(rank, int) else None,
    )
