"""Where the shared precise index lives on a Valkey/Redis server, and the three scripts that read and write it.

:class:`RedisIndexSettings` is the server (what a configuration names); nothing here imports
redis-py (which imports the OpenTelemetry SDK), so loading a configuration does not either.

Every key of one index starts with one hash tag, ``{epp-kv:<namespace>/<pool>/<producer>}`` (:func:`key_prefix`),
so two pools or two producers on one server never share a key, and every key of an index sits in
one slot: the scripts below touch only keys of their own index, so they run on a Redis Cluster too
(all of one index on one node). Under that prefix ``T``, per endpoint (as the in-memory index keeps
them), a block key being our xxh64 chain key as 16 hex digits of its little-endian bytes:

- ``T:h:<endpoint>``: block key → how many of the endpoint's engine blocks cover it (the refcount
  that keeps a key another stored block covers);
- ``T:e:<endpoint>``: engine block hash → the keys it covers (concatenated), so a BlockRemoved is
  resolved and a parent is found;
- ``T:s:<endpoint>``: block key → a speculative entry's deadline (server time, ms);
- ``T:pods``: the endpoints with engine blocks (the metrics' list); ``T:spec``: speculative entries
  by deadline (member: key digits + endpoint), so expired ones are deleted by the next write.

Clearing an endpoint deletes its three hashes: no scan of the keyspace, nothing per block.
:data:`WRITE` applies one endpoint's operations in order and is idempotent: a block already stored
with the same keys is skipped, a removal of a block not stored does nothing, so every replica may
apply the same events (per-pod discovery dials each pod from every replica). :data:`LONGEST`
answers a request in one round trip: per candidate, the leading keys held (or speculatively held
past the server's clock), asked in chunks that double (64, 128, ...) and stopping at the first miss,
so a candidate holding nothing costs one short lookup. :data:`SIZES` reads blocks per endpoint.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from epp.kvevents.decode import BlockHash
from epp.statesync.address import redis_url

__all__ = ["LONGEST", "SIZES", "WRITE", "RedisIndexSettings", "engine_field", "key_prefix", "last_key", "packed"]

_KEY_DIGITS = 16


@dataclass(frozen=True, slots=True)
class RedisIndexSettings:
    """``kvBlockIndexConfig.redisConfig`` / ``valkeyConfig``: the server's address (a URL redis-py reads)."""

    url: str
    backend_type: str = "redis"

    @classmethod
    def from_address(cls, address: str, backend_type: str) -> RedisIndexSettings:
        """Raises ``AddressError`` (a ValueError) naming what is wrong with ``address``."""
        return cls(redis_url(address), backend_type)


def key_prefix(pool: str, producer: str) -> str:
    """The hash-tagged prefix of every key of ``producer``'s index for ``pool`` (``namespace/name``)."""
    name = f"epp-kv:{pool}/{producer}".replace("{", "(").replace("}", ")")
    return "{" + name + "}"


def packed(keys: Sequence[int]) -> str:
    """Block keys as one string of 16 hex digits each (little-endian bytes), as the scripts split them."""
    data = array("Q", keys)
    if sys.byteorder == "big":
        data.byteswap()
    return data.tobytes().hex()


def last_key(blob: bytes | str) -> int:
    """The last key of a :func:`packed` string (an engine block's chain tail: its children's parent)."""
    text = blob.decode() if isinstance(blob, bytes) else blob
    return int.from_bytes(bytes.fromhex(text[-_KEY_DIGITS:]), "little")


def engine_field(block: BlockHash) -> str:
    """An engine block hash as a hash field: vLLM's ints in decimal, byte hashes in hex after ``x``."""
    return "x" + block.hex() if isinstance(block, bytes) else str(block)


_UNREF = """
local function unref(blob)
  for i = 1, #blob, 16 do
    local d = string.sub(blob, i, i + 15)
    if redis.call('HINCRBY', held, d, -1) <= 0 then redis.call('HDEL', held, d) end
  end
end
"""

WRITE = (
    """
local p, pod = KEYS[1], ARGV[1]
local eng, held, spec = p .. ':e:' .. pod, p .. ':h:' .. pod, p .. ':s:' .. pod
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', p .. ':spec', '-inf', now, 'LIMIT', 0, 2000)
for _, m in ipairs(expired) do
  redis.call('HDEL', p .. ':s:' .. string.sub(m, 17), string.sub(m, 1, 16))
  redis.call('ZREM', p .. ':spec', m)
end
"""
    + _UNREF
    + """
local i, n = 2, #ARGV
while i <= n do
  local op = ARGV[i]
  if op == 'S' then
    local h, blob = ARGV[i + 1], ARGV[i + 2]
    i = i + 3
    local old = redis.call('HGET', eng, h)
    if old ~= blob then
      if old then unref(old) end
      redis.call('HSET', eng, h, blob)
      for j = 1, #blob, 16 do redis.call('HINCRBY', held, string.sub(blob, j, j + 15), 1) end
    end
  elseif op == 'R' then
    local h = ARGV[i + 1]
    i = i + 2
    local old = redis.call('HGET', eng, h)
    if old then
      unref(old)
      redis.call('HDEL', eng, h)
    end
  elseif op == 'P' then
    local deadline, blob = now + tonumber(ARGV[i + 1]), ARGV[i + 2]
    i = i + 3
    for j = 1, #blob, 16 do
      local d = string.sub(blob, j, j + 15)
      redis.call('HSET', spec, d, deadline)
      redis.call('ZADD', p .. ':spec', deadline, d .. pod)
    end
  else
    i = i + 1
    redis.call('DEL', eng, held, spec)
  end
end
if redis.call('EXISTS', eng) == 1 then
  redis.call('SADD', p .. ':pods', pod)
else
  redis.call('SREM', p .. ':pods', pod)
end
return 1
"""
)
"""KEYS[1]: the prefix; ARGV: endpoint, then operations: ``S <engine hash> <keys>`` (stored),
``R <engine hash>`` (removed), ``P <ttl ms> <keys>`` (speculative), ``C`` (all cleared)."""

LONGEST = """
local p, blob = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local digits = {}
for i = 1, #blob, 16 do digits[#digits + 1] = string.sub(blob, i, i + 15) end
local n = #digits
local out = {}
for c = 2, #ARGV do
  local held, spec = p .. ':h:' .. ARGV[c], p .. ':s:' .. ARGV[c]
  local speculative = redis.call('EXISTS', spec) == 1
  local count, first, size, missed = 0, 1, 64, false
  while first <= n and not missed do
    local last = math.min(n, first + size - 1)
    local got = redis.call('HMGET', held, unpack(digits, first, last))
    local until_ms = speculative and redis.call('HMGET', spec, unpack(digits, first, last)) or {}
    for k = 1, last - first + 1 do
      if got[k] or (until_ms[k] and tonumber(until_ms[k]) > now) then
        count = count + 1
      else
        missed = true
        break
      end
    end
    first, size = last + 1, size * 2
  end
  out[#out + 1] = count
end
return out
"""
"""KEYS[1]: the prefix; ARGV: the request's keys (:func:`packed`), then the candidates' endpoint keys."""

SIZES = """
local out = {}
for _, pod in ipairs(redis.call('SMEMBERS', KEYS[1] .. ':pods')) do
  out[#out + 1] = pod
  out[#out + 1] = redis.call('HLEN', KEYS[1] .. ':e:' .. pod)
end
return out
"""
"""KEYS[1]: the prefix; answers endpoint, engine blocks, endpoint, engine blocks, ..."""
