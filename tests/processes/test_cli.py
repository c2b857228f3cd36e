"""The `authgate` command line (contract.md §2, §3), run as real subprocesses on both backends.

Exit codes: 0 success, 1 a failure the user can act on (one line on stderr, no traceback),
2 usage. Every command reads the same configuration (the environment) as `serve`.

Each command is a fresh Python process (about a second of imports), so independent commands
of one test run side by side and state is set up or inspected in-process where the command
itself is not what is tested.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from authgate import create_app
from authgate.store.db import Database
from authgate.store.migrations import VERSION_TABLE
from authgate.store.models import Base, OneTimeToken, RefreshToken, Session, User
from tests.helpers import (
    FULLWIDTH_SAM,
    LONG_S_SAM,
    PASSWORD,
    Backend,
    Outbox,
    authgate,
    bearer,
    clean_env,
    login,
    make_config,
    register,
    running,
)

pytestmark = pytest.mark.subprocess


@dataclass(frozen=True)
class Cmd:
    args: tuple[str, ...]
    stdin: str = ""


def run_cmd(cmd: Cmd, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return authgate(*cmd.args, env=env, stdin=cmd.stdin)


def run_many(
    commands: list[Cmd], env: dict[str, str]
) -> list[tuple[Cmd, subprocess.CompletedProcess[str]]]:
    """Run independent commands side by side; results in the order given."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(run_cmd, c, env) for c in commands]
        return [(c, f.result()) for c, f in zip(commands, futures, strict=True)]


def assert_user_error(result: subprocess.CompletedProcess[str]) -> str:
    """Exit 1, a one-line message on stderr, no traceback; returns that line."""
    output = result.stdout + result.stderr
    assert result.returncode == 1, (result.args, output)
    assert "Traceback" not in output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, (result.args, result.stderr)
    return lines[0]


def create_cmd(email: str, *flags: str, password: str = PASSWORD) -> Cmd:
    return Cmd(("users", "create", email, "--password-stdin", *flags), password + "\n")


def list_users(env: dict[str, str]) -> dict[str, dict[str, str]]:
    """`authgate users list` parsed: lower-cased email -> the row's cells by column."""
    return parse_list(authgate("users", "list", env=env))


