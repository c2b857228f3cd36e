"""Test harness: every behavioural test runs on both backends.

- `sqlite`: the embedded default (SQLite file in a fresh data dir, in-process cache);
- `postgres`: PostgreSQL + Redis on loopback. Each test gets a fresh database, cloned from a
  template migrated once per run, and its own Redis key prefix (deleted afterwards).

When PostgreSQL or Redis cannot be reached, the `postgres` half skips with a message on a
developer's machine and fails in CI (`CI=true`), where skipping would hide a broken backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from aiosmtpd.controller import Controller
from fastapi import FastAPI

from authgate import AuthConfig, create_app

PG_HOST = os.environ.get("AUTHGATE_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("AUTHGATE_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("AUTHGATE_TEST_PG_USER", "postgres")
REDIS_URL = os.environ.get("AUTHGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TEST_SECRET = "test-secret-key-that-is-long-enough-0123456789"
BACKENDS = ("sqlite", "postgres")


def pg_url(database: str) -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


# --- backend availability --------------------------------------------------------------


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


_availability: dict[str, str | None] = {}


def backend_problem() -> str | None:
    """Why PostgreSQL + Redis cannot be used, or None."""
    if "postgres" not in _availability:
        problems = []
        if not _port_open(PG_HOST, PG_PORT):
            problems.append(f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT}")
        redis_host = REDIS_URL.split("://", 1)[1].split("/", 1)[0]
        host, _, port = redis_host.rpartition(":")
        if not _port_open(host or "127.0.0.1", int(port or 6379)):
            problems.append(f"Redis is not reachable at {REDIS_URL}")
        _availability["postgres"] = "; ".join(problems) or None
    return _availability["postgres"]


def require_backend() -> None:
    problem = backend_problem()
    if problem is None:
        return
    if IN_CI:
        pytest.fail(f"postgres+redis backend required in CI: {problem}", pytrace=False)
    pytest.skip(f"postgres+redis backend unavailable ({problem}); start them to run this half")


def clean_env(extra: dict[str, str], *, secret: str | None = TEST_SECRET) -> dict[str, str]:
    """This process's environment without any authgate setting, plus the secret and `extra`:
    what a subprocess test gives `authgate`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AUTHGATE_") and k not in ("DATABASE_URL", "CACHE_URL")
    }
    if secret is not None:
        env["AUTHGATE_SECRET_KEY"] = secret
    env.update(extra)
    return env


# --- PostgreSQL databases ----------------------------------------------------------------


class PgTemplate:
    """A database migrated once per run; each test clones it (CREATE DATABASE … TEMPLATE)."""

    def __init__(self) -> None:
        self.name = f"authgate_tmpl_{os.getpid()}_{secrets.token_hex(3)}"
        self.ready = False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        with self._lock:
            if self.ready:
                return
            asyncio.run(self._create())
            self.ready = True

    async def _create(self) -> None:
        from authgate.store.db import Database, upgrade_schema

        conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database="postgres")
        try:
            await conn.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            await conn.close()
        db = Database(AuthConfig(database_url=pg_url(self.name), secret_key=TEST_SECRET))
        try:
            await upgrade_schema(db)
        finally:
            await db.dispose()

    async def clone(self) -> str:
        name = f"authgate_t_{secrets.token_hex(6)}"
        conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database="postgres")
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')
        finally:
            await conn.close()
        return name

    @staticmethod
    async def drop(name: str) -> None:
        conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database="postgres")
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    def drop_template(self) -> None:
        if self.ready:
            asyncio.run(self.drop(self.name))


@pytest.fixture(scope="session")
def pg_template() -> Iterator[PgTemplate]:
    template = PgTemplate()
    yield template
    template.drop_template()


async def delete_redis_prefix(prefix: str) -> None:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


# --- the backend fixture -----------------------------------------------------------------


@dataclass
class Backend:
    """Storage settings for one test: pass `settings` into AuthConfig."""

    name: str
    data_dir: Path
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """The same settings as environment variables, for subprocess tests."""
        env = {"AUTHGATE_DATA_DIR": str(self.data_dir)}
        if "database_url" in self.settings:
            env["DATABASE_URL"] = self.settings["database_url"]
        if "cache_url" in self.settings:
            env["CACHE_URL"] = self.settings["cache_url"]
            env["AUTHGATE_CACHE_PREFIX"] = self.settings["cache_prefix"]
        return env


