"""Migration 0004 (self-service): existing sessions and tokens survive it, on SQLite through
the rebuild of the users table with AUTOINCREMENT; afterwards a deleted account's id is
never handed to a new one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from authgate import create_app
from authgate.store.db import Database, upgrade_schema
from authgate.store.migrations import HEAD_REVISION
from tests.helpers import (
    PASSWORD,
    bearer,
    empty_backend,
    login,
    make_config,
    register,
    running,
    upgrade_to,
)

ROWS = {
    "authgate_sessions": 2,
    "authgate_refresh_tokens": 2,
    "authgate_one_time_tokens": 1,
}


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
async def test_existing_sessions_survive_and_ids_are_never_reused(
    backend_name: str, tmp_path: Path
) -> None:
    async with empty_backend(backend_name, tmp_path / "data") as backend:
        db = Database(make_config(backend))
        try:
            async with db.engine.connect() as conn:
                await conn.run_sync(upgrade_to, "0003")
                await conn.commit()
            # Accounts, sessions and tokens as 0003 wrote them, through the app at 0003's
            # schema would need 0003's code: plain SQL instead.
            now = datetime.now(UTC)
            later = now + timedelta(days=1)
            async with db.write() as s:
                ids = []
                for email in ("ann@example.com", "bob@example.com"):
                    uid = (
                        await s.execute(
                            text(
                                "INSERT INTO authgate_users (email, email_key, password_hash,"
                                " is_active, is_superuser, email_verified, credentials_version,"
                                " created_at, updated_at) VALUES (:e, :e, 'x', true, false,"
                                " false, 0, :now, :now) RETURNING id"
                            ),
                            {"e": email, "now": now.replace(tzinfo=None)},
                        )
                    ).scalar_one()
                    ids.append(uid)
                    await s.execute(
                        text(
                            "INSERT INTO authgate_sessions (id, user_id, created_at,"
                            " credentials_version, refresh_count) VALUES (:sid, :id, :now, 0, 0)"
                        ),
                        {"sid": f"s{uid}" * 8, "id": uid, "now": now.replace(tzinfo=None)},
                    )
                    await s.execute(
                        text(
                            "INSERT INTO authgate_refresh_tokens (session_id, digest, created_at,"
                            " expires_at) VALUES (:sid, :d, :now, :later)"
                        ),
                        {
                            "sid": f"s{uid}" * 8,
                            "d": bytes([uid]) * 32,
                            "now": now.replace(tzinfo=None),
                            "later": later.replace(tzinfo=None),
                        },
                    )
                await s.execute(
                    text(
                        "INSERT INTO authgate_one_time_tokens (user_id, purpose, digest,"
                        " created_at, expires_at) VALUES (:u, 'reset', :d, :now, :later)"
                    ),
                    {
                        "u": ids[0],
                        "d": b"\x09" * 32,
                        "now": now.replace(tzinfo=None),
                        "later": later.replace(tzinfo=None),
                    },
                )
            assert await upgrade_schema(db)
            async with db.read() as s:
                version = (
                    await s.execute(text("SELECT version_num FROM authgate_alembic_version"))
                ).scalar_one()
                counts = {
                    table: (await s.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
                    for table in ROWS
                }
                if backend_name == "sqlite":
                    foreign_keys = (await s.execute(text("PRAGMA foreign_keys"))).scalar_one()
                    assert foreign_keys == 1
        finally:
            await db.dispose()
        assert version == HEAD_REVISION
        assert counts == ROWS

        async with running(create_app(make_config(backend))) as client:
            # New accounts after the old ones; delete the newest, and the next one must
            # not get its id (SQLite reused the highest deleted rowid before 0004).
            doomed = await register(client, "carol@example.com")
            tokens = await login(client, "carol@example.com")
            deleted = await client.request(
                "DELETE",
                "/auth/me",
                json={"password": PASSWORD},
                headers=bearer(tokens["access_token"]),
            )
            assert deleted.status_code == 204, deleted.text
            newcomer = await register(client, "dave@example.com")
            assert doomed["id"] > max(ids)
            assert newcomer["id"] > doomed["id"]
