"""Narrow stores named by intent. They flush, never commit: `Database.write()` owns the
transaction. Spending a token is one conditional UPDATE, so of several concurrent spends of
one token exactly one matches a row."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    LargeBinary,
    Table,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from authgate.principal import Principal, SessionState
from authgate.store.models import Base, OneTimeToken, RefreshToken, Session, User, UTCDateTime

__all__ = [
    "Credentials",
    "RefreshBudget",
    "SessionStore",
    "SpentRefresh",
    "TokenStore",
    "UserStore",
    "add_user",
    "credentials",
    "open_session",
    "rotate_refresh",
]

# The rotation's statements, built once on the Core tables with bind parameters: building
# them per call cost more Python time than executing them (bench/profiles/refresh-1w.txt).
_tokens: Table = Base.metadata.tables[RefreshToken.__tablename__]
_sessions: Table = Base.metadata.tables[Session.__tablename__]
_users: Table = Base.metadata.tables[User.__tablename__]
#: A session that has rotated `burst` times in its current window (the per-session refresh
#: limit): its token is not spent, and the refresh answers 429.
_over_budget = (
    select(_sessions.c.id)
    .where(
        _sessions.c.id == _tokens.c.session_id,
        _sessions.c.refresh_window_start > bindparam("window_floor", type_=UTCDateTime()),
        _sessions.c.refresh_count >= bindparam("burst"),
    )
    .exists()
)
_SPEND = (
    update(_tokens)
    .where(
        _tokens.c.digest == bindparam("token_digest"),
        _tokens.c.used_at.is_(None),
        _tokens.c.expires_at > bindparam("now"),
        ~_over_budget,
    )
    .values(used_at=bindparam("now"))
    .returning(_tokens.c.session_id)
)
_in_window = _sessions.c.refresh_window_start > bindparam("window_floor", type_=UTCDateTime())
#: Count one rotation in the session's window (a new window once the last one is over).
_COUNT_ROTATION = (
    update(_sessions)
    .where(_sessions.c.id == bindparam("spent_session_id"))
    .values(
        refresh_count=case((_in_window, _sessions.c.refresh_count + 1), else_=1),
        refresh_window_start=case(
            (_in_window, _sessions.c.refresh_window_start),
            else_=bindparam("now", type_=UTCDateTime()),
        ),
    )
)
_STATE_COLUMNS = (
    _sessions.c.id,
    _sessions.c.user_id,
    _sessions.c.revoked_at,
    _sessions.c.expires_at,
    _users.c.is_active,
    # A session opened under older credentials (reset, deactivation since) cannot refresh.
    (_sessions.c.credentials_version == _users.c.credentials_version).label("current"),
)
_spent = _SPEND.cte("spent")
#: PostgreSQL: spend and look up in one statement (a data-modifying CTE; part of _ROTATE).
_SPEND_AND_STATE = select(*_STATE_COLUMNS).select_from(
    _spent.join(_sessions, _sessions.c.id == _spent.c.session_id).join(
        _users, _users.c.id == _sessions.c.user_id
    )
)
#: SQLite (no DML in CTEs): the lookup after the spend.
_STATE_OF = (
    select(*_STATE_COLUMNS)
    .select_from(_sessions.join(_users, _users.c.id == _sessions.c.user_id))
    .where(_sessions.c.id == bindparam("spent_session_id"))
)
_INSERT_TOKEN = insert(_tokens)

#: PostgreSQL: the whole rotation as one statement, run outside an explicit transaction
#: (one round trip instead of BEGIN, two statements and COMMIT). Spend the presented token,
#: read its session and user, and insert the successor only if the session is live and the
#: user active; data-modifying CTEs run exactly once and atomically with the statement.
_state = _SPEND_AND_STATE.cte("state")
_now = bindparam("now", type_=UTCDateTime())
_added = (
    insert(_tokens)
    .from_select(
        ["session_id", "digest", "created_at", "expires_at"],
        select(
            _state.c.id,
            bindparam("new_digest", type_=LargeBinary()),
            _now,
            # The successor never outlives its session (LEAST ignores a NULL session end).
            func.least(bindparam("refresh_end", type_=UTCDateTime()), _state.c.expires_at),
        ).where(
            _state.c.revoked_at.is_(None),
            or_(_state.c.expires_at.is_(None), _state.c.expires_at > _now),
            _state.c.is_active,
            _state.c.current,
        ),
    )
    .returning(_tokens.c.session_id)
    .cte("added")
)
_counted = (
    update(_sessions)
    .where(_sessions.c.id.in_(select(_spent.c.session_id)))
    .values(
        refresh_count=case((_in_window, _sessions.c.refresh_count + 1), else_=1),
        refresh_window_start=case((_in_window, _sessions.c.refresh_window_start), else_=_now),
    )
    .returning(_sessions.c.id)
    .cte("counted")
)
_ROTATE = select(
    *_state.c,
    exists(select(_added.c.session_id)).label("rotated"),
    exists(select(_counted.c.id)).label("counted"),
)

#: What login needs of a user, by its canonical email key.
_CREDENTIALS = select(
    _users.c.id, _users.c.password_hash, _users.c.is_active, _users.c.credentials_version
).where(_users.c.email_key == bindparam("email_key"))
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
_NEW_SESSION = (
    insert(_sessions)
    .from_select(
        ["id", "user_id", "created_at", "expires_at", "credentials_version"],
        select(
            bindparam("session_id"),
            _users.c.id,
            _now,
            bindparam("session_end", type_=UTCDateTime()),
            _users.c.credentials_version,
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
        ["id", "user_id", "created_at", "expires_at", "credentials_version"],
        select(
            bindparam("session_id"),
            _current.c.id,
            _now,
            bindparam("session_end", type_=UTCDateTime()),
            _current.c.credentials_version,
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


#: PostgreSQL: a new user in one autocommitted statement; no row back when the email is taken.
_ADD_USER = (
    pg_insert(_users)
    .on_conflict_do_nothing(index_elements=[_users.c.email_key])
    .returning(_users.c.id)
)


async def add_user(conn: AsyncConnection, user: User) -> bool:
    """PostgreSQL, on an autocommit connection: insert `user` and set its id; False when the
    email is taken (the unique index decides, not a pre-check)."""
    # Unset attributes (id, credentials_version) take the table's defaults.
    values = {c.key: v for c in _users.c if (v := getattr(user, c.key)) is not None}
    user_id = (await conn.execute(_ADD_USER, values)).scalar_one_or_none()
    if user_id is None:
        return False
    user.id = user_id
    return True


@dataclass(frozen=True, slots=True)
class RefreshBudget:
    """The per-session refresh limit: at most `burst` rotations in a fixed window of
    `window` seconds that begins at the first rotation after the last window ended."""

    burst: int
    window: int

    def params(self, now: datetime) -> dict[str, Any]:
        return {"window_floor": now - timedelta(seconds=self.window), "burst": self.burst}


@dataclass(frozen=True, slots=True)
class Credentials:
    user_id: int
    password_hash: str
    is_active: bool
    version: int


async def credentials(db: AsyncSession | AsyncConnection, email_key: str) -> Credentials | None:
    """The login lookup: one indexed row, no ORM object."""
    row = (await db.execute(_CREDENTIALS, {"email_key": email_key})).one_or_none()
    if row is None:
        return None
    return Credentials(row.id, row.password_hash, row.is_active, row.credentials_version)


async def open_session(
    conn: AsyncConnection,
    *,
    session_id: str,
    user: Credentials,
    now: datetime,
    session_end: datetime | None,
    digest: bytes,
    refresh_end: datetime,
) -> bool:
    """PostgreSQL, on an autocommit connection: the session and its first token, atomically,
    only while `user`'s credentials are current and the user active; False when not."""
    result = await conn.execute(
        _OPEN_SESSION,
        {
            "session_id": session_id,
            "user_id": user.user_id,
            "credentials_version": user.version,
            "now": now,
            "session_end": session_end,
            "digest": digest,
            "refresh_end": refresh_end,
        },
    )
    return result.scalar_one_or_none() is not None


