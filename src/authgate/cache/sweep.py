"""What makes an invalidation durable: this worker's retry queue and its database sweep.

An invalidation that cannot reach Redis is not lost. It waits in the retry queue (re-sent
every `SWEEP_INTERVAL` until Redis takes it), and meanwhile the Redis tier answers those
sessions as revoked. And every worker sweeps the database (`store/sweep.py`) about once a
second for sessions revoked and users changed since its last sweep, less a margin for clock
skew and commit delay: it drops them from its copy and overwrites their Redis entries, so a
revocation made where Redis was unreachable, or by `authgate users deactivate` without
CACHE_URL, reaches every worker that can read the database within `SWEEP_LEASE` seconds.
A sweep also replays what a (re)subscribed worker may have missed before its copy opens.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import redis.asyncio as aioredis

from authgate.cache.entries import NO_ACK, PUBLISH_CHUNK, TOMBSTONE, Keys, message

if TYPE_CHECKING:
    from authgate.cache.local import LocalState

__all__ = ["SWEEP_INTERVAL", "SWEEP_LEASE", "SWEEP_MARGIN", "ChangeFeed", "Changes", "Sweeper"]

logger = logging.getLogger("authgate")

#: Every worker sweeps the database for revocations and user changes this often...
SWEEP_INTERVAL = 1.0
#: ...and uses its local copy only if a sweep begun this recently has completed: the bound on
#: how late a revocation that never reached Redis reaches a worker that reads the database.
SWEEP_LEASE = 3.0
#: How far before its last sweep a worker looks again: clock skew between hosts and the delay
#: between a writer stamping `revoked_at` and its commit (pool wait, statement, lock wait).
SWEEP_MARGIN = 15.0
#: At most this many invalidations wait for Redis; beyond, the oldest rely on the sweeps.
_MAX_PENDING = 100_000


class Changes(Protocol):
    sessions: list[tuple[str, datetime]]
    users: list[tuple[int, datetime]]


class ChangeFeed(Protocol):
    """What the sweep reads (`store.sweep.DatabaseChanges`)."""

    def now(self) -> datetime: ...

    async def since(self, since: datetime) -> Changes: ...


class Sweeper:
    """One worker's retry queue and database sweep (`run_forever` in the background)."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        local: LocalState,
        *,
        ttl: int,
        tombstone_ttl: int,
        op_timeout: float,
        changes: ChangeFeed | None,
        margin: float,
    ) -> None:
        self._redis = client
        self._keys = keys
        self._local = local
        self._ttl = ttl
        self._tombstone_ttl = tombstone_ttl
        self._op_timeout = op_timeout
        self.changes = changes
        self._margin = timedelta(seconds=margin)
        self._swept_to: datetime | None = None
        #: Revoked sessions already dropped here and written to Redis (or pending), with the
        #: time they were revoked (or heard of): the sweep skips them.
        self._seen_sessions: dict[str, datetime] = {}
        self._seen_users: dict[tuple[int, datetime], datetime] = {}
        #: Invalidations Redis has not taken yet: id -> whether to publish it when it does.
        self.pending_sessions: dict[str, bool] = {}
        self.pending_users: dict[int, bool] = {}
        self._woken = False
        self._wake_future: asyncio.Future[None] | None = None
        self._failing = False

    @property
    def pending(self) -> int:
        """Invalidations waiting for Redis in this worker's retry queue."""
        return len(self.pending_sessions) + len(self.pending_users)

    def remember_sessions(self, session_ids: list[str]) -> None:
        """These revocations are dropped here and in Redis: the sweep need not redo them."""
        if self.changes is None:
            return
        now = self.changes.now()
        for sid in session_ids:
            self._seen_sessions.setdefault(sid, now)

    def retry_sessions(self, session_ids: list[str]) -> None:
        """Tombstones (and a publish) Redis did not take."""
        for sid in session_ids:
            self.pending_sessions[sid] = True
        self._bound_pending()

    def retry_user(self, user_id: int) -> None:
        """A user entry delete (and a publish) Redis did not take."""
        self.pending_users[user_id] = True
        self._bound_pending()

    def _bound_pending(self) -> None:
        for pending in (self.pending_sessions, self.pending_users):
            excess = len(pending) - _MAX_PENDING
            if excess > 0:
                for key in list(pending)[:excess]:
                    del pending[key]  # type: ignore[arg-type]
                logger.error(
                    "state cache: retry queue full; %d invalidation(s) left to the sweeps", excess
                )

    def wake(self) -> None:
        """Sweep now (a (re)subscribe waits for its replay)."""
        self._woken = True
        if self._wake_future is not None and not self._wake_future.done():
            self._wake_future.set_result(None)

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._woken:
                self._wake_future = loop.create_future()
                # asyncio.wait, not asyncio.timeout: a cancel (stop) is never taken for the
                # interval ending.
                await asyncio.wait({self._wake_future}, timeout=SWEEP_INTERVAL)
                self._wake_future = None
            self._woken = False
            await self.maintain_once()

    async def maintain_once(self) -> bool:
        """One sweep of the database and one flush of the retry queue; True when both
        succeeded (and then the local copy may be used: opened after a (re)subscribe)."""
        started = self._local.now()
        token = self._local.replay_token()
        try:
            async with asyncio.timeout(self._op_timeout * 2 + SWEEP_LEASE):
                if self.changes is not None:
                    await self._sweep(self.changes)
                await self._flush()
        except Exception as exc:  # the database or Redis away: say so once, keep trying
            if not self._failing:
                self._failing = True
                logger.warning(
                    "state cache: sweep failed (%s); this worker stops using its copy after "
                    "%.0f s and keeps trying every %.0f s",
                    type(exc).__name__,
                    SWEEP_LEASE,
                    SWEEP_INTERVAL,
                )
            return False
        if self._failing:
            self._failing = False
            logger.warning("state cache: sweep recovered")
        self._local.replayed(started, token)
        return True

    async def _sweep(self, feed: ChangeFeed) -> None:
        now = feed.now()
        # The first sweep looks back over the Redis entries' lifetime: any entry that could
        # still be live in Redis was filled within `ttl`.
        base = self._swept_to if self._swept_to is not None else now - timedelta(seconds=self._ttl)
        changes = await feed.since(base - self._margin)
        new_sessions = [(sid, at) for sid, at in changes.sessions if sid not in self._seen_sessions]
        new_users = [(uid, at) for uid, at in changes.users if (uid, at) not in self._seen_users]
        if new_sessions:
            self._local.drop_sessions([sid for sid, _ in new_sessions])
            for sid, at in new_sessions:
                self._seen_sessions[sid] = at
                self.pending_sessions.setdefault(sid, False)
        for uid, at in new_users:
            self._local.drop_user(uid)
            self._seen_users[(uid, at)] = at
            self.pending_users.setdefault(uid, False)
        if new_sessions or new_users:
            self._bound_pending()
        self._swept_to = now
        # What the next sweep cannot return any more need not be remembered.
        cutoff = now - self._margin - timedelta(seconds=SWEEP_INTERVAL)
        if self._seen_sessions and next(iter(self._seen_sessions.values())) < cutoff:
            self._seen_sessions = {k: v for k, v in self._seen_sessions.items() if v >= cutoff}
        if self._seen_users:
            self._seen_users = {k: v for k, v in self._seen_users.items() if v >= cutoff}

    async def _flush(self) -> None:
        """Write what Redis has not taken yet (tombstones, user deletes), and publish the
        invalidations that were never published (nobody waits for their acknowledgement)."""
        if not self.pending_sessions and not self.pending_users:
            return
        sessions = list(self.pending_sessions.items())
        users = list(self.pending_users.items())
        async with (
            asyncio.timeout(self._op_timeout),
            self._redis.pipeline(transaction=False) as pipe,
        ):
            for sid, _ in sessions:
                pipe.set(self._keys.session(sid), TOMBSTONE, ex=self._tombstone_ttl)
            for uid, _ in users:
                pipe.delete(self._keys.user(uid))
            for kind, ids in (
                ("s", [sid for sid, publish in sessions if publish]),
                ("u", [str(uid) for uid, publish in users if publish]),
            ):
                for i in range(0, len(ids), PUBLISH_CHUNK):
                    chunk = ids[i : i + PUBLISH_CHUNK]
                    pipe.publish(self._keys.channel, message(kind, NO_ACK, chunk))
            await pipe.execute()
        for sid, publish in sessions:
            if self.pending_sessions.get(sid) == publish:
                del self.pending_sessions[sid]
        for uid, publish in users:
            if self.pending_users.get(uid) == publish:
                del self.pending_users[uid]
        self.remember_sessions([sid for sid, _ in sessions])
