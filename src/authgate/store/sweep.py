"""The database side of the state cache's sweep: what was revoked or changed since a time.

Every worker with a Redis cache asks this about once a second (statecache.StateCache), so a
revocation that never reached Redis (Redis away for the revoking worker, or `authgate users
deactivate` run without CACHE_URL) still reaches every worker's copy and the Redis entries.
Two indexed range queries (`authgate_sessions.revoked_at`, `authgate_users.updated_at`); with
nothing changed they return no rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select

from authgate.store.db import Database
from authgate.store.models import Session, User

__all__ = ["Changes", "DatabaseChanges"]

_sessions = Session.__table__
_users = User.__table__


@dataclass(slots=True)
class Changes:
    #: (session id, revoked_at) of sessions revoked after the time asked for.
    sessions: list[tuple[str, datetime]] = field(default_factory=list)
    #: (user id, updated_at) of users changed after it (flags, password, deactivation).
    users: list[tuple[int, datetime]] = field(default_factory=list)


class DatabaseChanges:
    """Revocations and user changes after a point in time, read from the database.

    `now()` is the clock the writers stamp `revoked_at` and `updated_at` with, so the caller
    can ask "since my last sweep" in the same time scale (less a margin for skew and commit
    delay, which the caller applies). Results come in keyset pages of `page` rows, so a mass
    revocation is read in bounded pieces.
    """

    def __init__(self, db: Database, clock: Callable[[], datetime], *, page: int = 5000) -> None:
        self._db = db
        self._clock = clock
        self._page = page

    def now(self) -> datetime:
        return self._clock()

    async def since(self, since: datetime) -> Changes:
        if self._db.is_sqlite:
            async with self._db.read() as s:
                return await self._read(s, since)
        async with self._db.autocommit() as conn:  # no BEGIN/COMMIT round trips
            return await self._read(conn, since)

    async def _read(self, conn: Any, since: datetime) -> Changes:
        changes = Changes()
        after: tuple[datetime, Any] | None = None
        while True:
            cond = _sessions.c.revoked_at > since
            if after is not None:
                cond = and_(cond, _after(_sessions.c.revoked_at, _sessions.c.id, after))
            rows = (
                await conn.execute(
                    select(_sessions.c.id, _sessions.c.revoked_at)
                    .where(cond)
                    .order_by(_sessions.c.revoked_at, _sessions.c.id)
                    .limit(self._page)
                )
            ).all()
            changes.sessions.extend((r[0], r[1]) for r in rows)
            if len(rows) < self._page:
                break
            after = (rows[-1][1], rows[-1][0])
        after = None
        while True:
            cond = _users.c.updated_at > since
            if after is not None:
                cond = and_(cond, _after(_users.c.updated_at, _users.c.id, after))
            rows = (
                await conn.execute(
                    select(_users.c.id, _users.c.updated_at)
                    .where(cond)
                    .order_by(_users.c.updated_at, _users.c.id)
                    .limit(self._page)
                )
            ).all()
            changes.users.extend((int(r[0]), r[1]) for r in rows)
            if len(rows) < self._page:
                break
            after = (rows[-1][1], rows[-1][0])
        return changes


def _after(at_col: Any, id_col: Any, after: tuple[datetime, Any]) -> Any:
    """(at, id) > after, spelled so that the index on `at` serves it."""
    at, ident = after
    return or_(at_col > at, and_(at_col == at, id_col > ident))
