"""Where the shared precise index lives on a Valkey/Redis server, and the three scripts that read and write it.

Every key of one index starts with one hash tag, ``{epp-kv:<pool>/<producer name>}`` (:func:`key_prefix`),
so two pools or two producers on one server never share a key, and every key of an index sits in
one slot: the scripts below touch only keys of their own index, so they run on a Redis Cluster too
(all of one index on one node). Under that prefix ``T``:

- ``T:k:<key>``: a hash per block key (our xxh64 chain key, as 16 hex digits of its little-endian
  bytes): field ``<endpoint>`` → how many of the endpoint's engine blocks cover the key (the
  refcount that keeps a key another stored block covers), field ``~<endpoint>`` → a speculative
  entry's deadline (server time, ms);
- ``T:e:<endpoint>``: a hash per endpoint, engine block hash → the keys it covers (concatenated),
  so a BlockRemoved is resolved, a parent is found, and clearing the endpoint reads only its own
  blocks (no scan of the keyspace);
- ``T:pods``: the endpoints with engine blocks (the metrics' list);
- ``T:spec``: speculative entries by deadline (member: key digits + endpoint), so expired ones are
  deleted by the next write rather than left behind.

:data:`WRITE` applies one endpoint's operations in order and is idempotent: a block already stored
with the same keys is skipped, a removal of a block not stored does nothing, so every replica may
apply the same events (per-pod discovery dials each pod from every replica). :data:`LONGEST`
answers a request in one round trip: per candidate, the leading keys held (or speculatively held
past the server's clock), stopping at the first key no candidate holds. :data:`SIZES` reads
blocks per endpoint for the metrics.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

from epp.kvevents.decode import BlockHash

__all__ = ["LONGEST", "SIZES", "WRITE", "engine_field", "key_prefix", "last_key", "packed"]

_KEY_DIGITS = 16


def key_prefix(pool: str, producer: str) -> str:
    """The hash-tagged prefix of every key of ``producer``'s index for ``pool``."""
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
    local k = p .. ':k:' .. string.sub(blob, i, i + 15)
    if redis.call('HINCRBY', k, pod, -1) <= 0 then redis.call('HDEL', k, pod) end
  end
end
"""

WRITE = (
    """
local p, pod = KEYS[1], ARGV[1]
local eng = p .. ':e:' .. pod
local spec = p .. ':spec'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', spec, '-inf', now, 'LIMIT', 0, 2000)
for _, m in ipairs(expired) do
  redis.call('HDEL', p .. ':k:' .. string.sub(m, 1, 16), '~' .. string.sub(m, 17))
  redis.call('ZREM', spec, m)
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
      for j = 1, #blob, 16 do redis.call('HINCRBY', p .. ':k:' .. string.sub(blob, j, j + 15), pod, 1) end
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
      local digits = string.sub(blob, j, j + 15)
      redis.call('HSET', p .. ':k:' .. digits, '~' .. pod, deadline)
      redis.call('ZADD', spec, deadline, digits .. pod)
    end
  else
    i = i + 1
    for _, blob in ipairs(redis.call('HVALS', eng)) do unref(blob) end
    redis.call('DEL', eng)
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
local nc = #ARGV - 1
local fields, counts, alive = {}, {}, {}
for j = 1, nc do
  fields[2 * j - 1] = ARGV[j + 1]
  fields[2 * j] = '~' .. ARGV[j + 1]
  counts[j] = 0
  alive[j] = true
end
local live = nc
for i = 1, #blob, 16 do
  local vals = redis.call('HMGET', p .. ':k:' .. string.sub(blob, i, i + 15), unpack(fields))
  for j = 1, nc do
    if alive[j] then
      local until_ms = vals[2 * j]
      if vals[2 * j - 1] or (until_ms and tonumber(until_ms) > now) then
        counts[j] = counts[j] + 1
      else
        alive[j] = false
        live = live - 1
      end
    end
  end
  if live == 0 then break end
end
return counts
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