@contextlib.asynccontextmanager
async def postgres_backend(data_dir: Path, template: PgTemplate) -> AsyncIterator[Backend]:
    """A fresh database cloned from the migrated template, and a Redis key prefix of its own;
    both removed afterwards."""
    require_backend()
    await asyncio.to_thread(template.ensure)
    name = await template.clone()
    prefix = f"authgate-test-{secrets.token_hex(6)}:"
    try:
        yield Backend(
            "postgres",
            data_dir,
            {"database_url": pg_url(name), "cache_url": REDIS_URL, "cache_prefix": prefix},
        )
    finally:
        await PgTemplate.drop(name)
        await delete_redis_prefix(prefix)


@pytest.fixture(params=BACKENDS)
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, pg_template: PgTemplate
) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", tmp_path / "data")
        return
    async with postgres_backend(tmp_path / "data", pg_template) as pg:
        yield pg


@pytest.fixture
async def pg_backend(tmp_path: Path, pg_template: PgTemplate) -> AsyncIterator[Backend]:
    """PostgreSQL + Redis only (no SQLite variant)."""
    async with postgres_backend(tmp_path / "data", pg_template) as pg:
        yield pg


# --- the clock ---------------------------------------------------------------------------


class FakeClock:
    """Time as a dependency: tests of expiry move it instead of sleeping."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- the application ---------------------------------------------------------------------


def make_config(backend: Backend, **overrides: Any) -> AuthConfig:
    values: dict[str, Any] = {
        "data_dir": backend.data_dir,
        "secret_key": TEST_SECRET,
        "rate_limits": False,
        # The suite fires bursts (50 registrations at once) on a loaded 2-core machine; the
        # admission queue in front of argon2 has its own test (test_overload.py).
        "hash_max_wait": 60.0,
        **backend.settings,
    }
    values.update(overrides)
    return AuthConfig(**values)


@contextlib.asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan and give an HTTPS client (so Secure cookies round-trip)."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as client:
            yield client


AppFactory = Callable[..., contextlib.AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def make_client(backend: Backend, clock: FakeClock) -> AppFactory:
    """`async with make_client(**config_overrides) as client:` — an app on this backend."""

    def factory(**overrides: Any) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
        return running(create_app(make_config(backend, **overrides), clock=clock))

    return factory


@pytest.fixture
async def client(make_client: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as c:
        yield c


# --- helpers the flows share --------------------------------------------------------------

PASSWORD = "correct horse battery"


async def register(
    client: httpx.AsyncClient, email: str = "ann@example.com", password: str = PASSWORD
) -> dict[str, Any]:
    response = await client.post("/auth/register", json={"email": email, "password": password})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def login(
    client: httpx.AsyncClient, email: str = "ann@example.com", password: str = PASSWORD
) -> dict[str, Any]:
    response = await client.post("/auth/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- a real SMTP sink ---------------------------------------------------------------------


T = TypeVar("T")


async def wait_until_len(items: list[T], count: int, timeout: float, what: str) -> list[T]:
    """Poll every 10 ms, at most `timeout` seconds, until `items` holds `count` entries
    (mail goes out in the background, after the answer)."""
    for _ in range(int(timeout / 0.01)):
        if len(items) >= count:
            return items
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} {what}, got {len(items)}")


class _EphemeralPortController(Controller):
    """aiosmtpd's Controller, able to listen on port 0.

    Its start-up probe connects to `self.port`, which stays 0 when the OS picks the port, and
    so fails with "connection refused". Read the bound port back before probing.
    """

    def _trigger_server(self) -> None:
        if self.port == 0 and self.server is not None:
            self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


class SmtpSink:
    """aiosmtpd on a loopback port, keeping every message it receives."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self._controller = _EphemeralPortController(self, hostname="127.0.0.1", port=0)

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        msg = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        self.messages.append(msg)
        return "250 OK"

    def start(self) -> None:
        self._controller.start()

    def stop(self) -> None:
        self._controller.stop()

    @property
    def url(self) -> str:
        server = self._controller.server
        assert server is not None
        port = server.sockets[0].getsockname()[1]
        return f"smtp://127.0.0.1:{port}"

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[EmailMessage]:
        """Poll (bounded) until `count` messages arrived."""
        return await wait_until_len(self.messages, count, timeout, "messages")


@pytest.fixture
def smtp_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()


class Outbox:
    """A sender function for `AuthConfig`: records (email, token) pairs."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def __call__(self, email: str, token: str) -> None:
        self.sent.append((email, token))

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, str]]:
        """Poll (bounded) until `count` sends happened."""
        return await wait_until_len(self.sent, count, timeout, "sends")


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()
