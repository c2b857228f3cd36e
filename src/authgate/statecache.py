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
- Any Redis error falls back to the database (and invalidation errors are logged): losing
  Redis, or getting it back empty, never makes a revoked session valid again.

On top of Redis, every worker keeps a local copy of the live sessions and users it has seen
(`LocalState`), so a warm GET /me costs no network round trip at all. Redis pub/sub keeps the
copies honest:

- Every revocation and user change is PUBLISHed on the prefix's channel after the Redis write,
  and the writer waits (up to `ack_timeout`) until every subscribed worker has confirmed that
  it dropped the entry; only then does the request that revoked answer. So when logout answers,
  no worker anywhere will accept that session's access token again.
- A worker applies a message in the socket's read callback itself, before the event loop runs
  any request handler, so even a worker that was stalled drops its entries before it serves.
- The local copy is used only while the subscription is up. When it drops, the copy is
  cleared and requests read Redis (and the database) until it is back; a fill that raced an
  invalidation is discarded (a generation counter), and local entries expire with `ttl`.

Only a shared cache can do this: an in-process cache alone would miss other workers'
revocations, so the embedded setup (no CACHE_URL) reads the database on every authenticated
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from authgate.models import User

__all__ = ["CachedState", "LocalState", "StateCache"]

logger = logging.getLogger("authgate")

_REVOKED = b"revoked"
#: A worker's local copy is used only if its subscription was heard from this recently.
LEASE = 1.5
SUBSCRIBER_NAME = "authgate-invalidations"


@dataclass(frozen=True, slots=True)
class CachedState:
    user: User | None  # None: the session is known but its user entry is not cached
    revoked: bool
    user_id: int
    expires_at: datetime | None


class LocalState:
    """This worker's copy of live sessions and their users (see the module docstring).

    Only live sessions of active users are kept. `get` answers only while the invalidation
    subscription is up and was heard from within `lease` seconds (it pings twice as often),
    so a Redis that hangs turns the copy off before a writer's publish times out.
    """

    def __init__(
        self,
        *,
        ttl: float,
        lease: float = LEASE,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._lease = lease
        self._max = max_entries
        self._clock = clock
        self._sessions: dict[str, tuple[int, datetime | None, float]] = {}
        self._users: dict[int, tuple[User, float]] = {}
        #: Bumped by every invalidation: a fill that began before one is discarded.
        self.generation = 0
        self._live = False
        self._heard = 0.0

    @property
    def live(self) -> bool:
        return self._live and self._clock() - self._heard < self._lease

    def heard(self) -> None:
        self._heard = self._clock()

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
        """Forget everything (subscription lost or just confirmed)."""
        self.generation += 1
        self._sessions.clear()
        self._users.clear()
        self._live = live
        if live:
            self.heard()


class _Invalidations(asyncio.Protocol):
    """The subscription connection's protocol: messages are applied in the read callback."""

    def __init__(self, on_message: Callable[[Any], None], local: LocalState) -> None:
        self._reader = hiredis.Reader()
        self._on_message = on_message
        self._local = local
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._local.heard()
        self._reader.feed(data)
        while (message := self._reader.gets()) is not False:
            self._on_message(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._local.reset(live=False)
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
    ) -> None:
        self._redis = client
        self._op_timeout = op_timeout
        self._ack_timeout = ack_timeout
        self._prefix = prefix
        self._channel = f"{prefix}invalidate"
        self._ttl = ttl
        self.local = LocalState(ttl=ttl)
        self._subscriber: asyncio.Task[None] | None = None
        self._acks: set[asyncio.Task[None]] = set()
        # A tombstone must outlive every access token of its family; after that, a miss
        # reads the (revoked) session from the database again.
        self._tombstone_ttl = tombstone_ttl

    def _session_key(self, session_id: str) -> str:
        return f"{self._prefix}session:{session_id}"

    def _user_key(self, user_id: int) -> str:
        return f"{self._prefix}user:{user_id}"

    async def get(self, session_id: str, user_id: int) -> CachedState | None:
        """The cached state, or None on a miss (or any Redis trouble)."""
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
        user = _user_from_json(user_id, raw_user) if raw_user is not None else None
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
            logger.error(
                "state cache: could not record %d revocation(s) (%s); cached entries expire "
                "within %d s",
                len(session_ids),
                type(exc).__name__,
                self._ttl,
            )

    async def forget_user(self, user_id: int) -> None:
        self.local.drop_user(user_id)
        try:
            await self._invalidate(
                "u", [str(user_id)], lambda pipe: pipe.delete(self._user_key(user_id))
            )
        except (RedisError, TimeoutError) as exc:
            logger.error(
                "state cache: could not drop user %d (%s); the entry expires within %d s",
                user_id,
                type(exc).__name__,
                self._ttl,
            )

    # --- invalidation across workers ------------------------------------------------------

    async def _invalidate(
        self, kind: str, ids: list[str], write: Callable[[Pipeline], Any]
    ) -> None:
        """`write` the Redis entries, publish `kind ack_key ids...` in the same round trip,
        then wait for the subscribed workers' acknowledgements."""
        ack_key = f"{self._prefix}ack:{secrets.token_hex(8)}"
        async with (
            asyncio.timeout(self._op_timeout),
            self._redis.pipeline(transaction=False) as pipe,
        ):
            write(pipe)
            pipe.publish(self._channel, " ".join([kind, ack_key, *ids]))
            receivers = (await pipe.execute())[-1]
        await self._await_acks(ack_key, int(receivers))

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
                    "%.1f s; their copies stop within their %.1f s lease if Redis is unreachable",
                    receivers - confirmed,
                    receivers,
                    self._ack_timeout,
                    LEASE,
                )

    def _on_message(self, message: Any) -> None:
        if not isinstance(message, list) or len(message) < 3:
            return
        kind = message[0]
        if kind == b"subscribe":
            self.local.reset(live=True)
            return
        if kind != b"message" or not isinstance(message[2], bytes):
            return  # pong, or something this subscriber did not ask for
        what, ack_key, *ids = message[2].decode().split(" ")
        if what == "s":
            self.local.drop_sessions(ids)
        elif what == "u":
            for uid in ids:
                self.local.drop_user(int(uid))
        task = asyncio.get_running_loop().create_task(self._ack(ack_key))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

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

    async def start(self) -> None:
        """Subscribe to invalidations in the background (from the lifespan)."""
        if self._subscriber is None:
            self._subscriber = asyncio.get_running_loop().create_task(self._subscribe_forever())

    async def stop(self) -> None:
        if self._subscriber is not None:
            self._subscriber.cancel()
            await asyncio.wait({self._subscriber}, timeout=self._op_timeout)
            self._subscriber = None
        for task in list(self._acks):
            with contextlib.suppress(asyncio.CancelledError, RedisError, TimeoutError):
                await task
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
            self.local.reset(live=False)
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
            protocol = _Invalidations(self._on_message, self.local)
            transport.set_protocol(protocol)
            transport.write(b"".join(conn.pack_command("SUBSCRIBE", self._channel)))
            ping = b"".join(conn.pack_command("PING"))
            while not protocol.lost.done():
                # asyncio.wait, not asyncio.timeout: a cancel (stop) must never be mistaken
                # for the ping interval ending.
                await asyncio.wait({protocol.lost}, timeout=LEASE / 3)
                if not protocol.lost.done():
                    transport.write(ping)
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