class UserStore:
    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def by_id(self, user_id: int) -> User | None:
        return await self.s.get(User, user_id)

    async def by_email_key(self, email_key: str) -> User | None:
        result = await self.s.execute(select(User).where(User.email_key == email_key))
        return result.scalar_one_or_none()

    async def add(self, user: User) -> bool:
        """Insert; False when the email is taken (the unique index decides, not a pre-check)."""
        try:
            async with self.s.begin_nested():
                self.s.add(user)
                await self.s.flush()
        except IntegrityError:
            return False
        return True

    async def set_password(self, user_id: int, password_hash: str, now: datetime) -> None:
        """A new password: whoever knew the old one loses every way in (the credentials
        version moves, so a login that verified the old password opens no session)."""
        await self.s.execute(
            update(User)
            .where(User.id == user_id)
            .values(
                password_hash=password_hash,
                updated_at=now,
                credentials_version=User.credentials_version + 1,
            )
        )

    async def rehash(self, user_id: int, verified_hash: str, new_hash: str, now: datetime) -> bool:
        """Replace the hash that was just verified by one at the current parameters (same
        password): a compare-and-swap, so a reset that committed meanwhile is never undone.
        False (nothing written) when the stored hash is no longer `verified_hash`."""
        result = await self.s.execute(
            update(User)
            .where(User.id == user_id, User.password_hash == verified_hash)
            .values(password_hash=new_hash, updated_at=now)
            .returning(User.id)
        )
        return result.scalar_one_or_none() is not None

    async def set_flags(self, user_id: int, now: datetime, **flags: bool) -> None:
        """Change flags; deactivation also moves the credentials version (see set_password)."""
        values: dict[str, Any] = {"updated_at": now, **flags}
        if flags.get("is_active") is False:
            values["credentials_version"] = User.credentials_version + 1
        await self.s.execute(update(User).where(User.id == user_id).values(**values))

    async def listing(self) -> list[User]:
        return list((await self.s.execute(select(User).order_by(User.id))).scalars())


