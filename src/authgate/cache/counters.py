"""Rate-limit counters: the protocol the limiter counts through (`CounterStore`), and its
Redis backend (`CACHE_URL`); the database backend is `store.limits.SqlCounters`.

- `RedisCounters`: a hash per key, hit by one Lua script (atomic in Redis), expiring with
  its window; every worker and host on that Redis counts together.

A hit can be given back (`give_back`): a login reserves its failure slot before the
password is verified and returns it when the request turns out not to be an attempt (it
succeeded, was refused as busy, or was cancelled). Each window is identified by its end,
which carries a random offset of under a millisecond, so a slot is only ever given back to the
window it was taken from, never to a newer one that happens to share the key.
"""

from __future__ import annotations

import asyncio
import math
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import redis.asyncio as aioredis

__all__ = ["CounterStore", "Hit", "RedisCounters", "fresh_end"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Hit:
    """The outcome of one hit: whether it was counted, the count after it (or, refused, the
    count that refused it), and the end of the window it counted in (its identity)."""

    allowed: bool
    hits: int
    window_end: datetime

    def retry_after(self, now: datetime) -> int:
        """Whole seconds until the window ends, at least 1 (the Retry-After header)."""
        return max(1, math.ceil((self.window_end - now).total_seconds()))


class CounterStore(Protocol):
    async def hit(self, key: str, *, limit: int, window: float, now: datetime) -> Hit:
        """Count one hit in the key's current window (a new window of `window` seconds when
        there is none or it is over), unless that would pass `limit`: then count nothing."""
        ...

    async def give_back(self, key: str, window_end: datetime) -> None:
        """Uncount one allowed hit, if its window (named by its end) is still the current one."""
        ...

    async def count(self, key: str, now: datetime) -> int:
        """Hits in the key's current window (0 when there is none)."""
        ...

    async def clear(self, *keys: str) -> None: ...


def fresh_end(now: datetime, window: float) -> datetime:
    # The random microseconds (under a millisecond off the window, so whole seconds of
    # Retry-After stay exact) make the end a window's identity even under a frozen clock.
    return now + timedelta(seconds=window, microseconds=-secrets.randbelow(1000))


# --- Redis ------------------------------------------------------------------------------

# Times are integer microseconds since the epoch from the application's clock (the same
# clock on every host, as for token expiry). Window ends are kept as the caller's decimal
# strings, never through Lua's number formatting (which would round them).
_HIT = """
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'n', 'e')
local n = tonumber(v[1])
local e = v[2]
if n == nil or not e or tonumber(e) == nil or tonumber(e) <= now then
  n = 0
  e = ARGV[3]
end
if n + 1 > limit then
  return {0, n, e}
end
n = n + 1
redis.call('HSET', KEYS[1], 'n', n, 'e', e)
redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(e) - now) / 1000) + 1000)
return {1, n, e}
"""
_GIVE_BACK = """
local v = redis.call('HMGET', KEYS[1], 'n', 'e')
if v[2] == ARGV[1] and tonumber(v[1]) ~= nil and tonumber(v[1]) > 0 then
  redis.call('HINCRBY', KEYS[1], 'n', -1)
end
return 0
"""


def _micros(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


class RedisCounters:
    """Counters in Redis (`CACHE_URL`): every worker and host on that Redis counts together."""

    def __init__(self, client: aioredis.Redis, *, prefix: str, timeout: float = 2.0) -> None:
        self._client = client
        self._prefix = prefix + "rl:"
        self._timeout = timeout
        self._hit = client.register_script(_HIT)
        self._give_back = client.register_script(_GIVE_BACK)

    async def hit(self, key: str, *, limit: int, window: float, now: datetime) -> Hit:
        args = [_micros(now), limit, _micros(fresh_end(now, window))]
        async with asyncio.timeout(self._timeout):
            allowed, hits, end = await self._hit(keys=[self._prefix + key], args=args)
        return Hit(bool(allowed), int(hits), _from_micros(int(end)))

    async def give_back(self, key: str, window_end: datetime) -> None:
        async with asyncio.timeout(self._timeout):
            await self._give_back(keys=[self._prefix + key], args=[str(_micros(window_end))])

    async def count(self, key: str, now: datetime) -> int:
        async with asyncio.timeout(self._timeout):
            hits, end = await self._client.hmget(self._prefix + key, ["n", "e"])
        if hits is None or end is None or int(end) <= _micros(now):
            return 0
        return int(hits)

    async def clear(self, *keys: str) -> None:
        if keys:
            async with asyncio.timeout(self._timeout):
                await self._client.delete(*(self._prefix + k for k in keys))
