"""Store contract tests: the same cases on SQLite and on PostgreSQL (the `backend` fixture),
calling the stores directly on a migrated database."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from authgate.store.db import Database, upgrade_schema
from authgate.store.sessions import open_session
from authgate.store.users import Credentials, add_user, credentials
from tests.conftest import Backend, make_config


@pytest.fixture
async def db(backend: Backend) -> AsyncIterator[Database]:
    database = Database(make_config(backend))
    await upgrade_schema(database)
    try:
        yield database
    finally:
        await database.dispose()


def new_digest() -> bytes:
    return secrets.token_bytes(32)


async def new_user(db: Database, now: datetime, key: str = "ada@example.com") -> Credentials:
    user = await add_user(
        db,
        email=key,
        email_key=key,
        password_hash="$argon2id$not-a-real-hash",
        is_superuser=False,
        email_verified=False,
        now=now,
    )
    assert user is not None
    found = await credentials(db, key)
    assert found is not None
    return found


async def new_session(
    db: Database,
    user: Credentials,
    now: datetime,
    *,
    session_end: datetime | None = None,
    refresh_ttl: float = 3600,
) -> tuple[str, bytes]:
    """(session id, digest of its first refresh token)."""
    session_id = secrets.token_hex(16)
    digest = new_digest()
    opened = await open_session(
        db,
        session_id=session_id,
        user=user,
        now=now,
        session_end=session_end,
        digest=digest,
        refresh_end=now + timedelta(seconds=refresh_ttl),
    )
    assert opened
    return session_id, digest
