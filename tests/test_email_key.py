"""The key accounts are unique by, through HTTP on both backends (issue 10, F11 and F12), and
migration 0003, which recomputes the keys of existing rows.

F11: an address whose NFKC form outgrew the 320-character key column answered 500 on
PostgreSQL. F12: the NFKC + case-fold key merged different mailboxes (`sam@` spelt with a
fullwidth or a long s took `sam@`; `victim@straße.de` took `victim@strasse.de`), so a squatter
received the owner's reset mails and the owner could never register. The key is now the address
as email-validator normalises it, the domain in IDNA ASCII form and the local part lower-cased
with `str.lower()`; new addresses with compatibility characters are refused. The properties
behind it are in tests/test_properties.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest
from alembic import command
from alembic.config import Config
from argon2 import PasswordHasher
from sqlalchemy import Connection, select, text

import authgate.store.migrations
from authgate import create_app
from authgate.factors.hashing import ARGON2_MEMORY_KIB, ARGON2_PARALLELISM, ARGON2_TIME_COST
from authgate.factors.password_rules import normalise
from authgate.store.db import Database, upgrade_schema
from authgate.store.models import User
from tests.conftest import (
    PASSWORD,
    PG_HOST,
    PG_PORT,
    PG_USER,
    REDIS_URL,
    AppFactory,
    Backend,
    Outbox,
    PgTemplate,
    bearer,
    clean_env,
    delete_redis_prefix,
    login,
    make_config,
    register,
    require_backend,
    running,
)
from tests.processes.test_cli import assert_user_error, create_cmd, run_cmd, run_many
from tests.processes.test_cli import authgate as authgate_cli

FULLWIDTH_SAM = "\uff53am@example.com"  # "sam" with a fullwidth s
LONG_S_SAM = "\u017fam@example.com"  # "sam" with a long s
#: NFKC turns each U+FDFA into 18 characters: a 372-character key (issue 10, F11).
OVERFLOWING = "\ufdfa" * 20 + "@example.com"
OTHER_PASSWORD = "another good passphrase"


async def post(client: httpx.AsyncClient, path: str, body: dict[str, str]) -> httpx.Response:
    client.cookies.clear()
    return await client.post(path, json=body)


async def user_id(client: httpx.AsyncClient, email: str, password: str = PASSWORD) -> int:
    tokens = await login(client, email, password)
    me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
    assert me.status_code == 200, me.text
    client.cookies.clear()
    return int(me.json()["id"])


# --- F11 ------------------------------------------------------------------------------------


async def test_an_address_that_nfkc_expands_past_the_column_is_a_clean_4xx(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        response = await post(
            client, "/auth/register", {"email": OVERFLOWING, "password": PASSWORD}
        )
        assert response.status_code == 422, response.text
        assert "compatibility characters" in response.text
        response = await post(client, "/auth/login", {"email": OVERFLOWING, "password": PASSWORD})
        assert response.status_code == 401, response.text
        response = await post(client, "/auth/password-reset", {"email": OVERFLOWING})
        assert response.status_code == 200, response.text
        # The service is whole afterwards: an ordinary account registers and logs in.
        await register(client, "after@example.com")
        await login(client, "after@example.com")
    assert outbox.sent == []


# --- F12 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("look_alike", [FULLWIDTH_SAM, LONG_S_SAM])
async def test_look_alikes_of_an_address_are_refused_at_registration(
    client: httpx.AsyncClient, look_alike: str
) -> None:
    # Before anyone has the address (the squatter's move) and after.
    response = await post(client, "/auth/register", {"email": look_alike, "password": PASSWORD})
    assert response.status_code == 422, response.text
    assert "compatibility characters" in response.text
    await register(client, "sam@example.com")
    response = await post(client, "/auth/register", {"email": look_alike, "password": PASSWORD})
    assert response.status_code == 422, response.text
    # ...and a look-alike does not log into the real account either.
    response = await post(client, "/auth/login", {"email": look_alike, "password": PASSWORD})
    assert response.status_code == 401, response.text


async def test_addresses_differing_in_case_are_one_account(client: httpx.AsyncClient) -> None:
    await register(client, "sam@example.com")
    response = await post(
        client, "/auth/register", {"email": "SAM@example.com", "password": OTHER_PASSWORD}
    )
    assert response.status_code == 409, response.text
    response = await post(
        client, "/auth/register", {"email": "Sam@EXAMPLE.COM", "password": OTHER_PASSWORD}
    )
    assert response.status_code == 409, response.text
    assert await user_id(client, "SAM@example.com") == await user_id(client, "sam@example.com")


async def test_sharp_s_and_ss_domains_are_two_accounts_and_reset_mail_stays_apart(
    make_client: AppFactory, outbox: Outbox
) -> None:
    squatter, owner = "victim@straße.de", "victim@strasse.de"
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client, squatter, OTHER_PASSWORD)  # first, as the squatter would
        await register(client, owner)  # the owner can still register
        assert await user_id(client, owner) != await user_id(client, squatter, OTHER_PASSWORD)
        # Each address logs into its own account only.
        response = await post(client, "/auth/login", {"email": owner, "password": OTHER_PASSWORD})
        assert response.status_code == 401
        response = await post(client, "/auth/login", {"email": squatter, "password": PASSWORD})
        assert response.status_code == 401
        # The IDNA (ASCII) spelling of a domain is the same domain.
        await login(client, "victim@xn--strae-oqa.de", OTHER_PASSWORD)
        await login(client, "VICTIM@STRASSE.DE")

        assert (await post(client, "/auth/password-reset", {"email": owner})).status_code == 200
        (sent,) = await outbox.wait_for(1)
        assert sent[0] == owner
        response = await post(client, "/auth/password-reset", {"email": squatter})
        assert response.status_code == 200
        sent = (await outbox.wait_for(2))[1]
        assert sent[0] == squatter
        # The owner's reset changes the owner's password and nobody else's.
        new_password = "the owner's new passphrase"
        response = await post(
            client,
            "/auth/password-reset/confirm",
            {"token": outbox.sent[0][1], "new_password": new_password},
        )
        assert response.status_code == 200, response.text
        await login(client, owner, new_password)
        await login(client, squatter, OTHER_PASSWORD)


async def test_users_create_refuses_look_alikes_and_keeps_sharp_s_apart(backend: Backend) -> None:
    env = clean_env(backend.env)
    assert (await asyncio.to_thread(authgate_cli, "db", "upgrade", env=env)).returncode == 0
    refused = [create_cmd(FULLWIDTH_SAM), create_cmd(LONG_S_SAM)]
    created = [create_cmd(e) for e in ("sam@example.com", "victim@straße.de", "victim@strasse.de")]
    for cmd, result in await asyncio.to_thread(run_many, refused + created, env):
        if cmd in refused:
            assert "compatibility characters" in assert_user_error(result)
        else:
            assert result.returncode == 0, result.stderr
    result = await asyncio.to_thread(run_cmd, create_cmd("SAM@example.com"), env)
    assert "already exists" in assert_user_error(result)


# --- migration 0003 ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def empty_backend(name: str, data_dir: Path) -> AsyncIterator[Backend]:
    """A backend with an EMPTY database (the `backend` fixture's PostgreSQL databases are
    clones of a template already at head)."""
    if name == "sqlite":
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        yield Backend("sqlite", data_dir)
        return
    require_backend()
    database = f"authgate_t_{secrets.token_hex(6)}"
    prefix = f"authgate-test-{secrets.token_hex(6)}:"
    conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database="postgres")
    try:
        await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()
    url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"
    try:
        yield Backend(
            "postgres",
            data_dir,
            {"database_url": url, "cache_url": REDIS_URL, "cache_prefix": prefix},
        )
    finally:
        await PgTemplate.drop(database)
        await delete_redis_prefix(prefix)


def _upgrade_to(connection: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(authgate.store.migrations.__file__).parent))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


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
                await conn.run_sync(_upgrade_to, "0002")
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

        assert version == "0003"
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
