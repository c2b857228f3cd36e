"""`rotate` with refresh grace (contract §8): a spent token presented again within the window,
its successor unused, is REPLAYED (nothing written, the successor named among the candidates);
later, once the successor is used, or when it is not among the candidates, it is reuse."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import func, select, update

from authgate.store.db import Database
from authgate.store.grace import Grace
from authgate.store.models import RefreshToken, Session, User
from authgate.store.rotation import Outcome, RefreshBudget, Rotation, rotate
from authgate.store.sessions import SessionStore
from tests.helpers import FakeClock, new_digest, new_session, new_user

UNLIMITED = RefreshBudget(burst=2**31 - 1, window=60)
TTL = timedelta(hours=1)
WINDOW = 30


async def _rotate(
    db: Database,
    digest: bytes,
    successor: bytes,
    clock: FakeClock,
    *,
    candidates: list[bytes] | None = None,
    budget: RefreshBudget = UNLIMITED,
    window: int | None = WINDOW,
) -> Rotation:
    """Rotate `digest` to `successor`; with a window, `successor` (or `candidates`) is what
    the service would have derived from the presented token."""
    grace = None if window is None else Grace(window, candidates or [successor])
    return await rotate(
        db, digest, successor, now=clock(), refresh_end=clock() + TTL, budget=budget, grace=grace
    )


async def _family(db: Database, session_id: str) -> tuple[int, int, str | None, int]:
    """(tokens, unused tokens, revoke reason, rotations counted) of one session."""
    async with db.read() as s:
        tokens = await s.scalar(select(func.count()).where(RefreshToken.session_id == session_id))
        unused = await s.scalar(
            select(func.count()).where(
                RefreshToken.session_id == session_id, RefreshToken.used_at.is_(None)
            )
        )
        row = (
            await s.execute(
                select(Session.revoke_reason, Session.refresh_count).where(Session.id == session_id)
            )
        ).one()
    assert tokens is not None
    assert unused is not None
    return tokens, unused, row.revoke_reason, row.refresh_count


async def test_a_replay_inside_the_window_names_the_unused_successor_and_writes_nothing(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    assert (await _rotate(db, first, second, clock)).outcome is Outcome.ROTATED
    # At the window's last second (inclusive), presented again: its successor, unused.
    clock.advance(WINDOW)
    replayed = await _rotate(db, first, second, clock)
    assert replayed == Rotation(Outcome.REPLAYED, session_id, user.user_id, None, successor=0)
    assert await _family(db, session_id) == (2, 1, None, 1)
    # The successor is the family's one live token: it rotates, once.
    third = new_digest()
    assert (await _rotate(db, second, third, clock)).outcome is Outcome.ROTATED
    assert await _family(db, session_id) == (3, 1, None, 2)


async def test_after_the_window_a_replay_is_reuse_and_revokes_the_family(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    await _rotate(db, first, second, clock)
    clock.advance(WINDOW + 1)
    assert await _rotate(db, first, second, clock) == Rotation(Outcome.REUSED, session_id)
    assert (await _family(db, session_id))[2] == "reuse"
    assert (await _rotate(db, second, new_digest(), clock)).outcome is Outcome.ENDED


async def test_once_the_successor_is_used_a_replay_is_reuse(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second, third = new_digest(), new_digest()
    await _rotate(db, first, second, clock)
    assert (await _rotate(db, second, third, clock)).outcome is Outcome.ROTATED
    clock.advance(1)
    assert await _rotate(db, first, second, clock) == Rotation(Outcome.REUSED, session_id)
    assert (await _family(db, session_id))[2] == "reuse"
    assert (await _rotate(db, third, new_digest(), clock)).outcome is Outcome.ENDED


async def test_a_successor_not_among_the_candidates_is_reuse(
    db: Database, clock: FakeClock
) -> None:
    """A rotation whose successor was not derived from the token (grace was off then), or was
    derived under a key this server no longer holds: the replay cannot be answered."""
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    await _rotate(db, first, second, clock, window=None)
    rotation = await _rotate(db, first, new_digest(), clock)
    assert rotation == Rotation(Outcome.REUSED, session_id)
    assert (await _family(db, session_id))[2] == "reuse"


async def test_the_successor_derived_under_a_previous_key_is_found(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    await _rotate(db, first, second, clock)
    # The key rotated since: the current key derives something else, the previous one `second`.
    current = new_digest()
    replayed = await _rotate(db, first, current, clock, candidates=[current, second])
    assert replayed == Rotation(Outcome.REPLAYED, session_id, user.user_id, None, successor=1)
    assert await _family(db, session_id) == (2, 1, None, 1)


async def test_concurrent_presentations_inside_the_window_make_one_branch(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    successor = new_digest()  # what every presentation derives from the same token
    results = await asyncio.gather(*(_rotate(db, first, successor, clock) for _ in range(8)))
    outcomes = sorted(rotation.outcome.value for rotation in results)
    assert outcomes == ["replayed"] * 7 + ["rotated"]
    assert {(r.session_id, r.user_id, r.successor) for r in results} == {
        (session_id, user.user_id, 0)
    }
    # The spent token and its one successor; one rotation counted; nothing revoked.
    assert await _family(db, session_id) == (2, 1, None, 1)
    assert (await _rotate(db, successor, new_digest(), clock)).outcome is Outcome.ROTATED


async def test_replays_are_neither_limited_nor_counted_by_the_session_budget(
    db: Database, clock: FakeClock
) -> None:
    budget = RefreshBudget(burst=2, window=60)
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second, third = new_digest(), new_digest()
    assert (await _rotate(db, first, second, clock, budget=budget)).outcome is Outcome.ROTATED
    for _ in range(5):
        replayed = await _rotate(db, first, second, clock, budget=budget)
        assert replayed.outcome is Outcome.REPLAYED
    assert (await _rotate(db, second, third, clock, budget=budget)).outcome is Outcome.ROTATED
    limited = await _rotate(db, third, new_digest(), clock, budget=budget)
    assert limited.outcome is Outcome.LIMITED
    assert await _family(db, session_id) == (3, 1, None, 2)


async def test_no_replay_once_the_session_is_over(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    # Revoked (a logout): the replay is reuse, and the revocation keeps its reason.
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    await _rotate(db, first, second, clock)
    async with db.write() as s:
        assert await SessionStore(s).revoke(session_id, clock(), "logout")
    assert await _rotate(db, first, second, clock) == Rotation(Outcome.REUSED, session_id)
    assert (await _family(db, session_id))[2] == "logout"
    # The user deactivated: no replay either.
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    await _rotate(db, first, second, clock)
    async with db.write() as s:
        await s.execute(update(User).where(User.id == user.user_id).values(is_active=False))
    assert await _rotate(db, first, second, clock) == Rotation(Outcome.REUSED, session_id)


async def test_without_grace_a_second_presentation_is_reuse_at_once(
    db: Database, clock: FakeClock
) -> None:
    user = await new_user(db, clock())
    session_id, first = await new_session(db, user, clock())
    second = new_digest()
    await _rotate(db, first, second, clock, window=None)
    rotation = await _rotate(db, first, second, clock, window=None)
    assert rotation == Rotation(Outcome.REUSED, session_id)
    assert (await _family(db, session_id))[2] == "reuse"
