"""A session's assurance level (contract §9): raising it after a second step.

`step_up` is a whole unit of work (it commits); `raise_level` runs in the caller's
transaction (an enrolment that proves the factor it adds raises the session that added it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.principal import Level
from authgate.store.db import Database
from authgate.store.models import Base, RefreshToken, Session, User

__all__ = ["raise_level", "step_up"]

_tokens: Table = Base.metadata.tables[RefreshToken.__tablename__]
_sessions: Table = Base.metadata.tables[Session.__tablename__]
_users: Table = Base.metadata.tables[User.__tablename__]


def _live_session(session_id: str, user_id: int, now: datetime) -> tuple[Any, ...]:
    """The session is live and its user active, on the credentials it opened under."""
    current_user = (
        select(_users.c.id)
        .where(
            _users.c.id == user_id,
            _users.c.is_active,
            _users.c.credentials_version == _sessions.c.credentials_version,
        )
        .exists()
    )
    return (
        _sessions.c.id == session_id,
        _sessions.c.user_id == user_id,
        _sessions.c.revoked_at.is_(None),
        or_(_sessions.c.expires_at.is_(None), _sessions.c.expires_at > now),
        current_user,
    )


async def raise_level(
    s: AsyncSession, session_id: str, user_id: int, level: Level, now: datetime
) -> bool:
    """Set the live session's level, in the caller's transaction; False when it is over."""
    result = await s.execute(
        update(_sessions)
        .where(*_live_session(session_id, user_id, now))
        .values(aal=level.aal, amr=level.stored_amr, mfa_pending=level.pending)
        .returning(_sessions.c.id)
    )
    return result.scalar_one_or_none() is not None


async def step_up(
    db: Database,
    *,
    session_id: str,
    user_id: int,
    level: Level,
    now: datetime,
    digest: bytes,
    refresh_end: datetime,
) -> tuple[bool, datetime | None]:
    """Raise the live session to `level` and give it a new refresh token with `digest`,
    committed: every other unused refresh token of the family is spent, so the family keeps
    one live token (an older one presented later is reuse). (False, None) when the session
    is over (revoked, expired, its user inactive or its credentials changed); otherwise
    (True, the session's end)."""
    async with db.write() as s:
        row = (
            await s.execute(
                update(_sessions)
                .where(*_live_session(session_id, user_id, now))
                .values(aal=level.aal, amr=level.stored_amr, mfa_pending=level.pending)
                .returning(_sessions.c.expires_at)
            )
        ).one_or_none()
        if row is None:
            return False, None
        end: datetime | None = row.expires_at
        await s.execute(
            update(_tokens)
            .where(_tokens.c.session_id == session_id, _tokens.c.used_at.is_(None))
            .values(used_at=now)
        )
        await s.execute(
            insert(_tokens).values(
                session_id=session_id,
                digest=digest,
                created_at=now,
                expires_at=min(refresh_end, end) if end is not None else refresh_end,
            )
        )
    return True, end
