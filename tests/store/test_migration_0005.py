"""Migration 0005 (second factors): sessions that exist before it become password sessions
(`aal1`, `pwd`, nothing due) and keep refreshing; on SQLite the columns are added in place, so
no rebuild cascades to their refresh tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from sqlalchemy import text

from authgate import create_app
from authgate.store.db import Database, upgrade_schema
from authgate.tokens.keys import digest, new_opaque_token
from tests.helpers import empty_backend, make_config, refresh, running, upgrade_to


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
async def test_existing_sessions_become_password_sessions_and_keep_refreshing(
    backend_name: str, tmp_path: Path
) -> None:
    token = new_opaque_token()
    sid = "5" * 32
    async with empty_backend(backend_name, tmp_path / "data") as backend:
        db = Database(make_config(backend))
        try:
            async with db.engine.connect() as conn:
                await conn.run_sync(upgrade_to, "0004")
                await conn.commit()
            now = datetime.now(UTC).replace(tzinfo=None)
            async with db.write() as s:
                uid = (
                    await s.execute(
                        text(
                            "INSERT INTO authgate_users (email, email_key, password_hash,"
                            " is_active, is_superuser, email_verified, credentials_version,"
                            " created_at, updated_at) VALUES ('ann@example.com',"
                            " 'ann@example.com', 'x', true, false, false, 0, :now, :now)"
                            " RETURNING id"
                        ),
                        {"now": now},
                    )
                ).scalar_one()
                await s.execute(
                    text(
                        "INSERT INTO authgate_sessions (id, user_id, created_at,"
                        " credentials_version, refresh_count) VALUES (:sid, :uid, :now, 0, 0)"
                    ),
                    {"sid": sid, "uid": uid, "now": now},
                )
                await s.execute(
                    text(
                        "INSERT INTO authgate_refresh_tokens (session_id, digest, created_at,"
                        " expires_at) VALUES (:sid, :d, :now, :later)"
                    ),
                    {"sid": sid, "d": digest(token), "now": now, "later": now + timedelta(1)},
                )
            assert await upgrade_schema(db)
            async with db.read() as s:
                row = (
                    await s.execute(
                        text("SELECT aal, amr, mfa_pending FROM authgate_sessions WHERE id = :s"),
                        {"s": sid},
                    )
                ).one()
                tokens = (
                    await s.execute(text("SELECT count(*) FROM authgate_refresh_tokens"))
                ).scalar_one()
        finally:
            await db.dispose()
        assert (row.aal, row.amr, bool(row.mfa_pending)) == (1, "pwd", False)
        assert tokens == 1

        async with running(create_app(make_config(backend))) as client:
            rotated = await refresh(client, token)
            assert rotated.status_code == 200, rotated.text
            claims = jwt.decode(rotated.json()["access_token"], options={"verify_signature": False})
            assert (claims["aal"], claims["amr"], "mfa" in claims) == ("aal1", ["pwd"], False)
            me = await client.get(
                "/auth/me", headers={"Authorization": f"Bearer {rotated.json()['access_token']}"}
            )
            assert me.status_code == 200, me.text
