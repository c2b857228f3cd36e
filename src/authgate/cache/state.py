"""Session and user state in Redis, so an authenticated request needs no database query.

The database stays the source of truth; this cache only answers "is this session live and
who is its user" faster, and every way to get it wrong is closed explicitly:

- A revocation (logout, reuse, reset, deactivation) *overwrites* the session's entry with a
  tombstone after the database commit; readers fill entries with SET NX only, so a reader
  that loaded the session just before the revocation can never put a live entry back over it.
- A change to a user (deactivation, verification, flags) deletes the user's entry after the
  commit. A reader racing that delete could re-insert the old values; entries therefore live
  only `ttl` seconds (60 by default), which bounds that window. Deactivation also revokes every
  session, and those tombstones take effect at once whatever the user entry says.
- Any Redis error on a read falls back to the database: losing Redis, or getting it back
  empty, never makes a revoked session valid again.
- An invalidation that cannot reach Redis is not lost. It waits in this worker's retry queue
  (re-sent every `SWEEP_INTERVAL` until Redis takes it), and meanwhile `get` answers those
  sessions as revoked. And every worker sweeps the database (`sweep.py`) about once a second
  for sessions revoked and users changed since its last sweep, less a margin for clock skew
  and commit delay: it drops them from its copy and overwrites their Redis entries, so a
  revocation made where Redis was unreachable, or by `authgate users deactivate` without
  CACHE_URL, reaches every worker that can read the database within `SWEEP_LEASE` seconds.

On top of Redis, every worker keeps a local copy of the live sessions and users it has seen
(`LocalState`), so a warm GET /me costs no network round trip at all. Redis pub/sub keeps the
copies honest:

- Every revocation and user change is PUBLISHed on the deployment's channel (prefix and Redis
  database number) after the Redis write, and the writer waits (up to `ack_timeout`) until
  every subscribed worker has confirmed that it dropped the entry; only then does the request
  that revoked answer. So when logout answers, no worker anywhere will accept that session's
  access token again.
- A worker applies a message in the socket's read callback itself, before the event loop runs
  any request handler, so even a worker that was stalled drops its entries before it serves.
- The local copy is used only while the subscription is provably current: the subscriber
  pings every `PING_INTERVAL` with its send time as payload, and a pong (which Redis sends
  after every message published before the ping) renews the copy's lease from that send
  time. The lease (`LEASE`) is shorter than a writer's acknowledgement wait, so a worker that
  did not confirm a revocation in time has stopped using its copy by the time the writer
  gives up. Bytes that merely arrive (a lagging stream) renew nothing.
- The copy is also used only while this worker's database sweeps succeed (`SWEEP_LEASE`), and
  after a (re)subscribe only once a sweep begun after it has completed: the sweep replays what
  the subscription may have missed.
- When the subscription drops, the copy is cleared and requests read Redis (and the
  database) until it is back; a fill that raced an invalidation is discarded (a generation
  counter), and local entries expire with `ttl`.

Only a shared cache can do this: an in-process cache alone would miss other workers'
revocations, so the embedded setup (no CACHE_URL) reads the database on every authenticated
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from authgate.store.models import User

__all__ = [
    "LEASE",
    "PING_INTERVAL",
    "SWEEP_INTERVAL",
    "SWEEP_LEASE",
    "CachedState",
    "ChangeFeed",
    "LocalState",
    "StateCache",
]

logger = logging.getLogger("authgate")

_REVOKED = b"revoked"
#: The subscriber pings this often; each pong carries the ping's send time.
PING_INTERVAL = 0.25
#: A worker's local copy is used only if a pong proved the subscription current this recently
#: (shorter than a writer's acknowledgement wait, `StateCache.ack_timeout`, 1 s by default).
LEASE = 0.75
#: Every worker sweeps the database for revocations and user changes this often...
SWEEP_INTERVAL = 1.0
#: ...and uses its local copy only if a sweep begun this recently has completed: the bound on
#: how late a revocation that never reached Redis reaches a worker that reads the database.
SWEEP_LEASE = 3.0
#: How far before its last sweep a worker looks again: clock skew between hosts and the delay
#: between a writer stamping `revoked_at` and its commit (pool wait, statement, lock wait).
SWEEP_MARGIN = 15.0
SUBSCRIBER_NAME = "authgate-invalidations"
_PING_TAG = "authgate-ping:"
#: In a published message instead of an acknowledgement key: nobody waits (a retry).
_NO_ACK = "-"
#: Ids per published message (a mass revocation goes out in several).
_PUBLISH_CHUNK = 500
#: At most this many invalidations wait for Redis; beyond, the oldest rely on the sweeps.
_MAX_PENDING = 100_000


@dataclass(frozen=True, slots=True)
class CachedState:
    user: User | None  # None: the session is known but its user entry is not cached
    revoked: bool
    user_id: int
    expires_at: datetime | None


class Changes(Protocol):
    sessions: list[tuple[str, datetime]]
    users: list[tuple[int, datetime]]


class ChangeFeed(Protocol):
    """What the sweep reads (`sweep.DatabaseChanges`)."""

    def now(self) -> datetime: ...

    async def since(self, since: datetime) -> Changes: ...


class LocalState:
    """This worker's copy of live sessions and their users (see the module docstring).

    Only live sessions of active users are kept. `get` answers only while the copy is open
    (subscribed, and replayed since), a pong proved the subscription current within `lease`
    seconds, and a database sweep begun within `sweep_lease` seconds has completed.
    """

    def __init__(
        self,
        *,
        ttl: float,
        lease: float = LEASE,
        sweep_lease: float = SWEEP_LEASE,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._lease = lease
        self._sweep_lease = sweep_lease
        self._max = max_entries
        self._clock = clock
        self._sessions: dict[str, tuple[int, datetime | None, float]] = {}
        self._users: dict[int, tuple[User, float]] = {}
        #: Bumped by every invalidation: a fill that began before one is discarded.
        self.generation = 0
        self._live = False
        self._heard = -math.inf
        self._swept = -math.inf

    @property
    def live(self) -> bool:
        if not self._live:
            return False
        now = self._clock()
        return now - self._heard < self._lease and now - self._swept < self._sweep_lease

    def now(self) -> float:
        return self._clock()

    def heard(self, sent_at: float | None = None) -> None:
        """The subscription was current as of `sent_at` (a ping's send time; default now)."""
        at = self._clock() if sent_at is None else sent_at
        self._heard = max(self._heard, at)

    def swept(self, started_at: float) -> None:
        """A database sweep begun at `started_at` has been applied."""
        self._swept = max(self._swept, started_at)

    def open(self) -> None:
        """Trust the copy again (after a replay that began after the subscription)."""
        self.generation += 1
        self._live = True

    def get(self, session_id: str, user_id: int) -> tuple[User, datetime | None] | None:
        """The user and session end, or None when this worker has no usable copy."""
        session = self._sessions.get(session_id)
        if session is None or not self.live:
            return None
        owner, expires_at, until = session
        user = self._users.get(user_id)
        now = self._clock()
        if owner != user_id or now >= until or user is None or now >= user[1]:
            return None
        return user[0], expires_at

    def put(
        self, generation: int, session_id: str, user: User, expires_at: datetime | None
    ) -> None:
        if generation != self.generation or not self.live:
            return
        # Bounded: the oldest entry goes first (dicts keep insertion order).
        if len(self._sessions) >= self._max:
            del self._sessions[next(iter(self._sessions))]
        if len(self._users) >= self._max:
            del self._users[next(iter(self._users))]
        until = self._clock() + self._ttl
        self._sessions[session_id] = (user.id, expires_at, until)
        self._users[user.id] = (_snapshot(user), until)

    def drop_sessions(self, session_ids: list[str]) -> None:
        self.generation += 1
        for sid in session_ids:
            self._sessions.pop(sid, None)

    def drop_user(self, user_id: int) -> None:
        self.generation += 1
        self._users.pop(user_id, None)

    def reset(self, *, live: bool) -> None:
        """Forget everything; `live=True` also vouches for the subscription and the sweep as of
        now (tests and embedders; the subscriber itself opens the copy after its replay)."""
        self.generation += 1
        self._sessions.clear()
        self._users.clear()
        self._live = live
        if live:
            now = self._clock()
            self.heard(now)
            self.swept(now)
        else:
            self._heard = -math.inf  # only a pong on the next subscription counts


class _Invalidations(asyncio.Protocol):
    """The subscription connection's protocol: messages are applied in the read callback.

    Receiving bytes proves nothing about how current they are; only pongs renew the lease
    (in `StateCache._on_message`)."""

    def __init__(self, on_message: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        self._reader = hiredis.Reader()
        self._on_message = on_message
        self._on_lost = on_lost
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (message := self._reader.gets()) is not False:
            self._on_message(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()
        if not self.lost.done():
            self.lost.set_result(None)


class StateCache:
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
        self._ack_timeout = ack_timeout
        self._prefix = prefix
        # Pub/sub channels are global to a Redis server, keys are per database number: the
        # number is in the channel (and the acknowledgement keys), so two deployments on one
        # server with the same prefix and different databases never hear each other.
        db = client.connection_pool.connection_kwargs.get("db", 0)
        self._scope = f"{prefix}db{int(db or 0)}:"
        self.channel = f"{self._scope}invalidate"
        self._ttl = ttl
        self.local = LocalState(ttl=ttl, clock=local_clock)
        self._subscriber: asyncio.Task[None] | None = None
        self._maintainer: asyncio.Task[None] | None = None
        self._acks: set[asyncio.Task[None]] = set()
        # A tombstone must outlive every access token of its family; after that, a miss
        # reads the (revoked) session from the database again.
        self._tombstone_ttl = tombstone_ttl
        # The sweep (see the module docstring).
        self._changes = changes
        self._margin = timedelta(seconds=sweep_margin)
        self._swept_to: datetime | None = None
        #: Revoked sessions already dropped here and written to Redis (or pending), with the
        #: time they were revoked (or heard of): the sweep skips them.
        self._seen_sessions: dict[str, datetime] = {}
        self._seen_users: dict[tuple[int, datetime], datetime] = {}
        #: Invalidations Redis has not taken yet: id -> whether to publish it when it does.
        self._pending_sessions: dict[str, bool] = {}
        self._pending_users: dict[int, bool] = {}
        self._subscribed = False
        self._epoch = 0  # bumped by every confirmed (re)subscribe
        self._woken = False
        self._wake_future: asyncio.Future[None] | None = None
        self._sweep_failing = False

    def _session_key(self, session_id: str) -> str:
        return f"{self._prefix}session:{session_id}"

    def _user_key(self, user_id: int) -> str:
        return f"{self._prefix}user:{user_id}"

    @property
    def pending(self) -> int:
        """Invalidations waiting for Redis in this worker's retry queue."""
        return len(self._pending_sessions) + len(self._pending_users)

    async def get(self, session_id: str, user_id: int) -> CachedState | None:
        """The cached state, or None on a miss (or any Redis trouble)."""
        if self._pending_sessions and session_id in self._pending_sessions:
            # Known revoked, its tombstone not yet in Redis: never read the stale entry.
            return CachedState(user=None, revoked=True, user_id=user_id, expires_at=None)
        try:
            async with asyncio.timeout(self._op_timeout):
                raw_session, raw_user = await self._redis.mget(
                    [self._session_key(session_id), self._user_key(user_id)]
                )
        except (RedisError, TimeoutError) as exc:
            logger.warning("state cache read failed (%s); using the database", type(exc).__name__)
            return None
        if raw_session is None:
            return None
        if _text(raw_session) == _REVOKED.decode():
            return CachedState(user=None, revoked=True, user_id=user_id, expires_at=None)
        owner, _, expiry = _text(raw_session).partition(":")
        if int(owner) != user_id:
            return CachedState(user=None, revoked=True, user_id=user_id, expires_at=None)
        expires_at = datetime.fromtimestamp(int(expiry), UTC) if expiry else None
        user = (
            _user_from_json(user_id, raw_user)
            if raw_user is not None and user_id not in self._pending_users
            else None
        )
        return CachedState(user=user, revoked=False, user_id=user_id, expires_at=expires_at)

    async def put(self, session_id: str, user: User, expires_at: datetime | None) -> None:
        """Remember a live session and its user (never over a tombstone: SET NX)."""
        expiry = str(int(expires_at.timestamp())) if expires_at is not None else ""
        try:
            async with (
                asyncio.timeout(self._op_timeout),
                self._redis.pipeline(transaction=False) as pipe,
            ):
                pipe.set(
                    self._session_key(session_id), f"{user.id}:{expiry}", ex=self._ttl, nx=True
                )
                pipe.set(self._user_key(user.id), _user_to_json(user), ex=self._ttl, nx=True)
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            logger.warning("state cache write failed (%s)", type(exc).__name__)

    async def revoke(self, session_ids: list[str]) -> None:
        if not session_ids:
            return
        self.local.drop_sessions(session_ids)

        def tombstones(pipe: Pipeline) -> None:
            for sid in session_ids:
                pipe.set(self._session_key(sid), _REVOKED, ex=self._tombstone_ttl)

        try:
            await self._invalidate("s", session_ids, tombstones)
        except (RedisError, TimeoutError) as exc:
            for sid in session_ids:
                self._pending_sessions[sid] = True
            self._bound_pending()
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
            await self._invalidate(
                "u", [str(user_id)], lambda pipe: pipe.delete(self._user_key(user_id))
            )
        except (RedisError, TimeoutError) as exc:
            self._pending_users[user_id] = True
            self._bound_pending()
            logger.error(
                "state cache: could not drop user %d (%s); retrying every %.0f s, and every "
                "worker applies the change from the database within %.0f s",
                user_id,
                type(exc).__name__,
                SWEEP_INTERVAL,
                SWEEP_LEASE,
            )

    def _bound_pending(self) -> None:
        for pending in (self._pending_sessions, self._pending_users):
            excess = len(pending) - _MAX_PENDING
            if excess > 0:
                for key in list(pending)[:excess]:
                    del pending[key]  # type: ignore[arg-type]
                logger.error(
                    "state cache: retry queue full; %d invalidation(s) left to the sweeps", excess
                )

    # --- invalidation across workers ------------------------------------------------------

    async def _invalidate(
        self, kind: str, ids: list[str], write: Callable[[Pipeline], Any]
    ) -> None:
        """`write` the Redis entries, publish `kind ack_key ids...` in the same round trip,
        then wait for the subscribed workers' acknowledgements."""
        ack_key = f"{self._scope}ack:{secrets.token_hex(8)}"
        async with (
            asyncio.timeout(self._op_timeout),
            self._redis.pipeline(transaction=False) as pipe,
        ):
            write(pipe)
            pipe.publish(self.channel, " ".join([kind, ack_key, *ids]))
            receivers = (await pipe.execute())[-1]
        if kind == "s":
            self._remember_sessions(ids)
        await self._await_acks(ack_key, int(receivers))

    def _remember_sessions(self, session_ids: list[str]) -> None:
        """These revocations are dropped here and in Redis: the sweep need not redo them."""
        if self._changes is None:
            return
        now = self._changes.now()
        for sid in session_ids:
            self._seen_sessions.setdefault(sid, now)

    async def _await_acks(self, ack_key: str, receivers: int) -> None:
        """Wait until `receivers` workers confirmed the invalidation, at most `ack_timeout`."""
        confirmed = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._ack_timeout
        try:
            while confirmed < receivers:
                left = deadline - loop.time()
                if left <= 0:
                    break
                async with asyncio.timeout(left + self._op_timeout):
                    popped = await self._redis.blpop([ack_key], timeout=left)
                if popped is None:
                    break
                confirmed += 1
        finally:
            if confirmed < receivers:
                logger.warning(
                    "state cache: %d of %d worker(s) did not confirm an invalidation within "
                    "%.1f s; their copies stopped within their %.2f s lease",
                    receivers - confirmed,
                    receivers,
                    self._ack_timeout,
                    LEASE,
                )

    def _on_message(self, message: Any) -> None:
        if isinstance(message, list) and len(message) == 2 and message[0] == b"pong":
            self._on_pong(message[1])
            return
        if isinstance(message, bytes):  # RESP3 answers PING <payload> with the payload
            self._on_pong(message)
            return
        if not isinstance(message, list) or len(message) < 3:
            return
        kind = message[0]
        if kind == b"subscribe":
            # Replay before trusting the copy: the sweep opens it (see `_maintain_once`).
            self.local.reset(live=False)
            self._subscribed = True
            self._epoch += 1
            self._wake()
            return
        if kind != b"message" or not isinstance(message[2], bytes):
            return  # something this subscriber did not ask for
        what, ack_key, *ids = message[2].decode().split(" ")
        if what == "s":
            self.local.drop_sessions(ids)
            self._remember_sessions(ids)  # the publisher wrote the tombstones first
        elif what == "u":
            for uid in ids:
                self.local.drop_user(int(uid))
        if ack_key == _NO_ACK:
            return
        task = asyncio.get_running_loop().create_task(self._ack(ack_key))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    def _on_pong(self, payload: Any) -> None:
        """A pong proves the subscription was current when its ping was sent."""
        if not isinstance(payload, bytes):
            return
        text = payload.decode("ascii", "replace")
        if not text.startswith(_PING_TAG):
            return
        try:
            sent_at = float(text[len(_PING_TAG) :])
        except ValueError:
            return
        if math.isfinite(sent_at) and sent_at <= self.local.now():
            self.local.heard(sent_at)

    def _on_lost(self) -> None:
        self._subscribed = False
        self.local.reset(live=False)

    async def _ack(self, ack_key: str) -> None:
        try:
            async with (
                asyncio.timeout(self._op_timeout),
                self._redis.pipeline(transaction=False) as pipe,
            ):
                pipe.rpush(ack_key, 1)
                pipe.expire(ack_key, 30)
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            logger.warning(
                "state cache: could not confirm an invalidation (%s)", type(exc).__name__
            )

    # --- the sweep and the retry queue ----------------------------------------------------

    def _wake(self) -> None:
        self._woken = True
        if self._wake_future is not None and not self._wake_future.done():
            self._wake_future.set_result(None)

    async def _maintain_forever(self) -> None:
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
        started = self.local.now()
        epoch, subscribed = self._epoch, self._subscribed
        try:
            async with asyncio.timeout(self._op_timeout * 2 + SWEEP_LEASE):
                if self._changes is not None:
                    await self._sweep()
                await self._flush()
        except Exception as exc:  # the database or Redis away: say so once, keep trying
            if not self._sweep_failing:
                self._sweep_failing = True
                logger.warning(
                    "state cache: sweep failed (%s); this worker stops using its copy after "
                    "%.0f s and keeps trying every %.0f s",
                    type(exc).__name__,
                    SWEEP_LEASE,
                    SWEEP_INTERVAL,
                )
            return False
        if self._sweep_failing:
            self._sweep_failing = False
            logger.warning("state cache: sweep recovered")
        self.local.swept(started)
        if subscribed and self._subscribed and epoch == self._epoch and not self.local._live:
            self.local.open()
        return True

    async def _sweep(self) -> None:
        assert self._changes is not None
        now = self._changes.now()
        # The first sweep looks back over the Redis entries' lifetime: any entry that could
        # still be live in Redis was filled within `ttl`.
        base = self._swept_to if self._swept_to is not None else now - timedelta(seconds=self._ttl)
        since = base - self._margin
        changes = await self._changes.since(since)
        new_sessions = [(sid, at) for sid, at in changes.sessions if sid not in self._seen_sessions]
        new_users = [(uid, at) for uid, at in changes.users if (uid, at) not in self._seen_users]
        if new_sessions:
            self.local.drop_sessions([sid for sid, _ in new_sessions])
            for sid, at in new_sessions:
                self._seen_sessions[sid] = at
                self._pending_sessions.setdefault(sid, False)
        for uid, at in new_users:
            self.local.drop_user(uid)
            self._seen_users[(uid, at)] = at
            self._pending_users.setdefault(uid, False)
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
        if not self._pending_sessions and not self._pending_users:
            return
        sessions = list(self._pending_sessions.items())
        users = list(self._pending_users.items())
        async with (
            asyncio.timeout(self._op_timeout),
            self._redis.pipeline(transaction=False) as pipe,
        ):
            for sid, _ in sessions:
                pipe.set(self._session_key(sid), _REVOKED, ex=self._tombstone_ttl)
            for uid, _ in users:
                pipe.delete(self._user_key(uid))
            for kind, ids in (
                ("s", [sid for sid, publish in sessions if publish]),
                ("u", [str(uid) for uid, publish in users if publish]),
            ):
                for i in range(0, len(ids), _PUBLISH_CHUNK):
                    chunk = ids[i : i + _PUBLISH_CHUNK]
                    pipe.publish(self.channel, " ".join([kind, _NO_ACK, *chunk]))
            await pipe.execute()
        for sid, publish in sessions:
            if self._pending_sessions.get(sid) == publish:
                del self._pending_sessions[sid]
        for uid, publish in users:
            if self._pending_users.get(uid) == publish:
                del self._pending_users[uid]
        self._remember_sessions([sid for sid, _ in sessions])

    async def start(self) -> None:
        """Subscribe to invalidations and sweep in the background (from the lifespan)."""
        loop = asyncio.get_running_loop()
        if self._maintainer is None:
            self._maintainer = loop.create_task(self._maintain_forever())
        if self._subscriber is None:
            self._subscriber = loop.create_task(self._subscribe_forever())

    async def stop(self) -> None:
        for task in (self._subscriber, self._maintainer):
            if task is not None:
                task.cancel()
                await asyncio.wait({task}, timeout=self._op_timeout)
        self._subscriber = self._maintainer = None
        for ack in list(self._acks):
            with contextlib.suppress(asyncio.CancelledError, RedisError, TimeoutError):
                await ack
        self._subscribed = False
        self.local.reset(live=False)

    async def _subscribe_forever(self) -> None:
        backoff = 0.25
        while True:
            try:
                await self._subscribe_once()
                backoff = 0.25
            except (RedisError, OSError, TimeoutError) as exc:
                logger.warning(
                    "state cache: invalidation subscription unavailable (%s); this worker reads "
                    "Redis on every request until it is back",
                    type(exc).__name__,
                )
            self._on_lost()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _subscribe_once(self) -> None:
        # redis-py opens the connection (TLS, AUTH, HELLO, client name as CACHE_URL says); then
        # the transport is handed to `_Invalidations`, so messages are applied in the read
        # callback rather than by a task that may run after a request handler.
        conn = self._redis.connection_pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            async with asyncio.timeout(self._op_timeout):
                await conn.connect()
                # Named, so an operator sees it in CLIENT LIST (one per worker).
                await conn.send_command("CLIENT", "SETNAME", SUBSCRIBER_NAME)
                await conn.read_response()
            writer = getattr(conn, "_writer", None)
            if writer is None:  # pragma: no cover - a redis-py without the stream writer
                raise RedisError("cannot take over the subscription connection")
            transport = writer.transport
            protocol = _Invalidations(self._on_message, self._on_lost)
            transport.set_protocol(protocol)

            def ping() -> bytes:
                # The payload is this worker's monotonic time: the pong says "current as of".
                payload = f"{_PING_TAG}{self.local.now():.6f}"
                return b"".join(conn.pack_command("PING", payload))

            transport.write(b"".join(conn.pack_command("SUBSCRIBE", self.channel)) + ping())
            while not protocol.lost.done():
                # asyncio.wait, not asyncio.timeout: a cancel (stop) must never be mistaken
                # for the ping interval ending.
                await asyncio.wait({protocol.lost}, timeout=PING_INTERVAL)
                if not protocol.lost.done():
                    transport.write(ping())
        finally:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await conn.disconnect(nowait=True)


def _snapshot(user: User) -> User:
    """A detached copy with the public fields (never the password hash)."""
    return _public_user(
        user.id,
        email=user.email,
        email_key=user.email_key,
        active=user.is_active,
        superuser=user.is_superuser,
        verified=user.email_verified,
        created=user.created_at,
        updated=user.updated_at,
    )


def _public_user(
    user_id: int,
    *,
    email: str,
    email_key: str,
    active: bool,
    superuser: bool,
    verified: bool,
    created: datetime,
    updated: datetime,
) -> User:
    # A detached User with the public fields: what GET /me and `CurrentUser` need.
    return User(
        id=user_id,
        email=email,
        email_key=email_key,
        password_hash="",  # never cached, never read from a request user  # nosec B106
        is_active=active,
        is_superuser=superuser,
        email_verified=verified,
        created_at=created,
        updated_at=updated,
    )


def _user_to_json(user: User) -> str:
    return json.dumps(
        {
            "email": user.email,
            "active": user.is_active,
            "superuser": user.is_superuser,
            "verified": user.email_verified,
            "created": user.created_at.timestamp(),
        }
    )


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _user_from_json(user_id: int, raw: bytes | str) -> User:
    data = json.loads(raw)
    created = datetime.fromtimestamp(data["created"], UTC)
    return _public_user(
        user_id,
        email=data["email"],
        email_key=data["email"].lower(),
        active=data["active"],
        superuser=data["superuser"],
        verified=data["verified"],
        created=created,
        updated=created,
    )
