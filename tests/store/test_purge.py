"""`purge`: what it deletes and what it keeps, in keyset batches smaller than each table."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from authgate.store.db import Database
from authgate.store.limits import SqlCounters
from authgate.store.models import OneTimeToken, RateLimitCounter, RefreshToken, Session
from authgate.store.one_time import TokenStore
from authgate.store.purge import KEEP_SPENT, purge
from authgate.store.rotation import Outcome, RefreshBudget, rotate
from authgate.store.sessions import SessionStore
from tests.helpers import FakeClock, new_digest, new_session, new_user

BUDGET = RefreshBudget(burst=2**31 - 1, window=60)


async def test_purge_deletes_what_can_never_be_used_and_keeps_the_rest(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    # A live family rotated six times: seven tokens, six of them spent.
    live, token = await new_session(db, user, clock())
    family = [token]
    for _ in range(6):
        successor = new_digest()
        rotation = await rotate(
            db,
            token,
            successor,
            now=clock(),
            refresh_end=clock() + timedelta(hours=1),
            budget=BUDGET,
        )
        assert rotation.outcome is Outcome.ROTATED
        family.append(successor)
        token = successor
    revoked, _ = await new_session(db, user, clock())
    expired, _ = await new_session(db, user, clock(), session_end=clock() + timedelta(seconds=5))
    ended_unused, _ = await new_session(db, user, clock(), refresh_ttl=5)
    async with db.write() as s:
        await SessionStore(s).revoke(revoked, clock(), "logout")
        tokens = TokenStore(s)
        for purpose, digest, ttl in (
            ("reset", b"r" * 32, 5),  # expires
            ("reset", b"s" * 32, 3600),  # spent below
            ("verify", b"v" * 32, 3600),  # live
        ):
            await tokens.add(
                user_id=user.user_id,
                purpose=purpose,
                digest=digest,
                now=clock(),
                expires_at=clock() + timedelta(seconds=ttl),
            )
        assert await tokens.spend("reset", b"s" * 32, clock()) == user.user_id
    counters = SqlCounters(db)
    await counters.hit("short", limit=5, window=5, now=clock())
    await counters.hit("long", limit=5, window=3600, now=clock())

    clock.advance(10)
    result = await purge(db, clock(), batch_size=2)

    assert result.sessions == 3  # revoked, expired, and the one whose only token expired
    assert result.one_time_tokens == 2
    assert result.rate_limit_counters == 1
    assert result.batches > 4  # several short transactions per table
    async with db.read() as s:
        sessions = set((await s.scalars(select(Session.id))).all())
        kept = set((await s.scalars(select(RefreshToken.digest))).all())
        one_time = set((await s.scalars(select(OneTimeToken.digest))).all())
        counter_keys = set((await s.scalars(select(RateLimitCounter.key))).all())
    assert sessions == {live}
    # The newest spent tokens stay, so presenting one is still reuse; older ones go.
    assert kept == set(family[-1 - KEEP_SPENT :])
    assert result.refresh_tokens == len(family) - 1 - KEEP_SPENT
    assert one_time == {b"v" * 32}
    assert counter_keys == {"long"}
    assert expired not in sessions
    assert ended_unused not in sessions

    again = await purge(db, clock(), batch_size=2)
    assert again.total == 0
    reuse = await rotate(
        db,
        family[-2],
        new_digest(),
        now=clock(),
        refresh_end=clock() + timedelta(hours=1),
        budget=BUDGET,
    )
    assert reuse.outcome is Outcome.REUSED
