"""`add_user`, `credentials` and `open_session`: the login's unit of work refuses credentials
that changed after they were read, and its re-hash never undoes a reset."""

from __future__ import annotations

import secrets
from datetime import timedelta

from sqlalchemy import func, select

from authgate.store.db import Database
from authgate.store.models import RefreshToken, Session
from authgate.store.sessions import SessionStore, open_session
from authgate.store.users import Credentials, UserStore, add_user, credentials
from tests.helpers import FakeClock, new_digest, new_user


async def _open(
    db: Database, user: Credentials, clock: FakeClock, new_hash: str | None = None
) -> tuple[bool, str]:
    session_id = secrets.token_hex(16)
    opened = await open_session(
        db,
        session_id=session_id,
        user=user,
        now=clock(),
        session_end=None,
        digest=new_digest(),
        refresh_end=clock() + timedelta(hours=1),
        new_hash=new_hash,
    )
    return opened, session_id


async def _rows(db: Database, session_id: str) -> tuple[int, int]:
    """(sessions, refresh tokens) stored under `session_id`."""
    async with db.read() as s:
        sessions = await s.scalar(select(func.count()).where(Session.id == session_id))
        tokens = await s.scalar(select(func.count()).where(RefreshToken.session_id == session_id))
    return sessions or 0, tokens or 0


async def test_add_user_refuses_a_taken_email_key(db: Database, clock: FakeClock) -> None:
    first = await new_user(db, clock())
    again = await add_user(
        db,
        email="Ada@Example.com",
        email_key="ada@example.com",
        password_hash="$argon2id$other",
        is_superuser=True,
        email_verified=True,
        now=clock(),
    )
    assert again is None
    assert await credentials(db, "ada@example.com") == first
    assert await credentials(db, "nobody@example.com") is None


async def test_open_session_with_current_credentials(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    opened, session_id = await _open(db, user, clock)
    assert opened
    assert await _rows(db, session_id) == (1, 1)


async def test_open_session_refuses_an_outdated_credentials_version(
    db: Database, clock: FakeClock
) -> None:
    verified = await new_user(db, clock())
    async with db.write() as s:  # a reset commits while the login hashes
        await UserStore(s).set_password(verified.user_id, "$argon2id$reset", clock())
    for new_hash in (None, "$argon2id$rehashed"):
        opened, session_id = await _open(db, verified, clock, new_hash)
        assert not opened
        assert await _rows(db, session_id) == (0, 0)
    # The re-hash was a compare-and-swap on the verified hash: the reset stands.
    current = await credentials(db, "ada@example.com")
    assert current is not None
    assert current.password_hash == "$argon2id$reset"
    assert current.version == verified.version + 1
    assert (await _open(db, current, clock))[0]


async def test_open_session_refuses_a_deactivated_user(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    async with db.write() as s:
        await UserStore(s).set_flags(user.user_id, clock(), is_active=False)
    assert not (await _open(db, user, clock))[0]
    inactive = await credentials(db, "ada@example.com")
    assert inactive is not None
    assert not inactive.is_active
    assert not (await _open(db, inactive, clock))[0]


async def test_open_session_rehashes_current_credentials(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    opened, session_id = await _open(db, user, clock, "$argon2id$stronger")
    assert opened
    assert await _rows(db, session_id) == (1, 1)
    current = await credentials(db, "ada@example.com")
    assert current is not None
    assert current.password_hash == "$argon2id$stronger"
    assert current.version == user.version  # same password: the sessions stay


async def test_revoke_all_revokes_only_live_sessions(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    opened = [(await _open(db, user, clock))[1] for _ in range(3)]
    async with db.write() as s:
        assert await SessionStore(s).revoke(opened[0], clock(), "logout")
        assert not await SessionStore(s).revoke(opened[0], clock(), "logout")
    async with db.write() as s:
        revoked = await SessionStore(s).revoke_all(user.user_id, clock(), "password_reset")
    assert sorted(revoked) == sorted(opened[1:])
