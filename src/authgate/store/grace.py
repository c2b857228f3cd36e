"""Refresh grace (contract §8, opt-in): a spent refresh token presented again within the grace
window of its rotation, while its successor is unused, is a replay, not reuse.

Nothing but digests is stored, and nothing links a token to its successor: with grace on, the
service derives the successor from the presented token under the server's key
(`Keys.successor`), so a replay re-derives it and this module looks its digest up. A replay
writes nothing: no second branch, no new row, the per-session refresh budget untouched.

`rotation.py` asks this module only after its spend matched nothing and the token turned out
to be spent, inside the write transaction that would otherwise revoke the family: the strict
path (grace off, or a first presentation) runs exactly the statements it ran without grace.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import LargeBinary, Table, bindparam, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.principal import Level
from authgate.store.models import Base, RefreshToken, Session, User, UTCDateTime

__all__ = ["Grace", "Replay", "replay"]

_tokens: Table = Base.metadata.tables[RefreshToken.__tablename__]
_sessions: Table = Base.metadata.tables[Session.__tablename__]
_users: Table = Base.metadata.tables[User.__tablename__]
_parent = _tokens.alias("parent")
_successor = _tokens.alias("successor")
_now = bindparam("now", type_=UTCDateTime())

#: The presented (spent) token, rotated within the window, and the one of `candidates` that is
#: its successor: same family, unused, unexpired; the session live, its user active and on the
#: credentials it opened under (what a rotation requires too).
_REPLAY = (
    select(
        _successor.c.digest,
        _sessions.c.user_id,
        _sessions.c.expires_at,
        _sessions.c.aal,
        _sessions.c.amr,
        _sessions.c.mfa_pending,
    )
    .select_from(
        _parent.join(_successor, _successor.c.session_id == _parent.c.session_id)
        .join(_sessions, _sessions.c.id == _parent.c.session_id)
        .join(_users, _users.c.id == _sessions.c.user_id)
    )
    .where(
        _parent.c.digest == bindparam("token_digest"),
        _parent.c.used_at >= bindparam("grace_floor", type_=UTCDateTime()),
        _successor.c.digest.in_(bindparam("candidates", expanding=True, type_=LargeBinary())),
        _successor.c.used_at.is_(None),
        _successor.c.expires_at > _now,
        _sessions.c.revoked_at.is_(None),
        or_(_sessions.c.expires_at.is_(None), _sessions.c.expires_at > _now),
        _users.c.is_active,
        _sessions.c.credentials_version == _users.c.credentials_version,
    )
)


@dataclass(frozen=True, slots=True)
class Grace:
    """The grace window in seconds, and the digests of what the presented token's successor
    may be: derived under the current key first, then under each previous key."""

    seconds: int
    successors: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Replay:
    """A replay inside the window: its family's user and end, and which of
    `Grace.successors` is the live successor to hand out again."""

    user_id: int
    session_end: datetime | None
    successor: int
    level: Level


async def replay(
    s: AsyncSession, token_digest: bytes, grace: Grace, now: datetime
) -> Replay | None:
    """The replay of the spent token with `token_digest`, or None when it is reuse (rotated
    longer than `grace.seconds` ago, its successor used, or not derived from it under any key
    we hold, or the session over). Reads only, in the caller's write transaction `s`."""
    params = {
        "token_digest": token_digest,
        "grace_floor": now - timedelta(seconds=grace.seconds),
        "candidates": list(grace.successors),
        "now": now,
    }
    row = (await s.execute(_REPLAY, params)).first()
    if row is None:
        return None
    # Which candidate matched (digests compared in constant time, as every secret is).
    found = next(i for i, d in enumerate(grace.successors) if hmac.compare_digest(d, row.digest))
    level = Level.of(row.aal, row.amr, row.mfa_pending)
    return Replay(row.user_id, row.expires_at, found, level)
