"""Session state in tiers, so an authenticated request needs no database query.

`authenticate` asks `peek` (this worker's copy, `local.py`: no round trip, no coroutine),
then `lookup` (Redis, then the database through the `load` it is given). The database stays
the source of truth; the tiers only answer "is this session live and who is its user"
faster, and every way to get it wrong is closed explicitly:

- A revocation (logout, reuse, reset, deactivation) *overwrites* the session's Redis entry
  with a tombstone after the database commit; readers fill entries with SET NX only, so a
  reader that loaded the session just before the revocation can never put a live entry back
  over it.
- A change to a user (deactivation, verification, flags) deletes the user's entry after the
  commit. A reader racing that delete could re-insert the old values; entries therefore live
  only `ttl` seconds (60 by default), which bounds that window. Deactivation also revokes every
  session, and those tombstones take effect at once whatever the user entry says.
- Any Redis error on a read falls back to the database: losing Redis, or getting it back
  empty, never makes a revoked session valid again.
- Every worker's copy is told of each invalidation before the request that made it answers
  (`invalidation.py`), and invalidations that cannot reach Redis are retried and replayed
  from the database (`sweep.py`).

Only a shared cache can do this: an in-process cache alone would miss other workers'
revocations, so the embedded setup (no CACHE_URL) uses `DatabaseStates`, which reads the
database on every authenticated request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from authgate.cache import entries
from authgate.cache.entries import CachedState, Keys
from authgate.cache.invalidation import Publisher, Subscriber
from authgate.cache.local import LocalState
from authgate.cache.sweep import SWEEP_INTERVAL, SWEEP_LEASE, SWEEP_MARGIN, ChangeFeed, Sweeper
from authgate.principal import Principal, SessionState

__all__ = ["DatabaseStates", "Load", "SessionStates", "StateCache"]

logger = logging.getLogger("authgate")

#: Reads a session and its user from the database (`SessionStore.state`).
Load = Callable[[str, int], Awaitable[SessionState | None]]


class SessionStates(Protocol):
    """Whether a session is live and who its user is, and the invalidations that change it."""

    def peek(self, session_id: str, user_id: int) -> SessionState | None:
        """This worker's copy, synchronously (GET /me's warm path: nothing to await)."""
        ...

    def lookup(
        self, session_id: str, user_id: int, *, load: Load
    ) -> Awaitable[SessionState | None]:
        """The tiers below `peek`, ending with `load`, filling what missed; call it only when
        `peek` answered None. None: no such session, or one known to be revoked. A state may
        still be revoked, over or of an inactive user: the caller checks, with its clock."""
        ...

    async def revoke(self, session_ids: list[str]) -> None:
        """After the commit that revoked `session_ids`."""

    async def forget_user(self, user_id: int) -> None:
        """After the commit that changed a user."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class DatabaseStates:
    """No shared cache: the database answers every time (nothing to invalidate)."""

    def peek(self, session_id: str, user_id: int) -> SessionState | None:
        return None

    def lookup(
        self, session_id: str, user_id: int, *, load: Load
    ) -> Awaitable[SessionState | None]:
        return load(session_id, user_id)  # no coroutine of its own around the query

    async def revoke(self, session_ids: list[str]) -> None:
        return None

    async def forget_user(self, user_id: int) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


def _ignore(redis_hit: bool) -> None:
    return None


