"""Production mode: PostgreSQL + Redis, several workers, migrations racing, servers going away.

These tests need the real servers; they never run on SQLite alone, and (like every backend
test) they fail in CI when PostgreSQL or Redis cannot be reached.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from authgate import create_app
from authgate.store.db import Database
from tests.helpers import (
    PASSWORD,
    PG_HOST,
    PG_PORT,
    REDIS_URL,
    TEST_SECRET,
    Backend,
    Forwarder,
    PgTemplate,
    bearer,
    clean_env,
    login,
    make_config,
    pg_url,
    register,
    require_backend,
    running,
    serving,
)


@pytest.fixture
async def empty_pg_database() -> AsyncIterator[str]:
    """A fresh PostgreSQL database with no schema at all."""
    require_backend()
    import asyncpg

    name = f"authgate_e_{secrets.token_hex(6)}"
    conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user="postgres", database="postgres")
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield pg_url(name)
    finally:
        await PgTemplate.drop(name)


@pytest.mark.subprocess
async def test_two_workers_concurrent_refresh_exactly_one_wins(pg_backend: Backend) -> None:
    env = clean_env({**pg_backend.env, "AUTHGATE_RATE_LIMITS": "off"})
    with serving(env, pg_backend.data_dir.parent / "logs", "--workers", "2") as server:
        base = server.url
        async with httpx.AsyncClient(base_url=base, timeout=20) as c:
            assert (
                await c.post(
                    "/auth/register", json={"email": "ann@example.com", "password": PASSWORD}
                )
            ).status_code == 201
            tokens = (
                await c.post("/auth/login", json={"email": "ann@example.com", "password": PASSWORD})
            ).json()

        async def one_refresh() -> httpx.Response:
            # A connection of its own, so the requests spread over both workers.
            async with httpx.AsyncClient(base_url=base, timeout=20) as c:
                return await c.post(
                    "/auth/refresh", json={"refresh_token": tokens["refresh_token"]}
                )

        async with asyncio.timeout(60):
            responses = await asyncio.gather(*(one_refresh() for _ in range(12)))
        codes = sorted(r.status_code for r in responses)
        assert codes == [200] + [401] * 11, codes
        winner = next(r for r in responses if r.status_code == 200).json()
        async with httpx.AsyncClient(base_url=base, timeout=20) as c:
            # The losers were reuse: the family is revoked, the winner's tokens too.
            again = await c.post("/auth/refresh", json={"refresh_token": winner["refresh_token"]})
            assert again.status_code == 401
            me = await c.get("/auth/me", headers=bearer(winner["access_token"]))
            assert me.status_code == 401


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_concurrent_migrations_are_safe(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Four processes run `authgate db upgrade` on one empty database at once: all succeed."""
    env = clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data")})
    if kind == "postgres":
        env["DATABASE_URL"] = request.getfixturevalue("empty_pg_database")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "authgate", "db", "upgrade"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err.decode()

    async def tables() -> set[str]:
        from authgate import AuthConfig

        cfg = AuthConfig(
            data_dir=tmp_path / "data",
            secret_key=TEST_SECRET,
            database_url=env.get("DATABASE_URL"),
        )
        db = Database(cfg)
        try:
            async with db.read() as s:
                if kind == "postgres":
                    rows = await s.execute(
                        text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                    )
                else:
                    rows = await s.execute(
                        text("SELECT name FROM sqlite_master WHERE type='table'")
                    )
                return {r[0] for r in rows}
        finally:
            await db.dispose()

    assert {
        "authgate_users",
        "authgate_sessions",
        "authgate_refresh_tokens",
        "authgate_one_time_tokens",
        "authgate_alembic_version",
    } <= asyncio.run(tables())


async def _wait_status(
    client: httpx.AsyncClient, path: str, status: int, **kw: Any
) -> httpx.Response:
    response = None
    for _ in range(100):  # bounded: at most ~100 attempts
        response = await client.get(path, **kw)
        if response.status_code == status:
            return response
        await asyncio.sleep(0.1)
    raise AssertionError(
        f"{path} never answered {status}; last {response and response.status_code}"
    )