@dataclass(frozen=True, slots=True)
class SpentRefresh:
    session_id: str
    user_id: int
    revoked: bool
    expires_at: datetime | None
    user_active: bool
    #: The session was opened under the user's current credentials version.
    current: bool


#: Spent refresh tokens kept per family for reuse detection (see purge_refresh_tokens).
KEEP_SPENT = 3
_newer_spent = _tokens.alias("newer")


class SessionStore:
    """Sessions (token families) and their refresh tokens."""

    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def create(
        self, *, session_id: str, user: Credentials, now: datetime, expires_at: datetime | None
    ) -> bool:
        """Open a session only while `user`'s credentials version is current and the user
        active (the row is locked FOR SHARE until the transaction ends); False when not."""
        # Core inserts: the ORM's unit of work costs more than the statement on this hot path.
        result = await self.s.execute(
            _NEW_SESSION,
            {
                "session_id": session_id,
                "user_id": user.user_id,
                "credentials_version": user.version,
                "now": now,
                "session_end": expires_at,
            },
        )
        return result.scalar_one_or_none() is not None

    async def add_refresh(
        self, *, session_id: str, digest: bytes, now: datetime, expires_at: datetime
    ) -> None:
        await self.s.execute(
            _INSERT_TOKEN,
            {
                "session_id": session_id,
                "digest": digest,
                "created_at": now,
                "expires_at": expires_at,
            },
        )

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

    async def spend_refresh(
        self, digest: bytes, now: datetime, budget: RefreshBudget
    ) -> SpentRefresh | None:
        """SQLite: mark an unused, unexpired refresh token used, atomically, count the rotation
        in its session's window, and return the session's state; None when no token matched
        (or its session is over `budget`). (PostgreSQL rotates in one statement:
        `rotate_refresh`; SQLite has no DML in CTEs.)"""
        params = {"token_digest": digest, "now": now, **budget.params(now)}
        session_id = (await self.s.execute(_SPEND, params)).scalar_one_or_none()
        if session_id is None:
            return None
        await self.s.execute(
            _COUNT_ROTATION, {"spent_session_id": session_id, "now": now, **budget.params(now)}
        )
        row = (await self.s.execute(_STATE_OF, {"spent_session_id": session_id})).one_or_none()
        return _spent_from(row) if row is not None else None

    async def refresh_owner(self, digest: bytes) -> tuple[str, bool] | None:
        """(session id, already used) of a refresh token in any state, or None if unknown."""
        result = await self.s.execute(
            select(RefreshToken.session_id, RefreshToken.used_at).where(
                RefreshToken.digest == digest
            )
        )
        row = result.one_or_none()
        return None if row is None else (row[0], row[1] is not None)

    async def refresh_retry_after(
        self, digest: bytes, now: datetime, budget: RefreshBudget
    ) -> int | None:
        """Seconds until the session of this live, unused token may rotate again, when it is
        over `budget` (why the rotation matched nothing); None otherwise."""
        row = (
            await self.s.execute(
                select(Session.refresh_window_start, Session.refresh_count)
                .join(RefreshToken, RefreshToken.session_id == Session.id)
                .where(
                    RefreshToken.digest == digest,
                    RefreshToken.used_at.is_(None),
                    RefreshToken.expires_at > now,
                )
            )
        ).one_or_none()
        if row is None or row.refresh_window_start is None or row.refresh_count < budget.burst:
            return None
        ends = row.refresh_window_start + timedelta(seconds=budget.window)
        return max(1, math.ceil((ends - now).total_seconds())) if ends > now else None

    async def revoke(self, session_id: str, now: datetime, reason: str) -> bool:
        """Revoke one family; True when it was live until now."""
        result = await self.s.execute(
            update(Session)
            .where(Session.id == session_id, Session.revoked_at.is_(None))
            .values(revoked_at=now, revoke_reason=reason)
            .returning(Session.id)
        )
        return result.scalar_one_or_none() is not None

    async def revoke_all(self, user_id: int, now: datetime, reason: str) -> list[str]:
        result = await self.s.execute(
            update(Session)
            .where(Session.user_id == user_id, Session.revoked_at.is_(None))
            .values(revoked_at=now, revoke_reason=reason)
            .returning(Session.id)
        )
        return list(result.scalars())

    async def purge_sessions(self, now: datetime, limit: int, after: str) -> tuple[int, str]:
        """Delete finished sessions among the next `limit` with an id above `after`, their
        refresh tokens by cascade; (deleted, cursor), the cursor "" once at the end.

        Keyset batches walk the primary key once, so a purge of millions of rows is linear
        and each batch is one short transaction.
        """
        over = or_(
            Session.revoked_at.is_not(None),
            Session.expires_at <= now,
            # A family with no refresh token left that can still be used is over.
            ~select(RefreshToken.id)
            .where(
                RefreshToken.session_id == Session.id,
                RefreshToken.used_at.is_(None),
                RefreshToken.expires_at > now,
            )
            .exists(),
        )
        window = list(
            (
                await self.s.execute(
                    select(Session.id, over)
                    .where(Session.id > after)
                    .order_by(Session.id)
                    .limit(limit)
                )
            ).all()
        )
        dead = [sid for sid, is_over in window if is_over]
        if dead:
            await self.s.execute(delete(Session).where(Session.id.in_(dead)))
        return len(dead), window[-1][0] if len(window) == limit else ""

    async def purge_refresh_tokens(self, now: datetime, limit: int, after: int) -> tuple[int, int]:
        """Delete expired refresh tokens, and spent ones beyond the newest `KEEP_SPENT` of
        their family, among the next `limit` ids above `after`; (deleted, cursor), the cursor
        0 once at the end.

        The newest spent tokens of a family stay until they expire: presenting one again is
        reuse and revokes the family. Older spent tokens go (one client rotating all day would
        otherwise keep millions of rows); presented again, such a token is unknown and
        refused (401) without revoking the family, which its holder cannot use anyway.
        """
        newer = select(func.count())
        newer = newer.select_from(_newer_spent).where(
            _newer_spent.c.session_id == RefreshToken.session_id,
            _newer_spent.c.id > RefreshToken.id,
            _newer_spent.c.used_at.is_not(None),
        )
        dead_row = or_(
            RefreshToken.expires_at <= now,
            and_(
                RefreshToken.used_at.is_not(None),
                newer.scalar_subquery() >= KEEP_SPENT,
            ),
        )
        window = list(
            (
                await self.s.execute(
                    select(RefreshToken.id, dead_row)
                    .where(RefreshToken.id > after)
                    .order_by(RefreshToken.id)
                    .limit(limit)
                )
            ).all()
        )
        dead = [tid for tid, expired in window if expired]
        if dead:
            await self.s.execute(delete(RefreshToken).where(RefreshToken.id.in_(dead)))
        return len(dead), window[-1][0] if len(window) == limit else 0