class StateCache:
    """This worker's copy over Redis over the database."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str,
        ttl: int = 60,
        tombstone_ttl: int = 3600,
        op_timeout: float = 2.0,
        ack_timeout: float = 1.0,
        changes: ChangeFeed | None = None,
        sweep_margin: float = SWEEP_MARGIN,
        local_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = client
        self._op_timeout = op_timeout
        db = client.connection_pool.connection_kwargs.get("db", 0)
        self._keys = Keys(prefix, int(db or 0))
        self.channel = self._keys.channel
        self._ttl = ttl
        # A tombstone must outlive every access token of its family; after that, a miss
        # reads the (revoked) session from the database again.
        self._tombstone_ttl = tombstone_ttl
        self.local = LocalState(ttl=ttl, clock=local_clock)
        # Bound once: `peek` is the copy's own `get`, no call of this class in between.
        self.peek = self.local.get
        self.sweeper = Sweeper(
            client,
            self._keys,
            self.local,
            ttl=ttl,
            tombstone_ttl=tombstone_ttl,
            op_timeout=op_timeout,
            changes=changes,
            margin=sweep_margin,
        )
        self.publisher = Publisher(
            client, self._keys, self.sweeper, op_timeout=op_timeout, ack_timeout=ack_timeout
        )
        self.subscriber = Subscriber(
            client, self._keys, self.local, self.sweeper, op_timeout=op_timeout
        )
        self._tasks: list[asyncio.Task[None]] = []
        #: Told of every lookup past this worker's copy, and whether Redis had it (metrics).
        self.on_lookup: Callable[[bool], None] = _ignore

    @property
    def pending(self) -> int:
        """Invalidations waiting for Redis in this worker's retry queue."""
        return self.sweeper.pending

    async def maintain_once(self) -> bool:
        """One database sweep and retry-queue flush now (see `Sweeper.maintain_once`)."""
        return await self.sweeper.maintain_once()

    async def lookup(self, session_id: str, user_id: int, *, load: Load) -> SessionState | None:
        generation = self.local.generation  # before any await: see LocalState.put
        cached = await self.get(session_id, user_id)
        self.on_lookup(cached is not None)
        if cached is not None and cached.revoked:
            return None
        if cached is not None and cached.principal is not None:
            state = SessionState(cached.principal, False, cached.expires_at)
        else:
            loaded = await load(session_id, user_id)
            if loaded is None or loaded.revoked:
                return loaded
            await self.put(session_id, loaded.principal, loaded.expires_at)
            state = loaded
        if state.principal.is_active:
            self.local.put(generation, session_id, state.principal, state.expires_at)
        return state

    async def get(self, session_id: str, user_id: int) -> CachedState | None:
        """What Redis holds, or None on a miss (or any Redis trouble)."""
        pending = self.sweeper
        if pending.pending_sessions and session_id in pending.pending_sessions:
            # Known revoked, its tombstone not yet in Redis: never read the stale entry.
            return CachedState(principal=None, revoked=True, expires_at=None)
        try:
            async with asyncio.timeout(self._op_timeout):
                raw_session, raw_user = await self._redis.mget(
                    [self._keys.session(session_id), self._keys.user(user_id)]
                )
        except (RedisError, TimeoutError) as exc:
            logger.warning("state cache read failed (%s); using the database", type(exc).__name__)
            return None
        if raw_session is None:
            return None
        state = entries.read_session(raw_session, user_id)
        if state.revoked or raw_user is None or user_id in pending.pending_users:
            return state
        principal = entries.read_principal(user_id, raw_user)
        return CachedState(principal=principal, revoked=False, expires_at=state.expires_at)

    async def put(self, session_id: str, principal: Principal, expires_at: datetime | None) -> None:
        """Remember a live session and its user (never over a tombstone: SET NX)."""
        try:
            async with (
                asyncio.timeout(self._op_timeout),
                self._redis.pipeline(transaction=False) as pipe,
            ):
                pipe.set(
                    self._keys.session(session_id),
                    entries.session_entry(principal.id, expires_at),
                    ex=self._ttl,
                    nx=True,
                )
                pipe.set(
                    self._keys.user(principal.id),
                    entries.principal_entry(principal),
                    ex=self._ttl,
                    nx=True,
                )
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            logger.warning("state cache write failed (%s)", type(exc).__name__)

    async def revoke(self, session_ids: list[str]) -> None:
        if not session_ids:
            return
        self.local.drop_sessions(session_ids)

        def tombstones(pipe: Pipeline) -> None:
            for sid in session_ids:
                pipe.set(self._keys.session(sid), entries.TOMBSTONE, ex=self._tombstone_ttl)

        try:
            await self.publisher.invalidate("s", session_ids, tombstones)
        except (RedisError, TimeoutError) as exc:
            self.sweeper.retry_sessions(session_ids)
            logger.error(
                "state cache: could not record %d revocation(s) (%s); retrying every %.0f s, "
                "and every worker applies them from the database within %.0f s",
                len(session_ids),
                type(exc).__name__,
                SWEEP_INTERVAL,
                SWEEP_LEASE,
            )

    async def forget_user(self, user_id: int) -> None:
        self.local.drop_user(user_id)
        try:
            await self.publisher.invalidate(
                "u", [str(user_id)], lambda pipe: pipe.delete(self._keys.user(user_id))
            )
        except (RedisError, TimeoutError) as exc:
            self.sweeper.retry_user(user_id)
            logger.error(
                "state cache: could not drop user %d (%s); retrying every %.0f s, and every "
                "worker applies the change from the database within %.0f s",
                user_id,
                type(exc).__name__,
                SWEEP_INTERVAL,
                SWEEP_LEASE,
            )

    async def start(self) -> None:
        """Subscribe to invalidations and sweep in the background (from the lifespan)."""
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self.sweeper.run_forever()),
                loop.create_task(self.subscriber.run_forever()),
            ]

    async def stop(self) -> None:
        for task in reversed(self._tasks):  # the subscription first, as it was started last
            task.cancel()
            await asyncio.wait({task}, timeout=self._op_timeout)
        self._tasks = []
        await self.subscriber.drain()
        self.local.unsubscribed()
