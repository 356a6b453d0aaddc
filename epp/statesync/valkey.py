"""The replicas' link: one stream per pool on a Valkey (or Redis) server, written by every replica, read by all.

Each replica appends its records in batches (``XADD``, one entry per flush tick with anything to
send: its source name and the packed records; the stream is trimmed to ``stream_length`` entries)
and reads everyone's in order (a blocking ``XREAD`` from the last entry it saw), skipping its
own. Nothing here is on the request path: plugins append to the pool's outbox and two background
tasks move batches. A stream, not pub/sub, so a replica that lost the server catches up:

- **losing the server** is said at once (a warning with the error, ``epp_state_sync_connected`` 0,
  ``epp_state_sync_disconnects_total``, the API's pool detail); the replica keeps routing on
  its own view, its records wait in the bounded outbox, and its peers' in-flight counts are
  dropped once silent for the expiry (stale counts would mislead more than none);
- **getting it back** (retried with back-off, 0.1 s to 5 s), the waiting records go out first, and
  reading resumes after the last entry seen: what the peers learnt meanwhile is applied, in
  order, as far as the stream still holds it;
- **starting** against a stream that already holds entries replays them (warming the prefix
  index with what the other replicas routed); in-flight records older than the start are
  skipped, as those counts have long changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from epp.clock import Clock
from epp.framework.replication import SyncSettings
from epp.statesync.address import redis_url
from epp.statesync.pool_sync import BatchSchedule, PoolSync
from epp.statesync.records import IN_FLIGHT, pack, unpack
from epp.statesync.server_status import ServerStatus
from epp.tasks import Service, cancel_and_wait, start_guarded

__all__ = ["ValkeyLink"]

log = logging.getLogger(__name__)

_SOURCE = b"s"
_RECORDS = b"r"


def _entry_ms(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])


class ValkeyLink(Service, ServerStatus):
    """A pool's stream ``<key_prefix>:<namespace>/<pool>``; ``start`` / ``stop``."""

    def __init__(
        self,
        sync: PoolSync,
        settings: SyncSettings,
        *,
        pool: tuple[str, str],
        clock: Clock,
        flush_interval: float = 0.005,
        read_block: float = 1.0,
        retry: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self.sync = sync
        self.settings = settings
        self.url = redis_url(settings.address)
        self.stream = f"{settings.key_prefix}:{pool[0]}/{pool[1]}"
        self.pool = pool[1]
        self._clock = clock
        self._flush = flush_interval
        self._block_ms = int(read_block * 1000)
        self._retry = retry
        ServerStatus.__init__(self)
        self._client: aioredis.Redis | None = None
        self._closing = False
        self._failures: dict[str, int] = {}
        """Consecutive failures of each task's commands, less one (the back-off's exponent)."""
        self._busy: set[asyncio.Task[Any]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start moving records (connecting is the tasks' job: a server down at start is only a disconnect)."""
        if self._tasks:
            return
        self._closing = False
        self._client = aioredis.Redis.from_url(
            self.url,
            socket_connect_timeout=2.0,
            socket_timeout=self._block_ms / 1000 + 4.0,
            retry=Retry(NoBackoff(), 0),
        )
        self._tasks = [
            start_guarded(self._write(), name=f"epp-state-sync-write-{self.pool}"),
            start_guarded(self._read(), name=f"epp-state-sync-read-{self.pool}"),
        ]

    async def stop(self) -> None:
        """Stop both tasks and close the connections (what is still queued is dropped).

        A task waiting between commands is cancelled; one inside a command (a blocking ``XREAD``)
        finishes it and stops, within ``read_block``: redis-py can hang on a command cancelled
        mid-read.
        """
        tasks, self._tasks = self._tasks, []
        self._closing = True
        idle = [t for t in tasks if t not in self._busy]
        await cancel_and_wait(idle)
        if busy := [t for t in tasks if t not in idle]:
            await asyncio.wait(busy)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- status ---------------------------------------------------------------------------------

    def _ok(self, task: str) -> None:
        self._failures[task] = -1
        if self.reached():
            log.info(
                "state sync connected",
                extra={"pool": self.pool, "server": self.url, "stream": self.stream, "queued": self.sync.pending},
            )

    def _failed(self, error: BaseException) -> None:
        if self.unreached(error):
            log.warning(
                "state sync lost its server: routing on this replica's own view until it is back",
                extra={"pool": self.pool, "server": self.url, "error": self.last_error},
            )

    @contextlib.contextmanager
    def _command(self) -> Iterator[None]:
        """Marks the current task as inside a command (see :meth:`stop`)."""
        task = asyncio.current_task()
        assert task is not None
        self._busy.add(task)
        try:
            yield
        finally:
            self._busy.discard(task)

    async def _lost(self, task: str, error: BaseException) -> bool:
        """``task``'s command failed: say so and wait before its next try; False when stopping instead."""
        if self._closing:
            return False
        self._failed(error)
        attempt = self._failures[task] = self._failures.get(task, -1) + 1
        low, high = self._retry
        await self._clock.sleep(min(high, low * 2 ** min(attempt, 16)))
        return True

    # -- writing --------------------------------------------------------------------------------

    async def _write(self) -> None:
        assert self._client is not None
        client, sync, settings, clock = self._client, self.sync, self.settings, self._clock
        schedule = BatchSchedule(
            sync,
            interval=settings.in_flight_interval,
            heartbeat_intervals=settings.heartbeat_intervals,
            expiry=settings.expiry,
            now=clock.now(),
        )
        while not self._closing:
            await clock.sleep(self._flush)
            now = clock.now()
            batch = schedule.due(now)
            if not batch:
                continue
            try:
                with self._command():
                    await client.xadd(
                        self.stream,
                        {_SOURCE: sync.source, _RECORDS: pack(batch)},
                        maxlen=settings.stream_length,
                        approximate=True,
                    )
            except (RedisError, OSError) as e:
                schedule.failed(batch, now)  # counts are sent afresh when the server is back, at once
                if not await self._lost("write", e):
                    return
                continue
            self._ok("write")

    # -- reading --------------------------------------------------------------------------------

    async def _read(self) -> None:
        assert self._client is not None
        client = self._client
        last: bytes | str = "0"
        replay_until = -1  # entries up to this id's time are history: their in-flight counts are skipped
        while not self._closing:
            try:
                with self._command():
                    if replay_until < 0:
                        newest: Any = await client.xrevrange(self.stream, count=1)
                        replay_until = _entry_ms(newest[0][0]) if newest else 0
                    answer: Any = await client.xread({self.stream: last}, count=500, block=self._block_ms)
            except (RedisError, OSError) as e:
                if not await self._lost("read", e):
                    return
                continue
            self._ok("read")
            now = self._clock.now()
            for _, entries in answer or ():
                for entry_id, fields in entries:
                    last = entry_id
                    self._apply(entry_id, fields, now, replay_until)

    def _apply(self, entry_id: bytes, fields: dict[bytes, bytes], now: float, replay_until: int) -> None:
        source_bytes = fields.get(_SOURCE)
        data = fields.get(_RECORDS)
        if source_bytes is None or data is None:
            self.sync.counts.undecodable += 1
            return
        source = source_bytes.decode("utf-8", "replace")
        if source == self.sync.source:
            return
        try:
            records = unpack(data)
        except ValueError as e:
            self.sync.counts.undecodable += 1
            log.warning("state-sync entry refused", extra={"pool": self.pool, "source": source, "error": str(e)})
            return
        if _entry_ms(entry_id) <= replay_until:
            records = [r for r in records if r[0] != IN_FLIGHT]
        self.sync.receive(source, records, now)
