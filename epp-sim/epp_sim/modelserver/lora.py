"""LoRA adapter slots: at most ``max_loras`` adapters resident, each taking ``load_time`` to load.

A request for an adapter that is not resident waits in the queue. The scheduler asks
:meth:`LoraSlots.ready`: a resident adapter is ready; otherwise, if a slot is free (or an
adapter that no running sequence uses can be evicted, least recently used first, preferring
ones nobody is waiting for) the load starts and completes ``load_time`` simulated seconds later.
vLLM loads adapters inside a model step; this simulator loads them beside the batch, so the wait
lands on the requests that need the adapter (see ``docs/simulator.md``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

__all__ = ["LoraSlots"]


class LoraSlots:
    """Which adapters occupy the ``max_loras`` slots, and when the loading ones become ready."""

    def __init__(self, max_loras: int, load_time: float) -> None:
        self.max_loras = max_loras
        self.load_time = load_time
        self._ready_at: OrderedDict[str, float] = OrderedDict()  # resident adapters, least recently used first

    @property
    def resident(self) -> list[str]:
        """Adapters in a slot (loaded or loading)."""
        return list(self._ready_at)

    def loaded(self, now: float) -> list[str]:
        """Adapters whose load has completed."""
        return [name for name, at in self._ready_at.items() if at <= now]

    def next_ready(self, now: float) -> float | None:
        """Seconds until the earliest loading adapter is ready, or None if none is loading."""
        pending = [at - now for at in self._ready_at.values() if at > now]
        return min(pending) if pending else None

    def ready(self, adapter: str, now: float, *, busy: Collection[str], wanted: Collection[str]) -> bool:
        """True if ``adapter`` is loaded; otherwise start loading it when a slot can be had.

        ``busy`` are adapters running sequences use (never evicted); ``wanted`` are adapters
        queued requests need (evicted only when nothing else can go).
        """
        at = self._ready_at.get(adapter)
        if at is not None:
            self._ready_at.move_to_end(adapter)
            return at <= now
        if len(self._ready_at) >= self.max_loras:
            idle = [name for name, ready in self._ready_at.items() if ready <= now and name not in busy]
            if not idle:
                return False
            victim = next((name for name in idle if name not in wanted), idle[0])
            del self._ready_at[victim]
        self._ready_at[adapter] = now + self.load_time
        return self.load_time <= 0

    def unload(self, adapter: str) -> None:
        """Free the adapter's slot (``/v1/unload_lora_adapter``)."""
        self._ready_at.pop(adapter, None)
