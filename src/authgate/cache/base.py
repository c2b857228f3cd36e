"""The cache: state shared between workers that is not the durable record.

Redis (`CACHE_URL`), shared by every worker and host: it holds the rate-limit counters
(`counters.RedisCounters`) and session state (`state.StateCache`). Without it
(`NoCache`) the rate-limit counters live in the database, which every worker shares too, and
session state is read from the database (`state.DatabaseStates`). The database stays the
source of truth for everything that matters for security, so losing the cache never makes a
revoked session valid again.
"""

from __future__ import annotations

from typing import Protocol

import redis.asyncio as aioredis

from authgate.cache.state import DatabaseStates, SessionStates, StateCache
from authgate.cache.sweep import ChangeFeed

__all__ = ["Cache", "NoCache", "RedisCache", "open_cache"]


class Cache(Protocol):
    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...

    def session_states(
        self, *, prefix: str, tombstone_ttl: int, changes: ChangeFeed, sweep_margin: float
    ) -> SessionStates:
        """The session-state tiers this cache offers (see `state.py`)."""
        ...


class NoCache:
    """No shared cache configured (the embedded setup): session state comes from the database."""

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def session_states(
        self, *, prefix: str, tombstone_ttl: int, changes: ChangeFeed, sweep_margin: float
    ) -> SessionStates:
        return DatabaseStates()


class RedisCache:
    def __init__(self, url: str, *, timeout: float) -> None:
        # No socket_timeout here: redis-py would wrap every command in asyncio.wait_for,
        # a new task per command on the authenticated-request path. Callers bound each call
        # with asyncio.timeout() instead (cache/state.py, cache/counters.py; readiness has its
        # own 2 s).
        self.client = aioredis.Redis.from_url(url, socket_connect_timeout=timeout)

    async def ping(self) -> None:
        await self.client.ping()

    async def aclose(self) -> None:
        await self.client.aclose()

    def session_states(
        self, *, prefix: str, tombstone_ttl: int, changes: ChangeFeed, sweep_margin: float
    ) -> SessionStates:
        return StateCache(
            self.client,
            prefix=prefix,
            tombstone_ttl=tombstone_ttl,
            changes=changes,
            sweep_margin=sweep_margin,
        )


def open_cache(url: str | None, *, timeout: float = 2.0) -> Cache:
    if url is None:
        return NoCache()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("unsupported CACHE_URL scheme: use redis://, rediss:// or unix://")
    return RedisCache(url, timeout=timeout)
