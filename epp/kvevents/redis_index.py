"""The precise KV-block index on a Valkey/Redis server (llm-d's ``redisConfig`` / ``valkeyConfig``), shared by replicas.

Same semantics as :class:`~epp.kvevents.index.KvBlockIndex` (our own xxh64 chain keys, the
engine's hashes only as names, 1:many engine → our keys, a refcount per key, GPU tier only,
skipped stores counted), with the state on the server (layout and scripts:
:mod:`epp.kvevents.redis_layout`), so what one replica hears every replica routes on: in llm-d's
central mode only the replica whose socket a pod connects to receives its events.

Nothing on the request path waits on anything but its own lookup:

- **writes** (``stored``, ``removed``, ``clear``, ``speculate``) are queued per endpoint and sent
  by one background task, all queued operations in one pipeline (one idempotent script per
  endpoint and chunk). A parent block the batch does not hold is read from the server first
  (one more round trip, still off the request path). The queue is bounded (:data:`MAX_QUEUED`
  operations): an endpoint whose operations overflow it loses them, and is cleared on the server
  when it is back (its entries are unknown), counted in ``dropped``;
- **a lookup** (:meth:`RedisBlockIndex.longest_prefixes`) is one script call bounded by
  :data:`LOOKUP_TIMEOUT` (plus a little per block asked); when it times out, fails, or the server
  is known to be down, the answer is None (the request has no match info: it scores 0, as a
  request without tokens), counted (``lookup_failures``) and logged at most once per
  :data:`LOG_EVERY` seconds;
- **the server's state** is probed by a background task every :data:`REFRESH` seconds (which also
  reads blocks per endpoint for ``/metrics``): losing it is said at once (a warning, ``connected``
  false), writes wait in the queue, and the first good answer (probe or write) says it is back.

A server unreachable at start is not fatal (upstream's constructor fails the load): the picker
starts, routes without match info, says so, and retries (0.1 s to 5 s back-off), so a Valkey
outage costs prefix affinity, never the routing of every request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from epp.kvevents.decode import BlockHash, BlockStored
from epp.kvevents.index import block_keys, chain_seed, indexable_blocks
from epp.kvevents.redis_layout import (
    LONGEST,
    SIZES,
    WRITE,
    RedisIndexSettings,
    engine_field,
    key_prefix,
    last_key,
    packed,
)
from epp.statesync.server_status import ServerStatus
from epp.tasks import TaskSet

__all__ = ["LOOKUP_TIMEOUT", "LOOKUP_TIMEOUT_PER_BLOCK", "MAX_QUEUED", "RedisBlockIndex"]

log = logging.getLogger(__name__)

LOOKUP_TIMEOUT = 0.005
"""Seconds a request's lookup may take, plus :data:`LOOKUP_TIMEOUT_PER_BLOCK` for each block asked
(upstream has no key for it: go-redis's default read timeout is 3 s). A round trip on a loopback or
in-zone server takes well under a millisecond; the script's work grows with the blocks asked (about
0.2 µs per block per candidate still matching, on this project's 2-core benchmark machine), so the
bound does too: 5.2 ms for a 1k-token prompt, 15 ms for the 4,096 blocks a request is matched on at most."""
LOOKUP_TIMEOUT_PER_BLOCK = 2.5e-6
MAX_QUEUED = 200_000
"""Write operations held while the server is slow or away (one per engine block event)."""
REFRESH = 1.0
"""Seconds between probes of the server (and readings of blocks per endpoint)."""
LOG_EVERY = 10.0
"""Seconds between two log lines about failed lookups (each failure is counted)."""
_RETRY = (0.1, 5.0)
_CHUNK = 1000  # operations per script call: one call holds the server while it runs


@dataclass(slots=True)
class _Stored:
    parent: str | None
    seed: int
    tokens: Sequence[int]
    per_block: int
    engine_blocks: tuple[str, ...]


_Op = _Stored | tuple[str, ...]  # ("R", field), ("P", ttl_ms, keys), ("C",)


class RedisBlockIndex(ServerStatus):
    """Writes queued for the background task; lookups on the request path; :meth:`start` / :meth:`stop`."""

    def __init__(
        self, settings: RedisIndexSettings, block_size: int, *, pool: str, producer: str, max_queued: int = MAX_QUEUED
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.settings = settings
        self.block_size = block_size
        self.prefix = key_prefix(pool, producer)
        self.skipped = 0
        """Stored events not indexed (as the in-memory index counts them); this replica's own."""
        ServerStatus.__init__(self)
        self.lookup_failures = 0
        self.dropped = 0
        """Write operations lost to a full queue (their endpoints are cleared when the server is back)."""
        self._blocks: dict[str, int] = {}
        self._queue: dict[str, list[_Op]] = {}
        self._queued = 0
        self._max_queued = max_queued
        self._sending = False
        self._overflowed: set[str] = set()
        self._wake = asyncio.Event()
        self._client: aioredis.Redis | None = None
        self._tasks = TaskSet()
        self._closing = False
        self._logged_at = -LOG_EVERY
        self._unlogged = 0

    # -- what the event sources call (sync, on the loop) ----------------------------------------

    def stored(self, pod: str, model: str, event: BlockStored) -> bool:
        """Queue a BlockStored for ``pod``; False (and counted) when it cannot be indexed."""
        plain = indexable_blocks(event, self.block_size)
        if plain == 0:
            self.skipped += 1
            return False
        hashes = tuple(engine_field(h) for h in event.block_hashes[:plain])
        parent = None if event.parent_block_hash is None else engine_field(event.parent_block_hash)
        tokens = event.token_ids[: plain * event.block_size]
        seed = chain_seed(event.lora_name or model)
        self._put(pod, _Stored(parent, seed, tokens, event.block_size // self.block_size, hashes))
        return True

    def removed(self, pod: str, hashes: Sequence[BlockHash]) -> None:
        for block in hashes:
            self._put(pod, ("R", engine_field(block)))

    def clear(self, pod: str) -> None:
        """Forget what ``pod`` holds, on the server (every replica's view)."""
        self._put(pod, ("C",))

    def speculate(self, pod: str, keys: Sequence[int], ttl: float) -> None:
        """Record ``keys`` as held by ``pod`` for ``ttl`` seconds (server time), for every replica.

        Not queued while the server is away: they would be stale when it is back, and would only
        fill the queue the engine's own events need.
        """
        if keys and self.connected:
            self._put(pod, ("P", str(max(1, int(ttl * 1000))), packed(keys)))

    def _put(self, pod: str, op: _Op) -> None:
        if pod in self._overflowed:
            self.dropped += 1
            return
        if self._queued >= self._max_queued:
            lost = self._queue.pop(pod, [])
            self._queued -= len(lost)
            self.dropped += len(lost) + 1
            self._overflowed.add(pod)
            log.warning(
                "kv-index write queue full: the endpoint's entries will be cleared when the server answers",
                extra={"pod": pod, "server": self.settings.url, "queued": self._queued},
            )
            return
        self._queue.setdefault(pod, []).append(op)
        self._queued += 1
        self._wake.set()

    @property
    def flushed(self) -> bool:
        """Every operation queued so far is on the server (or was dropped)."""
        return not self._queue and not self._overflowed and not self._sending

    # -- what metrics read (values the background refresh keeps) --------------------------------

    def __len__(self) -> int:
        """Engine blocks on the server over all endpoints, as last read."""
        return sum(self._blocks.values())

    def endpoints(self) -> list[str]:
        return list(self._blocks)

    def blocks(self, pod: str) -> int:
        return self._blocks.get(pod, 0)

    # -- the request path ---------------------------------------------------------------------------

    async def longest_prefixes(self, keys: Sequence[int], pods: Sequence[str]) -> list[int] | None:
        """Per pod, the leading ``keys`` it holds (or speculatively holds); None without an answer in time."""
        client = self._client
        if not pods or not keys:
            return [0] * len(pods)
        if client is None or not self.connected:
            self._lookup_failed("server unreachable")
            return None
        limit = LOOKUP_TIMEOUT + LOOKUP_TIMEOUT_PER_BLOCK * len(keys)
        try:
            async with asyncio.timeout(limit):
                answer: Any = await client.evalsha(self._longest, 1, self.prefix, packed(keys), *pods)
        except TimeoutError:
            self._lookup_failed(f"no answer within {limit * 1000:.1f} ms")
            return None
        except (RedisError, OSError) as e:
            if isinstance(e, RedisConnectionError | OSError):
                self._failed(e)
            self._lookup_failed(f"{type(e).__name__}: {e}")
            return None
        return [int(n) for n in answer]

    def _lookup_failed(self, why: str) -> None:
        self.lookup_failures += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY:
            log.warning(
                "kv-index lookups failed: requests routed without prefix-match info",
                extra={"server": self.settings.url, "failures": self._unlogged, "error": why},
            )
            self._logged_at, self._unlogged = now, 0

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer and the probe (idempotent; needs the running loop). Connecting is theirs."""
        if self._client is not None:
            return
        pool = aioredis.BlockingConnectionPool.from_url(
            self.settings.url, max_connections=64, socket_connect_timeout=1.0, socket_timeout=5.0
        )
        self._client = aioredis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))
        self._tasks.start(self._probe(), f"kv-index probe {self.prefix}")
        self._tasks.start(self._write(), f"kv-index writer {self.prefix}")

    async def stop(self) -> None:
        """Stop both tasks and close the connections (queued writes are dropped: the events will come again).

        The tasks also see ``_closing``: redis-py may swallow a cancellation that lands inside a
        command, so a task so cancelled ends at its next turn instead of waiting forever.
        """
        self._closing = True
        self._wake.set()
        await self._tasks.stop()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose(close_connection_pool=True)

    async def _load_scripts(self, client: aioredis.Redis) -> None:
        self._write_sha, self._longest, self._sizes = [
            str(await client.script_load(text)) for text in (WRITE, LONGEST, SIZES)
        ]

    async def _probe(self) -> None:
        assert self._client is not None
        client, attempt = self._client, 0
        while not self._closing:
            try:
                await self._load_scripts(client)  # also after a restart that lost them
                answer: Any = await client.evalsha(self._sizes, 1, self.prefix)
            except (RedisError, OSError) as e:
                self._failed(e)
                await asyncio.sleep(min(_RETRY[1], _RETRY[0] * 2 ** min(attempt, 16)))
                attempt += 1
                continue
            attempt = 0
            self._blocks = {bytes(answer[i]).decode(): int(answer[i + 1]) for i in range(0, len(answer), 2)}
            self._ok()
            await asyncio.sleep(REFRESH)

    def _ok(self) -> None:
        if self.reached():
            log.info("kv-index server connected", extra={"server": self.settings.url, "queued": self._queued})
            self._wake.set()

    def _failed(self, error: BaseException) -> None:
        if self.unreached(error):
            log.warning(
                "kv-index server unreachable: routing without precise prefix-match info until it is back",
                extra={"server": self.settings.url, "error": self.last_error},
            )

    # -- the writer -------------------------------------------------------------------------------

    async def _write(self) -> None:
        assert self._client is not None
        client = self._client
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            if self._closing or not self.connected or not (self._queue or self._overflowed):
                continue
            batch, self._queue, self._queued = self._queue, {}, 0
            overflowed, self._overflowed = self._overflowed, set()
            self._sending = True
            try:
                await self._send(client, batch, overflowed)
            except (RedisError, OSError) as e:
                self._requeue(batch, overflowed)
                self._failed(e)
                continue
            finally:
                self._sending = False
            self._ok()

    def _requeue(self, batch: dict[str, list[_Op]], overflowed: set[str]) -> None:
        """A failed batch goes back in front of what was queued meanwhile (the queue's bound applies later)."""
        for pod, ops in self._queue.items():
            batch.setdefault(pod, []).extend(ops)
        self._queue = batch
        self._queued = sum(len(ops) for ops in batch.values())
        self._overflowed |= overflowed

    async def _send(self, client: aioredis.Redis, batch: dict[str, list[_Op]], overflowed: set[str]) -> None:
        parents = await self._parents(client, batch, overflowed)
        pipe = client.pipeline(transaction=False)
        for pod in overflowed - batch.keys():
            pipe.evalsha(self._write_sha, 1, self.prefix, pod, "C")
        for pod, ops in batch.items():
            words: list[tuple[str, ...]] = [("C",)] if pod in overflowed else []
            words.extend(self._operations(ops, parents.get(pod, {})))
            for start in range(0, len(words), _CHUNK):
                pipe.evalsha(
                    self._write_sha, 1, self.prefix, pod, *(w for op in words[start : start + _CHUNK] for w in op)
                )
        await pipe.execute()

    async def _parents(
        self, client: aioredis.Redis, batch: dict[str, list[_Op]], overflowed: set[str]
    ) -> dict[str, dict[str, int]]:
        """The chain tails of parents the batch refers to but does not store itself, read from the server."""
        wanted: dict[str, list[str]] = {}
        for pod, ops in batch.items():
            made: set[str] = set()
            cleared = pod in overflowed
            for op in ops:
                if isinstance(op, _Stored):
                    if op.parent is not None and op.parent not in made and not cleared:
                        wanted.setdefault(pod, []).append(op.parent)
                    made.update(op.engine_blocks)
                elif op[0] == "C":
                    cleared = True
                elif op[0] == "R":
                    made.add(op[1])  # what the batch removes is not looked up: it is gone by then
        if not wanted:
            return {}
        pipe = client.pipeline(transaction=False)
        for pod, fields in wanted.items():
            pipe.hmget(f"{self.prefix}:e:{pod}", fields)
        answers: list[Any] = await pipe.execute()
        return {
            pod: {f: last_key(blob) for f, blob in zip(fields, answer, strict=True) if blob}
            for (pod, fields), answer in zip(wanted.items(), answers, strict=True)
        }

    def _operations(self, ops: list[_Op], known: dict[str, int]) -> list[tuple[str, ...]]:
        """The script's operations for one endpoint, each stored event's keys computed from its parent's tail."""
        tails = dict(known)
        out: list[tuple[str, ...]] = []
        for op in ops:
            if not isinstance(op, _Stored):
                out.append(op)
                if op[0] == "R":
                    tails.pop(op[1], None)
                elif op[0] == "C":
                    tails.clear()
                continue
            if op.parent is None:
                parent = op.seed
            elif (tail := tails.get(op.parent)) is not None:
                parent = tail
            else:
                self.skipped += 1
                continue
            keys = block_keys(op.tokens, self.block_size, parent)
            per = op.per_block
            for i, engine in enumerate(op.engine_blocks):
                mine = keys[i * per : (i + 1) * per]
                out.append(("S", engine, packed(mine)))
                tails[engine] = mine[-1]
        return out