async def test_database_outage_answers_503_and_recovers(pg_backend: Backend) -> None:
    url = pg_backend.settings["database_url"]
    forwarder = Forwarder(PG_HOST, PG_PORT)
    await forwarder.open()
    proxied = url.replace(f"{PG_HOST}:{PG_PORT}", f"127.0.0.1:{forwarder.port}")
    app = create_app(make_config(pg_backend, database_url=proxied, db_timeout=3.0))
    try:
        async with running(app) as client:
            await register(client)
            tokens = await login(client)
            client.cookies.clear()
            assert (
                await client.get("/auth/me", headers=bearer(tokens["access_token"]))
            ).status_code == 200

            # A second session, never seen by GET /me, so not in the Redis state cache.
            other = await login(client)
            client.cookies.clear()

            await forwarder.shut()
            async with asyncio.timeout(30):
                # The session already in the cache keeps answering: Redis knows it is live.
                cached = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
                assert cached.status_code == 200
                requests: tuple[Callable[[], Awaitable[httpx.Response]], ...] = (
                    lambda: client.get("/auth/me", headers=bearer(other["access_token"])),
                    lambda: client.post(
                        "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
                    ),
                    lambda: client.post(
                        "/auth/register", json={"email": "bob@example.com", "password": PASSWORD}
                    ),
                    lambda: client.post(
                        "/auth/refresh", json={"refresh_token": other["refresh_token"]}
                    ),
                )
                for request in requests:
                    response = await request()
                    assert response.status_code == 503
                    assert response.json() == {
                        "detail": "The service is temporarily unavailable; try again shortly.",
                        "code": "service_unavailable",
                    }
                    assert response.headers["retry-after"] == "1"
                ready = await client.get("/readiness")
                assert ready.status_code == 503
                assert ready.json()["checks"]["database"]["status"] == "error"

            await forwarder.open()
            async with asyncio.timeout(30):
                me = await _wait_status(
                    client, "/auth/me", 200, headers=bearer(other["access_token"])
                )
                assert me.json()["email"] == "ann@example.com"
                assert (await client.get("/readiness")).status_code == 200
                await login(client)
    finally:
        await forwarder.shut()


async def test_cache_outage_answers_503_and_recovers(pg_backend: Backend) -> None:
    host_port = REDIS_URL.split("://", 1)[1].split("/", 1)[0]
    host, _, port = host_port.rpartition(":")
    forwarder = Forwarder(host, int(port))
    await forwarder.open()
    proxied = REDIS_URL.replace(host_port, f"127.0.0.1:{forwarder.port}")
    app = create_app(make_config(pg_backend, cache_url=proxied, rate_limits=True))
    try:
        async with running(app) as client:
            await register(client)
            await login(client)

            await forwarder.shut()
            async with asyncio.timeout(30):
                response = await client.post(
                    "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
                )
                assert response.status_code == 503
                assert response.json()["code"] == "service_unavailable"
                ready = await client.get("/readiness")
                assert ready.status_code == 503
                assert ready.json()["checks"]["cache"]["status"] == "error"
                assert ready.json()["checks"]["database"]["status"] == "ok"

            await forwarder.open()
            async with asyncio.timeout(30):
                await _wait_status(client, "/readiness", 200)
                await login(client)
    finally:
        await forwarder.shut()


class BlackHole:
    """A loopback listener that accepts connections and never answers: a hung server."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0

    async def __aenter__(self) -> BlackHole:
        async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.append(writer)

        self._server = await asyncio.start_server(hold, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._writers:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def test_hung_servers_fail_readiness_and_requests_within_the_timeouts(
    pg_backend: Backend,
) -> None:
    async with BlackHole() as hole:
        url = pg_backend.settings["database_url"]
        hung_db = url.replace(f"{PG_HOST}:{PG_PORT}", f"127.0.0.1:{hole.port}")
        hung_cache = f"redis://127.0.0.1:{hole.port}/0"
        app = create_app(
            make_config(
                pg_backend,
                database_url=hung_db,
                cache_url=hung_cache,
                auto_migrate=False,
                db_timeout=1.0,
            )
        )
        async with running(app) as client, asyncio.timeout(30):
            ready = await client.get("/readiness")
            assert ready.status_code == 503
            checks = ready.json()["checks"]
            assert checks["database"]["status"] == "error"
            assert checks["cache"]["status"] == "error"
            # Each check gave up on its timeout rather than waiting on.
            for name in ("database", "cache"):
                assert checks[name]["error"] in ("timed out after 2 s", "TimeoutError"), checks
            response = await client.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
            assert response.status_code == 503
            assert response.json()["code"] == "service_unavailable"
