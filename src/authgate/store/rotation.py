"""Refresh-token rotation: spend the presented token, count the rotation against the
session's budget, and add its successor, in one unit of work with one result.

Spending is one conditional UPDATE (`used_at IS NULL`), so of several concurrent rotations of
one token exactly one matches a row; the others find it spent, which is reuse (RFC 9700
§4.14.2): the whole family is revoked, the legitimate holder's newest token too.

PostgreSQL runs the whole rotation as one autocommitted statement (data-modifying CTEs run
exactly once and atomically with the statement: one round trip instead of BEGIN, statements
and COMMIT). SQLite has no DML in CTEs; there the same statements run one by one inside the
single writer's transaction. With refresh grace on, a spent token may be a replay instead of
reuse (`grace.py`): asked only where reuse would be decided, so the rotation is unchanged.
The statements themselves are built once, in `rotation_sql.py`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.principal import NO_CLIENT, PASSWORD, Client, Level
from authgate.store.db import Database
from authgate.store.grace import Grace, replay
from authgate.store.models import RefreshToken, Session
from authgate.store.rotation_sql import COUNT_ROTATION, INSERT_TOKEN, ROTATE, SPEND, STATE_OF
from authgate.store.sessions import SessionStore

__all__ = ["Outcome", "RefreshBudget", "Rotation", "rotate"]


@dataclass(frozen=True, slots=True)
class RefreshBudget:
    """The per-session refresh limit: at most `burst` rotations in a fixed window of
    `window` seconds that begins at the first rotation after the last window ended."""

    burst: int
    window: int

    def params(self, now: datetime) -> dict[str, Any]:
        return {"window_floor": now - timedelta(seconds=self.window), "burst": self.burst}


class Outcome(enum.Enum):
    #: Spent, and its successor added: `session_id`, `user_id`, `session_end` are set.
    ROTATED = "rotated"
    #: Spent now, but its session is over (revoked, expired, user inactive or credentials
    #: changed since it opened): no successor. `session_id`, `user_id` are set.
    ENDED = "ended"
    #: Unknown (never issued, or purged), or expired unused: nothing written.
    INVALID = "invalid"
    #: Spent before: its family is now revoked. `session_id` is set.
    REUSED = "reused"
    #: Spent within the grace window, its successor unused: nothing written; hand out
    #: `Grace.successors[successor]` again. `session_id`, `user_id`, `session_end` are set.
    REPLAYED = "replayed"
    #: Live, but its session is over the per-session budget: not spent. `session_id` and
    #: `retry_after` (whole seconds, at least 1) are set.
    LIMITED = "limited"


@dataclass(frozen=True, slots=True)
class Rotation:
    """What became of a presented refresh token (see `Outcome` for which fields are set)."""

    outcome: Outcome
    session_id: str | None = None
    user_id: int | None = None
    session_end: datetime | None = None
    retry_after: int = 0
    successor: int = 0
    #: The session's assurance (ROTATED and REPLAYED).
    level: Level = PASSWORD


_INVALID = Rotation(Outcome.INVALID)


async def rotate(
    db: Database,
    token_digest: bytes,
    new_digest: bytes,
    *,
    now: datetime,
    refresh_end: datetime,
    budget: RefreshBudget,
    client: Client = NO_CLIENT,
    grace: Grace | None = None,
) -> Rotation:
    """Rotate the token with `token_digest` to one with `new_digest`, committed. The successor
    expires at `refresh_end`, or at its session's end if that comes first; the session
    records `client` as where it was last used. With `grace`, a spent token may be REPLAYED."""
    params: dict[str, Any] = {"token_digest": token_digest, "new_digest": new_digest, "now": now}
    params["refresh_end"] = refresh_end
    params["ip"] = client.ip
    params["user_agent"] = client.user_agent
    params.update(budget.params(now))
    if db.is_sqlite:
        async with db.write() as s:
            return await _rotate_in(s, params, budget, grace)
    async with db.autocommit() as conn:
        row = (await conn.execute(ROTATE, params)).one_or_none()
    if row is not None:
        return Rotation(
            Outcome.ROTATED if row.rotated else Outcome.ENDED,
            row.id,
            row.user_id,
            row.expires_at,
            level=Level.of(row.aal, row.amr, row.mfa_pending),
        )
    async with db.write() as s:
        return await _not_spent(s, token_digest, now, budget, grace)


async def _rotate_in(
    s: AsyncSession, params: dict[str, Any], budget: RefreshBudget, grace: Grace | None
) -> Rotation:
    """SQLite: the rotation's statements one by one, in the writer's transaction `s`."""
    now: datetime = params["now"]
    refresh_end: datetime = params["refresh_end"]
    session_id = (await s.execute(SPEND, params)).scalar_one_or_none()
    if session_id is None:
        return await _not_spent(s, params["token_digest"], now, budget, grace)
    await s.execute(COUNT_ROTATION, {**params, "spent_session_id": session_id})
    # The session row exists: the token's foreign key cascades from it.
    row = (await s.execute(STATE_OF, {"spent_session_id": session_id})).one()
    end: datetime | None = row.expires_at
    if (
        row.revoked_at is not None
        or (end is not None and now >= end)
        or not row.is_active
        or not row.current
    ):
        return Rotation(Outcome.ENDED, session_id, row.user_id, end)
    await s.execute(
        INSERT_TOKEN,
        {
            "session_id": session_id,
            "digest": params["new_digest"],
            "created_at": now,
            "expires_at": min(refresh_end, end) if end is not None else refresh_end,
        },
    )
    level = Level.of(row.aal, row.amr, row.mfa_pending)
    return Rotation(Outcome.ROTATED, session_id, row.user_id, end, level=level)


async def _not_spent(
    s: AsyncSession, token_digest: bytes, now: datetime, budget: RefreshBudget, grace: Grace | None
) -> Rotation:
    """Why the spend matched nothing, in the write transaction `s`; reuse revokes the family
    unless, with `grace`, it is a replay."""
    sessions = SessionStore(s)
    owner = await sessions.refresh_owner(token_digest)
    if owner is None:
        return _INVALID
    session_id, used = owner
    if not used:
        # Unused yet not spent: expired, or its session is over the refresh limit.
        retry_after = await _retry_after(s, token_digest, now, budget)
        if retry_after is None:
            return _INVALID
        return Rotation(Outcome.LIMITED, session_id, retry_after=retry_after)
    if grace is not None and (again := await replay(s, token_digest, grace, now)) is not None:
        user_id, end = again.user_id, again.session_end
        return Rotation(
            Outcome.REPLAYED, session_id, user_id, end, successor=again.successor, level=again.level
        )
    await sessions.revoke(session_id, now, "reuse")
    return Rotation(Outcome.REUSED, session_id)


async def _retry_after(
    s: AsyncSession, token_digest: bytes, now: datetime, budget: RefreshBudget
) -> int | None:
    """Seconds until the session of this live, unused token may rotate again, when it is
    over `budget` (why the rotation matched nothing); None otherwise."""
    row = (
        await s.execute(
            select(Session.refresh_window_start, Session.refresh_count)
            .join(RefreshToken, RefreshToken.session_id == Session.id)
            .where(
                RefreshToken.digest == token_digest,
                RefreshToken.used_at.is_(None),
                RefreshToken.expires_at > now,
            )
        )
    ).one_or_none()
    if row is None or row.refresh_window_start is None or row.refresh_count < budget.burst:
        return None
    ends = row.refresh_window_start + timedelta(seconds=budget.window)
    return max(1, math.ceil((ends - now).total_seconds())) if ends > now else None
