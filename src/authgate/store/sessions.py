"""Sessions (token families) and their refresh tokens: opening one at login, the state every
authenticated request checks, revocation. Rotation has its own module (`rotation.py`).

`open_session` is a whole unit of work (it commits, in the dialect's form); `SessionStore`
takes a session and only flushes: its caller's `db.write()` block commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import LargeBinary, Table, bindparam, exists, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.principal import (
    NO_CLIENT,
    PASSWORD,
    Client,
    Level,
    Principal,
    SessionInfo,
    SessionState,
)
from authgate.store.db import Database
from authgate.store.models import Base, RefreshToken, Session, User, UTCDateTime
from authgate.store.users import Credentials, UserStore

__all__ = ["SessionStore", "open_session"]

# Built once on the Core tables with bind parameters: building them per call cost more
# Python time than executing them (bench/profiles/login-1w.txt).
_tokens: Table = Base.metadata.tables[RefreshToken.__tablename__]
_sessions: Table = Base.metadata.tables[Session.__tablename__]
_users: Table = Base.metadata.tables[User.__tablename__]
_now = bindparam("now", type_=UTCDateTime())
_INSERT_TOKEN = insert(_tokens)
_SESSION_COLUMNS = [
    "id",
    "user_id",
    "created_at",
    "expires_at",
    "credentials_version",
    "last_active_at",
    "ip",
    "user_agent",
    "aal",
    "amr",
    "mfa_pending",
]

#: The user row a new session depends on, locked (FOR SHARE) until the session is in: a reset
#: or deactivation that updates the row either commits first (then the version no longer
#: matches and no session opens) or waits until the session is in (then revokes it).
_current_user = (
    select(_users.c.id, _users.c.credentials_version)
    .where(
        _users.c.id == bindparam("user_id"),
        _users.c.credentials_version == bindparam("credentials_version"),
        _users.c.is_active,
    )
    .with_for_update(read=True)
)
#: In a transaction (SQLite, or a login that re-hashes): the session alone.
_NEW_SESSION = (
    insert(_sessions)
    .from_select(
        _SESSION_COLUMNS,
        select(
            bindparam("session_id"),
            _users.c.id,
            _now,
            bindparam("session_end", type_=UTCDateTime()),
            _users.c.credentials_version,
            _now,
            bindparam("ip"),
            bindparam("user_agent"),
            bindparam("aal"),
            bindparam("amr"),
            bindparam("mfa_pending"),
        )
        .where(*_current_user.whereclause.clauses)  # type: ignore[union-attr]
        .with_for_update(read=True),
    )
    .returning(_sessions.c.id)
)
#: PostgreSQL: a new session and its first refresh token in one autocommitted statement,
#: only while the credentials that were verified are current.
_current = _current_user.cte("current_user")
_new_session = (
    insert(_sessions)
    .from_select(
        _SESSION_COLUMNS,
        select(
            bindparam("session_id"),
            _current.c.id,
            _now,
            bindparam("session_end", type_=UTCDateTime()),
            _current.c.credentials_version,
            _now,
            bindparam("ip"),
            bindparam("user_agent"),
            bindparam("aal"),
            bindparam("amr"),
            bindparam("mfa_pending"),
        ),
    )
    .returning(_sessions.c.id)
    .cte("new_session")
)
_OPEN_SESSION = (
    insert(_tokens)
    .from_select(
        ["session_id", "digest", "created_at", "expires_at"],
        select(
            _new_session.c.id,
            bindparam("digest", type_=LargeBinary()),
            _now,
            bindparam("refresh_end", type_=UTCDateTime()),
        ),
    )
    .returning(_tokens.c.session_id)
)


async def open_session(
    db: Database,
    *,
    session_id: str,
    user: Credentials,
    now: datetime,
    session_end: datetime | None,
    digest: bytes,
    refresh_end: datetime,
    client: Client = NO_CLIENT,
    new_hash: str | None = None,
    level: Level = PASSWORD,
) -> bool:
    """The session and its first refresh token, committed atomically, only while `user`'s
    credentials version is current and the user active; False (nothing written) when not.
    `client` is where the login came from (shown in the user's list of sessions).

    `level` is the session's assurance (a password login: `aal1`, pending when the user has a
    second factor; a passkey: `aal2`).

    `new_hash` replaces the verified hash in the same transaction, by compare-and-swap
    (`UserStore.rehash`): a reset that committed meanwhile is never undone.
    """
    params = {
        "session_id": session_id,
        "user_id": user.user_id,
        "credentials_version": user.version,
        "now": now,
        "session_end": session_end,
        "digest": digest,
        "refresh_end": refresh_end,
        "ip": client.ip,
        "user_agent": client.user_agent,
        "aal": level.aal,
        "amr": level.stored_amr,
        "mfa_pending": level.pending,
    }
    if new_hash is None and not db.is_sqlite:
        # PostgreSQL: one autocommitted statement (no BEGIN/COMMIT round trips).
        async with db.autocommit() as conn:
            result = await conn.execute(_OPEN_SESSION, params)
            return result.scalar_one_or_none() is not None
    # SQLite has no DML in CTEs; there the single writer's transaction holds the check and
    # the inserts together (FOR SHARE is not SQLite's to honour, nor needed).
    async with db.write() as s:
        if new_hash is not None:
            await UserStore(s).rehash(user.user_id, user.password_hash, new_hash, now)
        # Core inserts: the ORM's unit of work costs more than the statement on this hot path.
        opened = (await s.execute(_NEW_SESSION, params)).scalar_one_or_none() is not None
        if opened:
            await s.execute(
                _INSERT_TOKEN,
                {
                    "session_id": session_id,
                    "digest": digest,
                    "created_at": now,
                    "expires_at": refresh_end,
                },
            )
    return opened


class SessionStore:
    """Sessions and their refresh tokens, in the caller's transaction."""

    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def state(self, session_id: str, user_id: int) -> SessionState | None:
        """The session and its user in one query, as every authenticated request needs them
        (the public columns only: never the password hash)."""
        result = await self.s.execute(
            select(
                User.email,
                User.is_active,
                User.is_superuser,
                User.email_verified,
                User.created_at,
                User.updated_at,
                Session.revoked_at,
                Session.expires_at,
            )
            .join(Session, Session.user_id == User.id)
            .where(Session.id == session_id, User.id == user_id)
        )
        row = result.one_or_none()
        if row is None:
            return None
        email, active, superuser, verified, created, updated, revoked_at, expires_at = row
        principal = Principal(user_id, email, active, superuser, verified, created, updated)
        return SessionState(principal, revoked_at is not None, expires_at)

    async def refresh_owner(self, digest: bytes) -> tuple[str, bool] | None:
        """(session id, already used) of a refresh token in any state, or None if unknown."""
        result = await self.s.execute(
            select(RefreshToken.session_id, RefreshToken.used_at).where(
                RefreshToken.digest == digest
            )
        )
        row = result.one_or_none()
        return None if row is None else (row[0], row[1] is not None)

    async def revoke(self, session_id: str, now: datetime, reason: str) -> bool:
        """Revoke one family; True when it was live until now."""
        result = await self.s.execute(
            update(Session)
            .where(Session.id == session_id, Session.revoked_at.is_(None))
            .values(revoked_at=now, revoke_reason=reason)
            .returning(Session.id)
        )
        return result.scalar_one_or_none() is not None

    async def revoke_all(
        self, user_id: int, now: datetime, reason: str, *, keep: str | None = None
    ) -> list[str]:
        """Revoke every family of the user not yet revoked, but `keep`; their ids."""
        condition = [Session.user_id == user_id, Session.revoked_at.is_(None)]
        if keep is not None:
            condition.append(Session.id != keep)
        return await self._revoke_where(condition, now, reason)

    async def live(self, user_id: int, now: datetime) -> list[SessionInfo]:
        """The user's live sessions, newest first: not revoked, not past their end, and
        holding a refresh token that can still be presented."""
        result = await self.s.execute(
            select(
                Session.id,
                Session.created_at,
                func.coalesce(Session.last_active_at, Session.created_at),
                Session.expires_at,
                Session.ip,
                Session.user_agent,
            )
            .where(Session.user_id == user_id, *_live(now))
            .order_by(Session.created_at.desc(), Session.id.desc())
        )
        return [SessionInfo(*row) for row in result.all()]

    async def revoke_live(
        self,
        user_id: int,
        now: datetime,
        reason: str,
        *,
        session_id: str | None = None,
        keep: str | None = None,
    ) -> list[str]:
        """Revoke the user's live sessions (as `live` lists them): only `session_id` when
        given, every one but `keep` otherwise. The ids revoked (none for an id that is unknown,
        another user's, or over already)."""
        condition = [Session.user_id == user_id, *_live(now)]
        if session_id is not None:
            condition.append(Session.id == session_id)
        if keep is not None:
            condition.append(Session.id != keep)
        return await self._revoke_where(condition, now, reason)

    async def _revoke_where(self, condition: list[Any], now: datetime, reason: str) -> list[str]:
        result = await self.s.execute(
            update(Session)
            .where(*condition)
            .values(revoked_at=now, revoke_reason=reason)
            .returning(Session.id)
        )
        return list(result.scalars())

    async def follow_credentials(self, session_id: str, user_id: int) -> None:
        """Bring the session to its user's current credentials version: the session that
        changed the password goes on (`rotation` refuses sessions of an older version)."""
        await self.s.execute(
            update(Session)
            .where(Session.id == session_id, Session.user_id == user_id)
            .values(
                credentials_version=select(User.credentials_version)
                .where(User.id == user_id)
                .scalar_subquery()
            )
        )


def _live(now: datetime) -> tuple[Any, ...]:
    return (
        Session.revoked_at.is_(None),
        or_(Session.expires_at.is_(None), Session.expires_at > now),
        exists().where(
            RefreshToken.session_id == Session.id,
            RefreshToken.used_at.is_(None),
            RefreshToken.expires_at > now,
        ),
    )
