"""LoRA slots: load delay, slot limit, eviction of idle adapters only."""

from __future__ import annotations

from epp_sim.modelserver.lora import LoraSlots


def test_load_takes_load_time() -> None:
    slots = LoraSlots(2, 0.5)
    assert not slots.ready("a", 0.0, busy=set(), wanted={"a"})
    assert slots.resident == ["a"] and slots.loaded(0.4) == []
    assert slots.next_ready(0.1) == 0.4
    assert not slots.ready("a", 0.49, busy=set(), wanted={"a"})
    assert slots.ready("a", 0.5, busy=set(), wanted={"a"})
    assert slots.next_ready(0.5) is None


def test_third_adapter_waits_while_both_slots_are_busy() -> None:
    slots = LoraSlots(2, 0.0)
    assert slots.ready("a", 0.0, busy=set(), wanted=set())
    assert slots.ready("b", 0.0, busy={"a"}, wanted=set())
    assert not slots.ready("c", 1.0, busy={"a", "b"}, wanted={"c"})
    assert slots.resident == ["a", "b"]
    # b goes idle: c evicts it.
    assert slots.ready("c", 2.0, busy={"a"}, wanted={"c"})
    assert slots.resident == ["a", "c"]


def test_eviction_prefers_adapters_nobody_waits_for() -> None:
    slots = LoraSlots(2, 0.0)
    slots.ready("a", 0.0, busy=set(), wanted=set())
    slots.ready("b", 0.0, busy=set(), wanted=set())
    # a is least recently used, but requests are queued for it: evict b instead.
    assert slots.ready("c", 1.0, busy=set(), wanted={"a", "c"})
    assert sorted(slots.resident) == ["a", "c"]


def test_a_loading_adapter_is_never_evicted() -> None:
    slots = LoraSlots(1, 1.0)
    slots.ready("a", 0.0, busy=set(), wanted={"a"})
    assert not slots.ready("b", 0.5, busy=set(), wanted={"a", "b"})
    assert slots.resident == ["a"]
    slots.unload("a")
    assert slots.resident == []
