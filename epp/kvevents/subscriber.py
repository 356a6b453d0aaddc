"""One endpoint's KV-event subscriber: a ZMQ SUB socket dialled to the pod, feeding the index in order.

The picker dials every pod (llm-d's pod discovery), so any number of picker replicas each get
the whole stream and build the same index. Each message is ``[topic, seq (8 bytes BE), payload]``;
the model of a chain's first block comes from the topic ``kv@<pod>@<model>`` (or the event's
``lora_name``). Sequence numbers keep the index honest:

- a gap (a message missed, or one that would not decode) means the pod's entries are unknown:
  with a replay endpoint the missing range is fetched from the pod's ROUTER socket, and if that
  fails (or there is none) the pod's entries are cleared, never silently kept;
- seq going backwards is a publisher restart: the pod is cleared (its cache is new), then
  replayed from 0 when possible; a first message past 0 (joining mid-stream) replays from 0;
- a dropped connection (the socket monitor's DISCONNECTED) may be a restart whose first messages
  are missed, which seq alone could mistake for a gap: the pod is cleared and the next message
  treated as a first one (replayed from 0 when possible).

ZMQ reconnects a dropped connection by itself with exponential back-off (100 ms up to 5 s);
should the socket itself fail, the loop rebuilds it after ``retry_interval`` (5 s, as llm-d).
Failed replays cool down for ``replay_cooldown`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time

import zmq
import zmq.asyncio

from epp.kvevents.decode import EventDecodeError
from epp.kvevents.ingest import IndexWriter, SourceCounts, apply_message

__all__ = ["Subscriber"]

log = logging.getLogger(__name__)

_END_OF_REPLAY = b"\xff" * 8


class Subscriber(SourceCounts):
    """Feeds ``index`` under ``pod`` from ``endpoint`` (``tcp://ip:port``); :meth:`run` until cancelled."""

    def __init__(
        self,
        context: zmq.asyncio.Context,
        index: IndexWriter,
        *,
        pod: str,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic_filter: str = "kv@",
        retry_interval: float = 5.0,
        replay_timeout: float = 2.0,
        replay_cooldown: float = 30.0,
    ) -> None:
        super().__init__(pod, endpoint)
        self._context = context
        self._index = index
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self._topic_filter = topic_filter.encode()
        self._retry_interval = retry_interval
        self._replay_timeout = replay_timeout
        self._replay_cooldown = replay_cooldown
        self._replay_after = 0.0

    async def run(self) -> None:
        while True:
            sock = self._context.socket(zmq.SUB)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.RECONNECT_IVL, 100)
                sock.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)
                sock.setsockopt(zmq.SUBSCRIBE, self._topic_filter)
                monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                poller = zmq.asyncio.Poller()
                poller.register(sock, zmq.POLLIN)
                poller.register(monitor, zmq.POLLIN)
                sock.connect(self.endpoint)
                while True:
                    ready = dict(await poller.poll())
                    if monitor in ready:  # before any message of a new publisher
                        await monitor.recv_multipart()
                        self._disconnected()
                    if sock in ready:
                        await self._on_message(await sock.recv_multipart())
            except zmq.ZMQError:
                log.warning(
                    "kv-events subscriber failed; retrying",
                    exc_info=True,
                    extra={"pod": self.pod, "endpoint": self.endpoint, "retry_in": self._retry_interval},
                )
            finally:
                sock.disable_monitor()
                sock.close(linger=0)
            await asyncio.sleep(self._retry_interval)
            self.counts.reconnections += 1

    async def _on_message(self, frames: list[bytes]) -> None:
        self.counts.messages += 1
        if len(frames) != 3 or len(frames[1]) != 8:
            self.counts.decode_errors += 1
            self._unknown("malformed message")
            return
        topic, seq_bytes, payload = frames
        seq = int.from_bytes(seq_bytes, "big")
        last = self.last_seq
        if last is not None and seq <= last:
            self.counts.restarts += 1
            self._index.clear(self.pod)
            log.info("kv-events publisher restarted", extra={"pod": self.pod, "seq": seq, "last_seq": last})
            last = None
        if last is None and seq > 0 or last is not None and seq != last + 1:
            start = 0 if last is None else last + 1
            if last is not None:
                self.counts.gaps += 1
            if not await self._replay(start, seq, topic) and last is not None:
                self._unknown(f"missed seq {start}..{seq - 1}")
        self.last_seq = seq
        self._apply(topic, payload)

    def _disconnected(self) -> None:
        self.counts.disconnects += 1
        self.last_seq = None
        self._index.clear(self.pod)
        log.info("kv-events publisher disconnected: pod entries cleared", extra={"pod": self.pod})

    def _unknown(self, why: str) -> None:
        self._index.clear(self.pod)
        log.warning("kv-events gap: pod entries cleared until refreshed", extra={"pod": self.pod, "why": why})

    def _apply(self, topic: bytes, payload: bytes) -> None:
        try:
            apply_message(self._index, self.pod, topic, payload)
        except EventDecodeError as e:
            self.counts.decode_errors += 1
            self._unknown(f"undecodable payload: {e}")

    async def _replay(self, start: int, until: int, topic: bytes) -> bool:
        """Fetch and apply messages ``start..until-1`` from the replay socket; True when all came."""
        if self.replay_endpoint is None or start >= until or time.monotonic() < self._replay_after:
            return False
        self.counts.replays += 1
        sock = self._context.socket(zmq.DEALER)
        received: list[tuple[int, bytes]] = []
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.replay_endpoint)
            await sock.send_multipart([b"", start.to_bytes(8, "big")])
            async with asyncio.timeout(self._replay_timeout):
                while True:
                    frames = await sock.recv_multipart()
                    if len(frames) < 3 or frames[-2] == _END_OF_REPLAY:
                        break
                    received.append((int.from_bytes(frames[-2], "big"), frames[-1]))
        except (TimeoutError, zmq.ZMQError):
            log.warning("kv-events replay failed", extra={"pod": self.pod, "endpoint": self.replay_endpoint})
            self._replay_after = time.monotonic() + self._replay_cooldown
            return False
        finally:
            sock.close(linger=0)
        wanted = [(seq, payload) for seq, payload in received if start <= seq < until]
        if [seq for seq, _ in wanted] != list(range(start, until)):
            self._replay_after = time.monotonic() + self._replay_cooldown
            return False
        for _, payload in wanted:
            self._apply(topic, payload)
        return True
