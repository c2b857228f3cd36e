"""`rotate`: exactly once under concurrency, reuse, expiry, the per-session budget."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import func, select

from authgate.store.db import Database
from authgate.store.models import RefreshToken, Session
from authgate.store.rotation import Outcome, RefreshBudget, Rotation, rotate
from tests.helpers import FakeClock, new_digest, new_session, new_user

UNLIMITED = RefreshBudget(burst=2**31 - 1, window=60)
TTL = timedelta(hours=1)


async def _rotate(
    db: Database, digest: bytes, clock: FakeClock, budget: RefreshBudget = UNLIMITED
) -> tuple[Rotation, bytes]:
    successor = new_digest()
    rotation = await rotate(
        db, digest, successor, now=clock(), refresh_end=clock() + TTL, budget=budget
    )
    return rotation, successor


async def test_rotates_a_live_token_once(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    rotation, second = await _rotate(db, first, clock)
    assert rotation == Rotation(Outcome.ROTATED, session_id, user.user_id, None)
    rotation, _ = await _rotate(db, second, clock)
    assert rotation.outcome is Outcome.ROTATED


async def test_concurrent_rotations_of_one_token_rotate_exactly_once(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    results = await asyncio.gather(*(_rotate(db, first, clock) for _ in range(8)))
    outcomes = sorted(rotation.outcome.value for rotation, _ in results)
    assert outcomes == ["reused"] * 7 + ["rotated"]
    async with db.read() as s:
        tokens = await s.scalar(select(func.count()).where(RefreshToken.session_id == session_id))
        revoked = await s.scalar(select(Session.revoke_reason).where(Session.id == session_id))
    assert tokens == 2  # the spent token and the one successor
    assert revoked == "reuse"
    # The winner's successor died with its family.
    winner = next(
        successor for rotation, successor in results if rotation.outcome is Outcome.ROTATED
    )
    assert (await _rotate(db, winner, clock))[0].outcome is Outcome.ENDED


async def test_a_spent_token_presented_again_is_reuse_and_revokes_the_family(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    _, second = await _rotate(db, first, clock)
    rotation, _ = await _rotate(db, first, clock)
    assert rotation == Rotation(Outcome.REUSED, session_id)
    # The newest token is spent by the next presentation, but opens nothing.
    rotation, _ = await _rotate(db, second, clock)
    assert rotation.outcome is Outcome.ENDED
    assert rotation.session_id == session_id


async def test_an_unknown_token_is_invalid(db: Database, clock: FakeClock) -> None:
    await new_user(db, clock())
    rotation, _ = await _rotate(db, new_digest(), clock)
    assert rotation == Rotation(Outcome.INVALID)


async def test_an_expired_token_is_invalid_and_stays_unspent(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock(), refresh_ttl=60)
    clock.advance(60)
    rotation, _ = await _rotate(db, first, clock)
    assert rotation == Rotation(Outcome.INVALID)
    async with db.read() as s:
        used = await s.scalar(select(RefreshToken.used_at).where(RefreshToken.digest == first))
        revoked = await s.scalar(select(Session.revoked_at).where(Session.id == session_id))
    assert used is None
    assert revoked is None


async def test_the_successor_never_outlives_its_session(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    start = clock()
    session_id, first = await new_session(
        db, user, start, session_end=start + timedelta(seconds=60)
    )
    clock.advance(10)
    rotation, second = await _rotate(db, first, clock)
    assert rotation == Rotation(
        Outcome.ROTATED, session_id, user.user_id, start + timedelta(seconds=60)
    )
    async with db.read() as s:
        expires = await s.scalar(
            select(RefreshToken.expires_at).where(RefreshToken.digest == second)
        )
    assert expires == start + timedelta(seconds=60)


async def test_a_token_of_an_expired_session_is_spent_without_successor(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    start = clock()
    session_id, first = await new_session(
        db, user, start, session_end=start + timedelta(seconds=30)
    )
    clock.advance(30)
    rotation, _ = await _rotate(db, first, clock)
    assert rotation.outcome is Outcome.ENDED
    async with db.read() as s:
        tokens = await s.scalar(select(func.count()).where(RefreshToken.session_id == session_id))
    assert tokens == 1


async def test_over_the_per_session_budget_the_token_is_kept_with_a_retry_after(
    db: Database, clock: FakeClock
) -> None:
    budget = RefreshBudget(burst=2, window=60)
    user = await new_user(db, clock())
    session_id, token = await new_session(db, user, clock())
    for _ in range(2):
        rotation, token = await _rotate(db, token, clock, budget)
        assert rotation.outcome is Outcome.ROTATED
    clock.advance(20)
    limited, _ = await _rotate(db, token, clock, budget)
    assert limited == Rotation(Outcome.LIMITED, session_id, retry_after=40)
    # Not spent: once the window is over the same token rotates.
    clock.advance(40)
    rotation, _ = await _rotate(db, token, clock, budget)
    assert rotation.outcome is Outcome.ROTATED
