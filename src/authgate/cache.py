"""The cache: state shared between workers that is not the durable record.

Two product backends behind one protocol: in-process memory (the embedded default, one
process) and Redis (`CACHE_URL`, shared by every worker and host). It holds the rate-limit
counters, and with Redis also session state (`statecache.py`). The database stays the source
of truth for everything that matters for security, so losing the cache never makes a revoked
session valid again.
"""

from __future__ import annotations

from typing import Protocol

import redis.asyncio as aioredis
from limits.aio.storage import MemoryStorage, RedisStorage, Storage

__all__ = ["Cache", "MemoryCache", "RedisCache", "open_cache"]


class Cache(Protocol):
    #: Backend of the `limits` rate limiters.
    limits_storage: Storage

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...


class MemoryCache:
    def __init__(self) -> None:
        self.limits_storage: Storage = MemoryStorage()

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class RedisCache:
    def __init__(self, url: str, *, prefix: str, timeout: float) -> None:
        # No socket_timeout here: redis-py would wrap every command in asyncio.wait_for,
        # a new task per command on the authenticated-request path. Callers bound each call
        # with asyncio.timeout() instead (statecache.py; readiness has its own 2 s).
        self.client = aioredis.Redis.from_url(url, socket_connect_timeout=timeout)
        self.limits_storage: Storage = RedisStorage(
            "async+" + url if not url.startswith("async+") else url,
            implementation="redispy",
            key_prefix=prefix + "limits",
            wrap_exceptions=True,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )

    async def ping(self) -> None:
        await self.client.ping()

    async def aclose(self) -> None:
        await self.client.aclose()


def open_cache(url: str | None, *, prefix: str, timeout: float = 2.0) -> Cache:
    if url is None:
        return MemoryCache()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("unsupported CACHE_URL scheme: use redis://, rediss:// or unix://")
    return RedisCache(url, prefix=prefix, timeout=timeout)
