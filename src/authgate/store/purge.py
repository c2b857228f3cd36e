"""`authgate purge`: delete what can never be used again, table by table, in keyset batches.

One loop (`_drain`) serves every table: it walks the table's key in order, `batch_size` rows
at a time, and deletes the rows of each window that a table's predicate calls dead. Keyset
batches walk the key once, so a purge of millions of rows is linear; each batch examines at
most `batch_size` rows in its own short transaction, so no lock is held for long and logins
and refreshes go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Column, Table, and_, delete, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from authgate.store.audit import trim_audit
from authgate.store.db import Database
from authgate.store.models import (
    Base,
    OneTimeToken,
    RateLimitCounter,
    RefreshToken,
    Session,
    WebAuthnChallenge,
)

__all__ = ["KEEP_SPENT", "PurgeResult", "purge"]

#: Spent refresh tokens kept per family for reuse detection (see `_refresh_token_dead`).
KEEP_SPENT = 3

_sessions: Table = Base.metadata.tables[Session.__tablename__]
_tokens: Table = Base.metadata.tables[RefreshToken.__tablename__]
_one_time: Table = Base.metadata.tables[OneTimeToken.__tablename__]
_counters: Table = Base.metadata.tables[RateLimitCounter.__tablename__]
_challenges: Table = Base.metadata.tables[WebAuthnChallenge.__tablename__]
_newer_spent = _tokens.alias("newer")


@dataclass
class PurgeResult:
    sessions: int = 0
    refresh_tokens: int = 0
    one_time_tokens: int = 0
    rate_limit_counters: int = 0
    webauthn_challenges: int = 0
    audit_events: int = 0
    batches: int = 0

    @property
    def total(self) -> int:
        return (
            self.sessions
            + self.refresh_tokens
            + self.one_time_tokens
            + self.rate_limit_counters
            + self.webauthn_challenges
            + self.audit_events
        )


async def purge(
    db: Database,
    now: datetime,
    batch_size: int = 5000,
    *,
    audit_retention_days: int | None = None,
) -> PurgeResult:
    """Delete finished sessions (their refresh tokens by cascade), expired refresh tokens and
    spent ones beyond the newest `KEEP_SPENT` of their family, spent or expired one-time
    tokens, rate-limit counters whose window is over, and expired WebAuthn challenges (a
    ceremony that was never finished); with `audit_retention_days`, audit events older than
    that many days (0: every one, the audit log being off)."""
    result = PurgeResult()
    result.sessions = await _drain(db, _sessions.c.id, _session_over(now), "", batch_size, result)
    result.refresh_tokens = await _drain(
        db, _tokens.c.id, _refresh_token_dead(now), 0, batch_size, result
    )
    result.one_time_tokens = await _drain(
        db,
        _one_time.c.id,
        or_(_one_time.c.expires_at <= now, _one_time.c.used_at.is_not(None)),
        0,
        batch_size,
        result,
    )
    result.rate_limit_counters = await _drain(
        db, _counters.c.key, _counters.c.window_end <= now, "", batch_size, result
    )
    result.webauthn_challenges = await _drain(
        db, _challenges.c.id, _challenges.c.expires_at <= now, 0, batch_size, result
    )
    if audit_retention_days is not None:
        cutoff = now - timedelta(days=audit_retention_days)
        result.audit_events, batches = await trim_audit(db, cutoff, batch_size)
        result.batches += batches
    return result


async def _drain(
    db: Database,
    key: Column[Any],
    dead: ColumnElement[bool],
    after: Any,
    batch_size: int,
    result: PurgeResult,
) -> int:
    """Delete the rows of `key`'s table for which `dead` holds, one keyset batch of
    `batch_size` keys above `after` per transaction, until the end; the rows deleted."""
    table = key.table
    deleted = 0
    while True:
        async with db.write() as s:
            window = list(
                (
                    await s.execute(
                        select(key, dead).where(key > after).order_by(key).limit(batch_size)
                    )
                ).all()
            )
            doomed = [row_key for row_key, is_dead in window if is_dead]
            if doomed:
                await s.execute(delete(table).where(key.in_(doomed)))
        deleted += len(doomed)
        result.batches += 1
        if len(window) < batch_size:
            return deleted
        after = window[-1][0]


def _session_over(now: datetime) -> ColumnElement[bool]:
    return or_(
        _sessions.c.revoked_at.is_not(None),
        _sessions.c.expires_at <= now,
        # A family with no refresh token left that can still be used is over.
        ~select(_tokens.c.id)
        .where(
            _tokens.c.session_id == _sessions.c.id,
            _tokens.c.used_at.is_(None),
            _tokens.c.expires_at > now,
        )
        .exists(),
    )


def _refresh_token_dead(now: datetime) -> ColumnElement[bool]:
    """Expired, or spent and older than the newest `KEEP_SPENT` spent tokens of its family.

    The newest spent tokens of a family stay until they expire: presenting one again is
    reuse and revokes the family. Older spent tokens go (one client rotating all day would
    otherwise keep millions of rows); presented again, such a token is unknown and refused
    (401) without revoking the family, which its holder cannot use anyway.
    """
    newer = (
        select(func.count())
        .select_from(_newer_spent)
        .where(
            _newer_spent.c.session_id == _tokens.c.session_id,
            _newer_spent.c.id > _tokens.c.id,
            _newer_spent.c.used_at.is_not(None),
        )
    )
    return or_(
        _tokens.c.expires_at <= now,
        and_(_tokens.c.used_at.is_not(None), newer.scalar_subquery() >= KEEP_SPENT),
    )