class TokenStore:
    """One-time tokens: password reset and email verification."""

    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def add(
        self, *, user_id: int, purpose: str, digest: bytes, now: datetime, expires_at: datetime
    ) -> None:
        self.s.add(
            OneTimeToken(
                user_id=user_id,
                purpose=purpose,
                digest=digest,
                created_at=now,
                expires_at=expires_at,
            )
        )
        await self.s.flush()

    async def peek(self, purpose: str, digest: bytes, now: datetime) -> int | None:
        """The user id of a live token, without spending it."""
        return await self.s.scalar(select(OneTimeToken.user_id).where(*_live(purpose, digest, now)))

    async def spend(self, purpose: str, digest: bytes, now: datetime) -> int | None:
        """Spend a live token atomically; the user id, or None when none matched."""
        result = await self.s.execute(
            update(OneTimeToken)
            .where(*_live(purpose, digest, now))
            .values(used_at=now)
            .returning(OneTimeToken.user_id)
        )
        return result.scalar_one_or_none()

    async def spend_all(self, user_id: int, purpose: str, now: datetime) -> None:
        await self.s.execute(
            update(OneTimeToken)
            .where(
                OneTimeToken.user_id == user_id,
                OneTimeToken.purpose == purpose,
                OneTimeToken.used_at.is_(None),
            )
            .values(used_at=now)
        )

    async def purge(self, now: datetime, limit: int, after: int) -> tuple[int, int]:
        """Delete expired or spent one-time tokens among the next `limit` ids above `after`;
        (deleted, cursor), the cursor 0 once at the end."""
        window = list(
            (
                await self.s.execute(
                    select(
                        OneTimeToken.id,
                        or_(OneTimeToken.expires_at <= now, OneTimeToken.used_at.is_not(None)),
                    )
                    .where(OneTimeToken.id > after)
                    .order_by(OneTimeToken.id)
                    .limit(limit)
                )
            ).all()
        )
        dead = [tid for tid, spent in window if spent]
        if dead:
            await self.s.execute(delete(OneTimeToken).where(OneTimeToken.id.in_(dead)))
        return len(dead), window[-1][0] if len(window) == limit else 0