def parse_list(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    columns = ["id", "email", "active", "superuser", "verified"]
    assert header.split()[:5] == [c.upper() for c in columns], header
    return {
        row.split()[1].lower(): dict(zip(columns, row.split()[:5], strict=True)) for row in rows
    }


async def _count(backend: Backend) -> dict[str, int]:
    db = Database(make_config(backend))
    try:
        async with db.read() as s:
            return {
                model.__tablename__: int(
                    await s.scalar(select(func.count()).select_from(model)) or 0
                )
                for model in (User, Session, RefreshToken, OneTimeToken)
            }
    finally:
        await db.dispose()


# --- users create / list -----------------------------------------------------------------


async def test_users_create_sets_flags_and_list_shows_them(backend: Backend) -> None:
    env = clean_env(backend.env)
    result = await asyncio.to_thread(
        run_cmd, create_cmd("Ann@example.com", "--superuser", "--verified"), env
    )
    assert result.returncode == 0, result.stderr
    assert "Ann@example.com" in result.stdout
    result = await asyncio.to_thread(run_cmd, create_cmd("bob@example.com"), env)
    assert result.returncode == 0, result.stderr

    users = await asyncio.to_thread(list_users, env)
    assert set(users) == {"ann@example.com", "bob@example.com"}
    ann, bob = users["ann@example.com"], users["bob@example.com"]
    assert ann["email"] == "Ann@example.com"
    assert (ann["active"], ann["superuser"], ann["verified"]) == ("yes", "yes", "yes")
    assert (bob["active"], bob["superuser"], bob["verified"]) == ("yes", "no", "no")

    # The password read from stdin is the one that logs in; the flags reach the API.
    async with running(create_app(make_config(backend))) as client:
        for email, flags in (("ANN@example.com", True), ("bob@example.com", False)):
            tokens = await login(client, email)
            me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
            assert me.status_code == 200
            assert me.json()["is_superuser"] is flags
            assert me.json()["email_verified"] is flags
            assert me.json()["is_active"] is True
        # The line ending that ends the password on stdin is not part of it.
        response = await client.post(
            "/auth/login", json={"email": "bob@example.com", "password": PASSWORD + "\n"}
        )
        assert response.status_code == 401


async def test_users_create_same_email_any_case_fails(backend: Backend) -> None:
    env = clean_env(backend.env)
    result = await asyncio.to_thread(run_cmd, create_cmd("ann@example.com"), env)
    assert result.returncode == 0, result.stderr

    result = await asyncio.to_thread(run_cmd, create_cmd("ANN@Example.COM", "--superuser"), env)
    assert "already exists" in assert_user_error(result)
    assert (await _count(backend))["authgate_users"] == 1


def test_users_create_bad_input_fails(tmp_path: Path) -> None:
    env = clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data")})
    cases = {
        create_cmd("not-an-email"): "email",
        create_cmd("ann@example.com", password="short"): "8",
        create_cmd("ann@example.com", password="password1"): "commonly used",
        # No terminal and no --password-stdin: refused rather than prompting with echo.
        Cmd(("users", "create", "ann@example.com"), PASSWORD + "\n"): "--password-stdin",
    }
    for cmd, result in run_many(list(cases), env):
        assert cases[cmd] in assert_user_error(result), cmd


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    env = clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data")})
    commands = [
        Cmd(("users", "create", "ann@example.com", "--bogus")),
        Cmd(("users", "create")),
    ]
    for cmd, result in run_many(commands, env):
        assert result.returncode == 2, (cmd, result.stdout + result.stderr)
        assert "Usage:" in result.stderr, cmd
        assert "Traceback" not in result.stderr, cmd


# --- users activate / deactivate ---------------------------------------------------------


async def test_deactivate_and_activate(backend: Backend) -> None:
    """`users deactivate` flips is_active and revokes every session; `activate` flips it back
    (and brings no session back); an unknown email is exit 1."""
    env = clean_env(backend.env)
    async with running(create_app(make_config(backend))) as client:
        await register(client, "ann@example.com")
        await register(client, "bob@example.com")
        sessions = [await login(client, "ann@example.com") for _ in range(2)]
        bob = await login(client, "bob@example.com")
        for tokens in [*sessions, bob]:
            me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
            assert me.status_code == 200

        result = await asyncio.to_thread(
            authgate, "users", "deactivate", "ANN@example.com", env=env
        )
        assert result.returncode == 0, result.stderr
        await assert_listed_active(env, ann="no", bob="yes", unknown="deactivate")

        async def assert_sessions_dead() -> None:
            for tokens in sessions:
                me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
                assert me.status_code == 401
                refreshed = await client.post(
                    "/auth/refresh", json={"refresh_token": tokens["refresh_token"]}
                )
                assert refreshed.status_code == 401

        await assert_sessions_dead()
        response = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert response.status_code == 401
        # Other users keep their sessions.
        me = await client.get("/auth/me", headers=bearer(bob["access_token"]))
        assert me.status_code == 200

        # Re-activation lets Ann log in again but brings no revoked session back: the
        # sessions were revoked, not merely hidden behind is_active.
        result = await asyncio.to_thread(authgate, "users", "activate", "ann@example.com", env=env)
        assert result.returncode == 0, result.stderr
        users = await asyncio.to_thread(list_users, env)
        assert users["ann@example.com"]["active"] == "yes"
        await assert_sessions_dead()
        fresh = await login(client, "ann@example.com")
        me = await client.get("/auth/me", headers=bearer(fresh["access_token"]))
        assert me.status_code == 200


async def assert_listed_active(env: dict[str, str], *, unknown: str, **expected: str) -> None:
    """`users list` shows each user's ACTIVE cell as expected; meanwhile `users <unknown>` of
    an email nobody has fails with exit 1."""
    cmds = [Cmd(("users", "list")), Cmd(("users", unknown, "nobody@example.com"))]
    (_, listed), (_, failed) = await asyncio.to_thread(run_many, cmds, env)
    users = parse_list(listed)
    for name, active in expected.items():
        assert users[f"{name}@example.com"]["active"] == active, (name, users)
    assert "nobody@example.com" in assert_user_error(failed)


# --- db upgrade --------------------------------------------------------------------------


async def test_db_upgrade_migrates_and_is_idempotent(backend: Backend) -> None:
    if backend.name == "postgres":
        # The test database is a clone of a migrated template: empty it first.
        db = Database(make_config(backend))
        try:
            async with db.engine.begin() as conn:
                await conn.run_sync(Base.metadata.drop_all)
                await conn.execute(text(f'DROP TABLE IF EXISTS "{VERSION_TABLE}"'))
        finally:
            await db.dispose()
    else:
        assert not (backend.data_dir / "authgate.sqlite3").exists()

    env = clean_env(backend.env)
    for _ in range(2):
        result = await asyncio.to_thread(authgate, "db", "upgrade", env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    assert await _count(backend) == dict.fromkeys(
        (
            "authgate_users",
            "authgate_sessions",
            "authgate_refresh_tokens",
            "authgate_one_time_tokens",
        ),
        0,
    )


async def test_a_database_at_head_is_checked_without_alembic(backend: Backend) -> None:
    # Every worker start and CLI command checks the schema: at head, one SELECT, and Alembic
    # (its imports, its memory) stays out of the process.
    await asyncio.to_thread(authgate, "db", "upgrade", env=clean_env(backend.env))
    probe = (
        "import asyncio, sys\n"
        "from authgate.config import AuthConfig\n"
        "from authgate.store.db import Database, upgrade_schema\n"
        "async def main():\n"
        "    db = Database(AuthConfig())\n"
        "    try:\n"
        "        print(await upgrade_schema(db), 'alembic' in sys.modules)\n"
        "    finally:\n"
        "        await db.dispose()\n"
        "asyncio.run(main())\n"
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", probe],
        env=clean_env(backend.env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


# --- purge -------------------------------------------------------------------------------


async def test_purge_deletes_spent_tokens_and_keeps_live_ones(
    backend: Backend, outbox: Outbox
) -> None:
    config = make_config(backend, password_reset_send_fn=outbox)
    async with running(create_app(config)) as client:
        await register(client, "ann@example.com")
        await register(client, "bob@example.com")
        live = await login(client, "ann@example.com")
        ended = await login(client, "ann@example.com")
        response = await client.post("/auth/logout", json={"refresh_token": ended["refresh_token"]})
        assert response.status_code == 200
        # A spent password-reset token (Bob has no session, so nothing else changes).
        response = await client.post("/auth/password-reset", json={"email": "bob@example.com"})
        assert response.status_code == 200
        (_, reset_token), *_ = await outbox.wait_for(1)
        response = await client.post(
            "/auth/password-reset/confirm",
            json={"token": reset_token, "new_password": "another good password"},
        )
        assert response.status_code == 200

    before = await _count(backend)
    assert before["authgate_sessions"] == 2
    assert before["authgate_refresh_tokens"] == 2
    assert before["authgate_one_time_tokens"] == 1

    result = await asyncio.to_thread(authgate, "purge", env=clean_env(backend.env))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr

    after = await _count(backend)
    assert after["authgate_sessions"] == 1
    assert after["authgate_refresh_tokens"] == 1
    assert after["authgate_one_time_tokens"] == 0
    assert after["authgate_users"] == 2

    # The live session survived the purge; the logged-out one stays dead.
    async with running(create_app(config)) as client:
        me = await client.get("/auth/me", headers=bearer(live["access_token"]))
        assert me.status_code == 200
        response = await client.post("/auth/refresh", json={"refresh_token": live["refresh_token"]})
        assert response.status_code == 200
        response = await client.post(
            "/auth/refresh", json={"refresh_token": ended["refresh_token"]}
        )
        assert response.status_code == 401


# --- configuration errors ----------------------------------------------------------------


def test_invalid_configuration_exits_1(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    cases = [
        ({"AUTHGATE_SECRET_KEY": "short-Zq9x"}, ("serve", "--port", "1"), "AUTHGATE_SECRET_KEY"),
        ({"AUTHGATE_ACCESS_TTL": "abc"}, ("users", "list"), "access_ttl"),
        ({"DATABASE_URL": "mysql://x"}, ("purge",), "DATABASE_URL"),
    ]

    def one(variables: dict[str, str], args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return authgate(*args, env=clean_env({"AUTHGATE_DATA_DIR": data_dir, **variables}))

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(one, variables, args) for variables, args, _ in cases]
        results = [f.result() for f in futures]
    for (variables, args, fragment), result in zip(cases, results, strict=True):
        line = assert_user_error(result)
        assert fragment.lower() in line.lower(), (variables, args, line)
        assert result.stdout == "", (variables, args)
        assert "short-Zq9x" not in result.stderr  # the rejected key is never echoed


def test_unreachable_database_exits_1_without_leaking_the_password(tmp_path: Path) -> None:
    env = clean_env(
        {
            "AUTHGATE_DATA_DIR": str(tmp_path / "data"),
            "DATABASE_URL": "postgresql://u:hunter2secret@127.0.0.1:1/x",
        }
    )
    commands = [
        Cmd(("users", "list")),
        Cmd(("serve", "--port", "1")),
    ]
    results = run_many(commands, env)
    plain = clean_env(
        {
            "AUTHGATE_DATA_DIR": str(tmp_path / "data"),
            "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x",
        }
    )
    results.append((Cmd(("db", "upgrade")), authgate("db", "upgrade", env=plain)))
    for cmd, result in results:
        line = assert_user_error(result)
        assert "database" in line.lower(), (cmd, line)
        assert "hunter2secret" not in result.stdout + result.stderr, cmd


# --- the email key (issue 10, F12) -------------------------------------------------------


async def test_users_create_refuses_look_alikes_and_keeps_sharp_s_apart(backend: Backend) -> None:
    env = clean_env(backend.env)
    assert (await asyncio.to_thread(authgate, "db", "upgrade", env=env)).returncode == 0
    refused = [create_cmd(FULLWIDTH_SAM), create_cmd(LONG_S_SAM)]
    created = [create_cmd(e) for e in ("sam@example.com", "victim@straße.de", "victim@strasse.de")]
    for cmd, result in await asyncio.to_thread(run_many, refused + created, env):
        if cmd in refused:
            assert "compatibility characters" in assert_user_error(result)
        else:
            assert result.returncode == 0, result.stderr
    result = await asyncio.to_thread(run_cmd, create_cmd("SAM@example.com"), env)
    assert "already exists" in assert_user_error(result)


# A broken AUTHGATE_TEMPLATES_DIR stops every command (serve included) with one line and exit 1,
# before any worker starts: not a traceback in each worker.


@pytest.mark.parametrize("problem", ["missing", "syntax", "page syntax"])
def test_a_broken_templates_dir_is_one_line_and_exit_1(tmp_path: Path, problem: str) -> None:
    templates = tmp_path / "templates"
    if problem == "syntax":
        templates.mkdir()
        (templates / "reset.txt").write_text("{% if %}\n")
    if problem == "page syntax":
        (templates / "pages").mkdir(parents=True)
        (templates / "pages" / "login.html").write_text("{% block %}\n")
    env = clean_env(
        {"AUTHGATE_DATA_DIR": str(tmp_path / "data"), "AUTHGATE_TEMPLATES_DIR": str(templates)}
    )
    result = authgate("serve", "--port", "0", env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "template" in result.stderr.lower()
