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

Only a shared cache can do this: an in-process cache would miss other workers' revocations,
so the embedded setup (no CACHE_URL) reads the database on every authenticated request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from authgate.models import User

__all__ = ["CachedState", "StateCache"]

logger = logging.getLogger("authgate")

_REVOKED = b"revoked"


@dataclass(frozen=True, slots=True)
class CachedState:
    user: User | None  # None: the session is known but its user entry is not cached
    revoked: bool
    user_id: int
    expires_at: datetime | None


class StateCache:
    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str,
        ttl: int = 60,
        tombstone_ttl: int = 3600,
        op_timeout: float = 2.0,
    ) -> None:
        self._redis = client
        self._op_timeout = op_timeout
        self._prefix = prefix
        self._ttl = ttl
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
        try:
            async with (
                asyncio.timeout(self._op_timeout),
                self._redis.pipeline(transaction=False) as pipe,
            ):
                for sid in session_ids:
                    pipe.set(self._session_key(sid), _REVOKED, ex=self._tombstone_ttl)
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            logger.error(
                "state cache: could not record %d revocation(s) (%s); cached entries expire "
                "within %d s",
                len(session_ids),
                type(exc).__name__,
                self._ttl,
            )

    async def forget_user(self, user_id: int) -> None:
        try:
            async with asyncio.timeout(self._op_timeout):
                await self._redis.delete(self._user_key(user_id))
        except (RedisError, TimeoutError) as exc:
            logger.error(
                "state cache: could not drop user %d (%s); the entry expires within %d s",
                user_id,
                type(exc).__name__,
                self._ttl,
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
    # A detached User with the public fields: what GET /me and `CurrentUser` need.
    return User(
        id=user_id,
        email=data["email"],
        email_key=data["email"].lower(),
        password_hash="",  # never cached, never read from a request user  # nosec B106
        is_active=data["active"],
        is_superuser=data["superuser"],
        email_verified=data["verified"],
        created_at=datetime.fromtimestamp(data["created"], UTC),
        updated_at=datetime.fromtimestamp(data["created"], UTC),
    )