def _live(purpose: str, digest: bytes, now: datetime) -> tuple[ColumnElement[bool], ...]:
    return (
        OneTimeToken.digest == digest,
        OneTimeToken.purpose == purpose,
        OneTimeToken.used_at.is_(None),
        OneTimeToken.expires_at > now,
    )


async def rotate_refresh(
    conn: AsyncConnection,
    digest: bytes,
    new_digest: bytes,
    now: datetime,
    refresh_end: datetime,
    budget: RefreshBudget,
) -> tuple[SpentRefresh, bool] | None:
    """PostgreSQL, on an autocommit connection: spend `digest`, count the rotation in its
    session's window and add `new_digest`, in one statement. (the spent token's session,
    whether the successor was added), or None when no unused, unexpired token matched (or
    its session is over `budget`)."""
    params: dict[str, Any] = {"token_digest": digest, "new_digest": new_digest, "now": now}
    params["refresh_end"] = refresh_end
    params.update(budget.params(now))
    row = (await conn.execute(_ROTATE, params)).one_or_none()
    if row is None:
        return None
    return _spent_from(row), bool(row.rotated)


def _spent_from(row: Any) -> SpentRefresh:
    """A row of `_STATE_COLUMNS` (both rotation paths select them)."""
    return SpentRefresh(
        session_id=row.id,
        user_id=row.user_id,
        revoked=row.revoked_at is not None,
        expires_at=row.expires_at,
        user_active=row.is_active,
        current=bool(row.current),
    )
