"""llm-d's central KV-event mode: the picker binds one SUB socket and every engine connects to it.

With ``kvEventsConfig.zmqEndpoint`` set, vLLM's publishers are given that address (any endpoint
without ``*`` or ``::`` makes vLLM *connect*), so one socket hears every engine. Messages are
attributed the way llm-d does: by the pod id in the topic ``kv@<pod-id>@<model>``, which llm-d's
samples set to ``$(POD_IP):$(POD_PORT)`` and which its scorer compares with each endpoint's
``address:port``. Here the pod id is looked up among the pool's endpoints by ``ip:port``
(:meth:`CentralReceiver.attribute`); a message naming no endpoint of the pool (a pod not Ready
yet, or a topic in another format) is dropped and counted (:attr:`CentralReceiver.unattributed`),
and the first one per pod id is logged with the format expected.

Each engine's sequence numbers are tracked on their own (one :class:`PodStream` per endpoint),
since one socket interleaves several publishers. There is no replay in this mode (llm-d has
none either): a gap, or an undecodable message, leaves the endpoint's entries unknown, so they
are cleared; seq going backwards is a publisher restart and clears them too. A bind that fails
(the address taken, e.g. by the configuration this one replaces) is retried with back-off.
"""

from __future__ import annotations

import asyncio
import logging

import zmq
import zmq.asyncio

from epp.kvevents.decode import EventDecodeError
from epp.kvevents.ingest import IndexWriter, SourceCounts, apply_message, topic_parts

__all__ = ["CentralReceiver", "PodStream"]

log = logging.getLogger(__name__)

_FIRST_RETRY = 0.1
_MAX_RETRY = 5.0


class PodStream(SourceCounts):
    """One engine's messages through the central socket (``source`` is the ``ip:port`` its topic names)."""


class CentralReceiver:
    """Binds ``endpoint`` and feeds ``index``; :meth:`run` until cancelled."""

    def __init__(self, context: zmq.asyncio.Context, index: IndexWriter, *, endpoint: str, topic_filter: str) -> None:
        self._context = context
        self._index = index
        self.endpoint = endpoint
        self._topic_filter = topic_filter.encode()
        self._pods: dict[str, str] = {}  # "ip:port" → endpoint key
        self.streams: dict[str, PodStream] = {}
        """By endpoint key: one per endpoint heard from."""
        self.unattributed = 0
        """Messages whose topic names no endpoint of the pool (dropped)."""
        self.bind_failures = 0
        self.bound = False
        self._unknown_logged: set[str] = set()

    def attribute(self, hostport: str, key: str) -> None:
        """Messages whose topic names ``hostport`` (``ip:port``) belong to endpoint ``key`` from now on."""
        self._pods[hostport] = key

    def forget(self, key: str) -> None:
        """Endpoint ``key`` left the pool: its messages are unattributed again, its stream and entries go."""
        for hostport in [h for h, k in self._pods.items() if k == key]:
            del self._pods[hostport]
        self.streams.pop(key, None)
        self._index.clear(key)

    async def run(self) -> None:
        delay = _FIRST_RETRY
        while True:
            sock = self._context.socket(zmq.SUB)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SUBSCRIBE, self._topic_filter)
                sock.bind(self.endpoint)
                self.bound = True
                log.info("kv-events central socket bound", extra={"endpoint": self.endpoint})
                delay = _FIRST_RETRY
                while True:
                    self._on_message(await sock.recv_multipart())
            except zmq.ZMQError as e:
                self.bind_failures += int(not self.bound)
                log.error(
                    "kv-events central socket failed; retrying",
                    extra={"endpoint": self.endpoint, "error": str(e), "retry_in": delay},
                )
            finally:
                self.bound = False
                sock.close(linger=0)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY)

    def _on_message(self, frames: list[bytes]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self.unattributed += 1
            return
        topic, seq_bytes, payload = frames
        pod_id, _ = topic_parts(topic)
        key = self._pods.get(pod_id)
        if key is None:
            self.unattributed += 1
            if pod_id not in self._unknown_logged and len(self._unknown_logged) < 1000:
                self._unknown_logged.add(pod_id)
                log.warning(
                    "kv-events message for no endpoint of the pool dropped (topic must be kv@<pod ip>:<port>@<model>)",
                    extra={"topic": topic.decode("utf-8", "replace")[:200]},
                )
            return
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = PodStream(key, pod_id)
        stream.counts.messages += 1
        seq = int.from_bytes(seq_bytes, "big")
        last = stream.last_seq
        if last is not None and seq <= last:
            stream.counts.restarts += 1
            self._clear(stream, f"publisher restarted (seq {seq} after {last})")
        elif last is not None and seq != last + 1:
            stream.counts.gaps += 1
            self._clear(stream, f"missed seq {last + 1}..{seq - 1}")
        stream.last_seq = seq
        try:
            apply_message(self._index, key, topic, payload)
        except EventDecodeError as e:
            stream.counts.decode_errors += 1
            self._clear(stream, f"undecodable payload: {e}")

    def _clear(self, stream: PodStream, why: str) -> None:
        self._index.clear(stream.pod)
        log.warning("kv-events entries cleared until refreshed", extra={"pod": stream.pod, "why": why})
