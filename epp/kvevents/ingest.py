"""One KV-event message into the index, and the counters every event source keeps per endpoint.

Both topologies end here: a subscriber dialled to one pod (pod discovery) and the socket every
engine connects to (central mode) hand each message's topic and payload to :func:`apply_message`
under the endpoint it belongs to. The topic is llm-d's ``kv@<pod-id>@<model>``
(:func:`topic_parts`); the model names a chain's first block unless the event carries a LoRA name.

:class:`SourceCounts` holds what ``/metrics`` reports per endpoint (a
:class:`~epp.framework.measures.KvEventCounts`, which the producer reports before each scrape),
so both kinds of source count the same things the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from epp.framework.measures import KvEventCounts
from epp.kvevents.decode import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, decode_batch

__all__ = ["IndexWriter", "SourceCounts", "apply_message", "topic_parts"]


class IndexWriter(Protocol):
    """What the event sources write to: the in-memory index, or the one on a Valkey/Redis server."""

    skipped: int

    def stored(self, pod: str, model: str, event: BlockStored) -> bool: ...

    def removed(self, pod: str, hashes: Sequence[BlockHash]) -> None: ...

    def clear(self, pod: str) -> None: ...


class SourceCounts:
    """Counts since the source started, for ``pod`` (an endpoint key) heard from ``source``.

    ``source`` is the ZMQ endpoint a subscriber dials, or the ``ip:port`` a central topic names.
    """

    def __init__(self, pod: str, source: str) -> None:
        self.pod = pod
        self.source = source
        self.last_seq: int | None = None
        """The sequence number of the last message applied (None before the first, or after a disconnect)."""
        self.counts = KvEventCounts()


def topic_parts(topic: bytes) -> tuple[str, str]:
    """``(pod id, model)`` of a ``kv@<pod-id>@<model>`` topic; empty strings where it has none."""
    parts = topic.decode("utf-8", "replace").split("@", 2)
    if len(parts) != 3:
        return "", ""
    return parts[1], parts[2]


def apply_message(index: IndexWriter, pod: str, topic: bytes, payload: bytes) -> None:
    """Decode ``payload`` and apply its events to ``pod``'s entries; raises ``EventDecodeError``."""
    batch = decode_batch(payload)
    _, model = topic_parts(topic)
    for event in batch.events:
        if isinstance(event, BlockStored):
            if event.lora_name or model:
                index.stored(pod, model, event)
            else:
                index.skipped += 1
        elif isinstance(event, BlockRemoved):
            index.removed(pod, event.block_hashes)
        elif isinstance(event, AllBlocksCleared):
            index.clear(pod)
