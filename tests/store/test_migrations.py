"""Migrations on both databases: Alembic's head is the revision the code checks for, and
migration 0003 recomputes the email keys of existing rows (issue 10, F11 and F12)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.config import Config
from argon2 import PasswordHasher
from sqlalchemy import select, text

import authgate.store.migrations
from authgate import create_app
from authgate.factors.hashing import ARGON2_MEMORY_KIB, ARGON2_PARALLELISM, ARGON2_TIME_COST
from authgate.factors.password_rules import normalise
from authgate.store.db import Database, upgrade_schema
from authgate.store.migrations import HEAD_REVISION
from authgate.store.models import User
from tests.helpers import (
    FULLWIDTH_SAM,
    OTHER_PASSWORD,
    PASSWORD,
    AppFactory,
    Backend,
    empty_backend,
    login,
    make_config,
    register,
    running,
    upgrade_to,
    user_id,
)


def test_head_revision_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    from authgate.store.migrations import HEAD_REVISION

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(authgate.store.migrations.__file__).parent))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION


# --- migration 0003 ----------------------------------------------------------------------


#: (stored email, email_key as the rules before 0003 made it, the key 0003 must give it).
LEGACY_ROWS = [
    ("Ann@example.com", "ann@example.com", "ann@example.com"),  # unchanged
    (FULLWIDTH_SAM, "sam@example.com", FULLWIDTH_SAM),  # NFKC differs from NFC
    ("\ufb01nn@example.com", "finn@example.com", "\ufb01nn@example.com"),  # the ligature fi
    ("victim@straße.de", "victim@strasse.de", "victim@xn--strae-oqa.de"),
    ("Straße@bücher.de", "strasse@bücher.de", "straße@xn--bcher-kva.de"),
]


#: Rows no rule of ours would have written, for the defensive paths: an address the current
#: email-validator refuses keeps its key, and a row whose new key is an earlier row's keeps its
#: old one; neither fails the migration.
ODD_ROWS = [
    ("legacy@localhost", "legacy@localhost"),
    ("DUP@example.com", "odd-old-key@example.com"),  # new key: Dup@'s, an earlier row
]


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
async def test_migration_0003_rekeys_existing_accounts_and_they_keep_logging_in(
    backend_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with empty_backend(backend_name, tmp_path / "data") as backend:
        db = Database(make_config(backend))
        try:
            async with db.engine.connect() as conn:
                await conn.run_sync(upgrade_to, "0002")
                await conn.commit()
            password_hash = PasswordHasher(
                time_cost=ARGON2_TIME_COST,
                memory_cost=ARGON2_MEMORY_KIB,
                parallelism=ARGON2_PARALLELISM,
            ).hash(normalise(PASSWORD))
            now = datetime.now(UTC)
            rows = [
                (email, key)
                for email, key, _ in [
                    ("Dup@example.com", "dup@example.com", ""),
                    *LEGACY_ROWS,
                ]
            ] + ODD_ROWS
            async with db.write() as s:
                for email, key in rows:
                    s.add(
                        User(
                            email=email,
                            email_key=key,
                            password_hash=password_hash,
                            is_active=True,
                            is_superuser=False,
                            email_verified=False,
                            created_at=now,
                            updated_at=now,
                        )
                    )
            with caplog.at_level(logging.INFO, logger="authgate.store.migrations"):
                assert await upgrade_schema(db)
            async with db.read() as s:
                result = await s.execute(select(User.email, User.email_key))
                keys: dict[str, str] = dict(result.all())
                version = (
                    await s.execute(text("SELECT version_num FROM authgate_alembic_version"))
                ).scalar_one()
        finally:
            await db.dispose()

        assert version == HEAD_REVISION  # 0003 ran, and every later one
        for email, _, new_key in LEGACY_ROWS:
            assert keys[email] == new_key, email
        assert keys["Dup@example.com"] == "dup@example.com"
        assert keys["legacy@localhost"] == "legacy@localhost"
        assert keys["DUP@example.com"] == "odd-old-key@example.com"
        logged = [r.getMessage() for r in caplog.records if r.name == "authgate.store.migrations"]
        assert any("keeps its current email key" in m for m in logged), logged
        assert any("not a valid address" in m for m in logged), logged
        for message in logged:  # user ids, never an address
            assert "@" not in message, message

        async with running(create_app(make_config(backend))) as client:
            # Every account logs in with the address it has, in any case.
            for email, _, _ in LEGACY_ROWS:
                await login(client, email)
                await login(client, email.upper() if email.isascii() else email)
            # The addresses the old keys had merged into them are free now: their owners can
            # register, and have accounts of their own.
            for email, old_key, _ in LEGACY_ROWS[1:]:
                await register(client, old_key, OTHER_PASSWORD)
                assert await user_id(client, old_key, OTHER_PASSWORD) != await user_id(
                    client, email
                )


async def test_the_migration_is_a_no_op_on_a_database_at_head(
    backend: Backend, make_client: AppFactory
) -> None:
    """A database created at head (the `backend` fixture's) holds only new-rule keys."""
    async with make_client() as client:
        await register(client, "victim@straße.de")
        await register(client, "victim@strasse.de")
    db = Database(make_config(backend))
    try:
        assert not await upgrade_schema(db)
        async with db.read() as s:
            keys = set((await s.execute(select(User.email_key))).scalars())
    finally:
        await db.dispose()
    assert keys == {"victim@xn--strae-oqa.de", "victim@strasse.de"}
