"""KV-cache events as vLLM publishes them: ZMQ PUB, 3 frames, msgpack, an optional replay socket.

``--kv-events-config`` takes vLLM's JSON (``KVEventsConfig``: ``enable_kv_cache_events`` false,
``publisher`` "zmq" when enabled, ``endpoint`` ``tcp://*:5557``, ``replay_endpoint`` null,
``buffer_steps`` 10000, ``hwm`` 100000, ``max_queue_size`` 100000, ``topic`` ""). The publisher
binds when the endpoint has ``*`` (or ``::``, ``ipc://``, ``inproc://``), else connects; a ``*``
host means the server's ``--host``, as each pod has its own IP. Each engine step's events go out
as one ``EventBatch`` ``[ts, [events...], data_parallel_rank]``, the batch positional and each
event a map ``{"type": tag, field: ...}`` with vLLM 0.32's fields (as a real vLLM 0.32 sends
them), in frames ``[topic, seq (8 bytes BE, from 0), payload]``. The replay
ROUTER answers a start seq with every buffered ``[seq, payload]`` from it, then ``[ff×8, ""]``.
Sends never block: past ``hwm`` ZMQ drops, as in vLLM. There is no send queue (batches go out
from the engine step at once), so ``max_queue_size`` is only validated. ``drop_next`` lets a test
lose messages on purpose.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import zmq
import zmq.asyncio

__all__ = ["KvEventPublisher", "KvEventsConfig"]

log = logging.getLogger(__name__)

_FIELDS = {
    "enable_kv_cache_events": bool,
    "publisher": str,
    "endpoint": str,
    "replay_endpoint": (str, type(None)),
    "buffer_steps": int,
    "hwm": int,
    "max_queue_size": int,
    "topic": str,
}


@dataclass(frozen=True, slots=True)
class KvEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str = ""
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def effective_publisher(self) -> str:
        return self.publisher or ("zmq" if self.enable_kv_cache_events else "null")

    @classmethod
    def parse(cls, text: str) -> KvEventsConfig:
        """vLLM's ``--kv-events-config`` JSON; ValueError names the bad field."""
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ValueError(f"--kv-events-config: invalid JSON: {e}") from e
        if not isinstance(doc, dict):
            raise ValueError("--kv-events-config: must be a JSON object")
        for key, value in doc.items():
            kind: Any = _FIELDS.get(key)
            if kind is None:
                raise ValueError(f"--kv-events-config: unknown field {key!r} (known: {sorted(_FIELDS)})")
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"--kv-events-config.{key}: wrong type {value!r}")
        config = cls(**doc)
        if config.effective_publisher not in ("zmq", "null"):
            raise ValueError(f"--kv-events-config.publisher: {config.publisher!r} (the simulator has zmq and null)")
        for key in ("buffer_steps", "hwm", "max_queue_size"):
            if getattr(config, key) < 1:
                raise ValueError(f"--kv-events-config.{key}: must be >= 1")
        return config


def _resolve(endpoint: str, host: str) -> tuple[str, bool]:
    """(endpoint with ``*`` as ``host``, whether to bind) as vLLM decides bind vs connect."""
    bind = "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))
    if endpoint.startswith("tcp://*:"):
        address = f"[{host}]" if ":" in host else host
        endpoint = f"tcp://{address}:{endpoint.removeprefix('tcp://*:')}"
    return endpoint, bind


class KvEventPublisher:
    """One engine's PUB (and optional replay ROUTER) socket; :meth:`publish` is synchronous and never blocks."""

    def __init__(self, config: KvEventsConfig, *, host: str, data_parallel_rank: int = 0) -> None:
        self.config = config
        self._host = host
        self._rank = data_parallel_rank
        self._context: zmq.asyncio.Context | None = None
        self._pub: zmq.asyncio.Socket | None = None
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._topic = config.topic.encode()
        self.seq = 0
        #: fault injection: the next N batches are buffered (replayable) but not sent, as if ZMQ dropped them
        self.drop_next = 0
        self.endpoint = ""
        self.replay_endpoint = ""
        #: True when the publisher bound its endpoint (pods are dialled), False when it connected (central mode)
        self.binds = False

    async def start(self) -> None:
        context = self._context = zmq.asyncio.Context()
        pub = self._pub = context.socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, self.config.hwm)
        pub.setsockopt(zmq.LINGER, 0)
        endpoint, bind = _resolve(self.config.endpoint, self._host)
        self.binds = bind
        try:
            if bind:
                pub.bind(endpoint)
                self.endpoint = pub.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                pub.connect(endpoint)
                self.endpoint = endpoint
            if self.config.replay_endpoint:
                replay = self._replay = context.socket(zmq.ROUTER)
                replay.setsockopt(zmq.LINGER, 0)
                replay_endpoint, _ = _resolve(self.config.replay_endpoint, self._host)
                replay.bind(replay_endpoint)
                self.replay_endpoint = replay.getsockopt_string(zmq.LAST_ENDPOINT)
                self._replay_task = asyncio.create_task(self._serve_replay(replay), name="kv-events replay")
        except zmq.ZMQError as e:
            await self.stop()
            raise OSError(f"kv events cannot use {endpoint}: {e}") from e

    async def stop(self) -> None:
        task, self._replay_task = self._replay_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        context, self._context = self._context, None
        if context is not None:
            context.destroy(linger=0)
        self._pub = self._replay = None

    def publish(self, events: Sequence[Any]) -> None:
        """Send one batch of events (maps, or a test's own positional ``[tag, fields...]``) with the next seq."""
        pub = self._pub
        if pub is None or not events:
            return
        payload: bytes = msgpack.packb([time.time(), list(events), self._rank], use_bin_type=True)
        seq = self.seq
        self.seq += 1
        self._buffer.append((seq, payload))
        if self.drop_next > 0:
            self.drop_next -= 1
            return
        try:
            pub.send_multipart([self._topic, seq.to_bytes(8, "big"), payload], flags=zmq.NOBLOCK)
        except zmq.Again:
            log.debug("kv events dropped at the high-water mark", extra={"seq": seq})

    async def _serve_replay(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            if len(frames) < 2 or len(frames[-1]) != 8:
                continue
            identity, start = frames[0], int.from_bytes(frames[-1], "big")
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await sock.send_multipart([identity, b"", seq.to_bytes(8, "big"), payload])
            await sock.send_multipart([identity, b"", b"\xff" * 8, b""])
