"""What the tests share: the one helper module. Plain constants, functions and classes, imported
by the test modules; the fixtures built on them are in conftest.py (and the store tests' `db`
in store/conftest.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import jwt
import pytest
import redis.asyncio as aioredis
from aiosmtpd.controller import Controller
from alembic import command
from alembic.config import Config
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from email_validator import validate_email
from fastapi import FastAPI
from hypothesis import settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Connection, func, select

from authgate import AuthConfig, create_app
from authgate.app import AuthGate
from authgate.cache.local import LocalState
from authgate.cache.state import StateCache
from authgate.factors.password_rules import MAX_PASSWORD_BYTES, MIN_PASSWORD_CHARS, common_passwords
from authgate.principal import Principal
from authgate.store import migrations
from authgate.store.db import Database
from authgate.store.models import User
from authgate.store.sessions import open_session
from authgate.store.users import Credentials, add_user, credentials
from authgate.tokens.keys import Keys

# --- PostgreSQL and Redis on loopback: the backends ---------------------------------------

PG_HOST = os.environ.get("AUTHGATE_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("AUTHGATE_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("AUTHGATE_TEST_PG_USER", "postgres")
REDIS_URL = os.environ.get("AUTHGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TEST_SECRET = "test-secret-key-that-is-long-enough-0123456789"
BACKENDS = ("sqlite", "postgres")
_redis_host, _, _redis_port = REDIS_URL.split("://", 1)[1].split("/", 1)[0].rpartition(":")
#: Where REDIS_URL points (for forwarders in front of it).
REDIS_HOST, REDIS_PORT = _redis_host or "127.0.0.1", int(_redis_port or 6379)


def pg_url(database: str) -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


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
        if not _port_open(REDIS_HOST, REDIS_PORT):
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


async def delete_redis_prefix(prefix: str) -> None:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


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


def upgrade_to(connection: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


# --- clocks -------------------------------------------------------------------------------


class FakeClock:
    """Time as a dependency: tests of expiry move it instead of sleeping."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class MonotonicClock:
    """A `time.monotonic` stand-in that moves only when told (`clock.t += seconds`)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# --- the application ----------------------------------------------------------------------


def make_config(backend: Backend, **overrides: Any) -> AuthConfig:
    values: dict[str, Any] = {
        "data_dir": backend.data_dir,
        "secret_key": TEST_SECRET,
        "rate_limits": False,
        # The suite fires bursts (50 registrations at once) on a loaded 2-core machine; the
        # admission queue in front of argon2 has its own tests (processes/test_overload.py).
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


def make_app(backend: Backend, clock: FakeClock, outbox: list[str], **overrides: Any) -> FastAPI:
    """An app on `backend` whose password-reset tokens are appended to `outbox`."""

    async def send(_email: str, token: str) -> None:
        outbox.append(token)

    return create_app(make_config(backend, password_reset_send_fn=send, **overrides), clock=clock)


def gate_and_app(
    backend: Backend, clock: FakeClock, **overrides: object
) -> tuple[AuthGate, FastAPI]:
    """An app on `backend`, and its AuthGate (for its services, cache and accounts)."""
    app = create_app(make_config(backend, **overrides), clock=clock)
    return app.state.authgate, app


# --- requests through HTTP ----------------------------------------------------------------


PASSWORD = "correct horse battery"
ANN = "ann@example.com"
NEW_PASSWORD = "a brand new passphrase"
FULLWIDTH_SAM = "\uff53am@example.com"  # "sam" with a fullwidth s
LONG_S_SAM = "\u017fam@example.com"  # "sam" with a long s
OTHER_PASSWORD = "another good passphrase"


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


async def post_json(client: httpx.AsyncClient, path: str, body: dict[str, str]) -> httpx.Response:
    """POST `body` with no cookie from an earlier answer."""
    client.cookies.clear()
    # ASCII JSON, so lone surrogates travel as \u escapes as any JSON client would send them.
    return await client.post(
        path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )


async def user_id(client: httpx.AsyncClient, email: str, password: str = PASSWORD) -> int:
    """The id of the account that `email` and `password` log into."""
    tokens = await login(client, email, password)
    me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
    assert me.status_code == 200, me.text
    client.cookies.clear()
    return int(me.json()["id"])


async def login_status(client: httpx.AsyncClient, password: str, email: str = ANN) -> int:
    """The status of a login; the jar keeps no cookie of it."""
    response = await client.post("/auth/login", json={"email": email, "password": password})
    client.cookies.clear()
    return response.status_code


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """An error answer: the status, `{"detail": str, "code": str}`, and for 401 the challenge."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail", "code"}, body
    assert isinstance(body["detail"], str)
    assert isinstance(body["code"], str)
    if code is not None:
        assert body["code"] == code, body
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


COOKIE_NAMES = {"svc_access_token", "svc_refresh_token", "svc_csrf_token"}


def set_cookies(response: httpx.Response) -> dict[str, str]:
    """The response's Set-Cookie headers keyed by cookie name (whole header value)."""
    return {c.split("=", 1)[0]: c for c in response.headers.get_list("set-cookie")}


def cookie_value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


def assert_token_response(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"access_token", "refresh_token", "token_type"}
    assert body["token_type"] == "bearer"
    assert isinstance(body["access_token"], str)
    assert body["access_token"]
    assert isinstance(body["refresh_token"], str)
    assert body["refresh_token"]
    cookies = set_cookies(response)
    assert set(cookies) == COOKIE_NAMES
    assert cookie_value(cookies["svc_access_token"]) == body["access_token"]
    assert cookie_value(cookies["svc_refresh_token"]) == body["refresh_token"]
    assert cookie_value(cookies["svc_csrf_token"])
    return body


async def refresh(client: httpx.AsyncClient, token: str) -> httpx.Response:
    """Refresh with the token in the JSON body (no CSRF header needed)."""
    return await client.post("/auth/refresh", json={"refresh_token": token})


async def post_with_cookies(
    client: httpx.AsyncClient,
    path: str,
    cookies: dict[str, str],
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST with exactly these cookies (the jar is emptied first, and afterwards)."""
    client.cookies.clear()
    cookie_header = "; ".join(f"{k}={v}" for k, v in cookies.items())
    all_headers = {**(headers or {}), **({"Cookie": cookie_header} if cookies else {})}
    try:
        return await client.post(path, headers=all_headers)
    finally:
        client.cookies.clear()


async def fresh_session(
    client: httpx.AsyncClient, email: str = "ann@example.com"
) -> tuple[dict[str, Any], str]:
    """Log in; (token body, csrf cookie value). The jar is left empty."""
    client.cookies.clear()
    response = await client.post(
        "/auth/login", json={"email": email, "password": "correct horse battery"}
    )
    body = assert_token_response(response)
    csrf = cookie_value(set_cookies(response)["svc_csrf_token"])
    client.cookies.clear()
    return body, csrf


# --- mail: a real SMTP sink, and sender functions -----------------------------------------


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
        if self.port == 0 and isinstance(self.server, asyncio.Server):
            self.port = self.server.sockets[0].getsockname()[1]
        # The base class by name: its hook is unannotated, and mypy exempts it only so.
        Controller._trigger_server(self)


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
        assert isinstance(server, asyncio.Server)
        port = server.sockets[0].getsockname()[1]
        return f"smtp://127.0.0.1:{port}"

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[EmailMessage]:
        """Poll (bounded) until `count` messages arrived."""
        return await wait_until_len(self.messages, count, timeout, "messages")


class Outbox:
    """A sender function for `AuthConfig`: records (email, token) pairs."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def __call__(self, email: str, token: str) -> None:
        self.sent.append((email, token))

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, str]]:
        """Poll (bounded) until `count` sends happened."""
        return await wait_until_len(self.sent, count, timeout, "sends")


# --- rows: counted behind an app, and written by the stores directly (tests/store/) -------


async def count_users(backend: Backend) -> int:
    db = Database(make_config(backend))
    try:
        async with db.read() as s:
            return int((await s.execute(select(func.count()).select_from(User))).scalar_one())
    finally:
        await db.dispose()


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


# --- the session-state cache --------------------------------------------------------------


def principal(user_id: int = 7) -> Principal:
    now = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    return Principal(
        id=user_id,
        email="ann@example.com",
        is_active=True,
        is_superuser=False,
        email_verified=False,
        created_at=now,
        updated_at=now,
    )


def state_cache(gate: AuthGate) -> StateCache:
    """The gate's session-state tiers, which are Redis-backed in these tests."""
    states = gate.services.session_states
    assert isinstance(states, StateCache)
    return states


async def wait_live(*gates: AuthGate) -> None:
    """Until every gate's invalidation subscription is confirmed (bounded)."""
    for _ in range(200):
        if all(state_cache(g).local.live for g in gates):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the invalidation subscription did not come up within 5 s")


async def warm(
    gate: AuthGate, client: httpx.AsyncClient, clock: FakeClock
) -> tuple[dict[str, str], dict[str, str], str, int, LocalState]:
    """Register and log in through `client`, then GET /me once so the worker's copy holds the
    session: (tokens, bearer header, session id, user id, that copy)."""
    await wait_live(gate)
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    auth = bearer(tokens["access_token"])
    claims = gate.services.keys.verify_access(tokens["access_token"], now=clock())
    assert (await client.get("/auth/me", headers=auth)).status_code == 200
    local = state_cache(gate).local
    assert local.get(claims.session_id, claims.user_id) is not None
    return tokens, auth, claims.session_id, claims.user_id, local


# --- access tokens, forged and signed -----------------------------------------------------


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Any) -> str:
    return b64(json.dumps(value, separators=(",", ":")).encode())


def sign(
    keys: Keys,
    payload: dict[str, Any],
    *,
    algorithm: str = "HS256",
    headers: dict[str, Any] | None = None,
) -> str:
    with warnings.catch_warnings():
        # PyJWT warns that the 32-byte key is short for HS384/HS512; that is the point.
        warnings.simplefilter("ignore")
        return jwt.encode(
            payload,
            keys._jwt_key,
            algorithm=algorithm,
            headers={"typ": "at+jwt"} if headers is None else headers,
        )


def write_signing_key(path: Path, algorithm: str) -> Path:
    key = (
        ed25519.Ed25519PrivateKey.generate()
        if algorithm == "EdDSA"
        else ec.generate_private_key(ec.SECP256R1())
    )
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


# --- real processes: the authgate command and authgate serve ------------------------------


CLI_TIMEOUT = 60.0
STARTUP_TIMEOUT = 30.0


def authgate(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "authgate", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """One request on a new connection (so that requests spread over the workers)."""
        return httpx.get(self.url + path, timeout=10.0, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, timeout=10.0, **kwargs)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (workers too), SIGKILL if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # stragglers of the group, if any
    if process.poll() is None:
        process.wait(timeout=10)


@contextlib.contextmanager
def serving(
    env: dict[str, str], logs: Path, *args: str, cwd: Path | None = None
) -> Iterator[Server]:
    """`authgate serve --port <free port> *args`, yielded once /health answers 200."""
    port = free_port()
    logs.mkdir(parents=True, exist_ok=True)
    stderr_path = logs / f"serve-{port}.err"
    with (logs / f"serve-{port}.out").open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "authgate", "serve", "--port", str(port), *args],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            server = Server(f"http://127.0.0.1:{port}", process, stderr_path)
            _wait_healthy(server)
            yield server
        finally:
            _stop(process)


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    for _ in range(int(STARTUP_TIMEOUT / 0.1)):
        if server.process.poll() is not None:
            pytest.fail(f"authgate serve exited with {server.process.returncode}:\n{server.stderr}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(server.url + "/health", timeout=1.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    pytest.fail(f"authgate serve did not become healthy in {STARTUP_TIMEOUT} s:\n{server.stderr}")


def register_and_login(server: Server, email: str = "ann@example.com") -> dict[str, Any]:
    response = server.post("/auth/register", json={"email": email, "password": PASSWORD})
    assert response.status_code == 201, response.text
    response = server.post("/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    assert tokens["token_type"] == "bearer"
    return tokens


# --- PgBouncer ------------------------------------------------------------------------------


PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
)
#: PgBouncer refuses to run as root; as root the tests run it as the PostgreSQL server's user.
PGBOUNCER_USER = "postgres"


def require_pgbouncer() -> str:
    """The pgbouncer binary; skips without it (fails under CI=true), like the backends."""
    require_backend()
    if PGBOUNCER is not None:
        return PGBOUNCER
    hint = "install it with: sudo apt-get install -y pgbouncer"
    if IN_CI:
        pytest.fail(f"pgbouncer is required in CI; {hint}", pytrace=False)
    pytest.skip(f"pgbouncer is not installed; {hint}")


class PgBouncer:
    """A real PgBouncer in transaction pooling mode on a free loopback port, in front of the
    test PostgreSQL (every database name passes through), with a small server pool so that
    clients really share server connections."""

    def __init__(self, binary: str, pool_size: int = 4) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="authgate-pgbouncer-"))
        (self.dir / "userlist.txt").write_text(f'"{PG_USER}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={PG_HOST} port={PG_PORT}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 500\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
        )
        command = [binary, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            self.dir.chmod(0o755)
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, PGBOUNCER_USER)
            command[1:1] = ["-u", PGBOUNCER_USER]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _port_open("127.0.0.1", self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"pgbouncer did not start:\n{self.log}")
            time.sleep(0.05)

    def url(self, database_url: str) -> str:
        """`database_url` (a test database) reached through this PgBouncer."""
        return database_url.replace(f"{PG_HOST}:{PG_PORT}", f"127.0.0.1:{self.port}")

    @property
    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


# --- the admin API ---------------------------------------------------------------------------

#: An `AUTHGATE_ADMIN_TOKEN` for tests (44 characters; 32 at least).
ADMIN_TOKEN = "test-admin-token-0123456789abcdefghijklmnopq"


def admin_headers(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- metrics: GET /metrics, parsed (tests/flows/test_metrics.py and the dashboard's test) --

#: (sample name, sorted label pairs) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> Samples:
    """The Prometheus text format through prometheus_client's own parser."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def scrape(client: httpx.AsyncClient, token: str | None = None) -> Samples:
    """GET /metrics (with the metrics token when given), checked and parsed."""
    response = await client.get("/metrics", headers=bearer(token) if token else {})
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["content-type"].startswith("text/plain")
    return parse_metrics(response.text)


def metric(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there are none)."""
    want = set(labels.items())
    return sum(v for (n, pairs), v in samples.items() if n == name and want <= set(pairs))


# --- servers that go away -----------------------------------------------------------------


class Forwarder:
    """A real TCP forwarder on loopback to `host:port`, standing in for a database or cache
    server that goes away and comes back: shut it and the app behind it loses that server
    (connections aborted, new ones refused); reopen it on the same port and the server is back.

    With `lag`, every byte Redis sends on a *subscription* connection (one that sent
    SUBSCRIBE) reaches the client `lag` seconds late, in order: a lagging subscription."""

    def __init__(self, host: str, port: int, *, lag: float = 0.0) -> None:
        self.target = (host, port)
        self.lag = lag
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._delayed: set[asyncio.TimerHandle] = set()
        self.port = 0

    @property
    def redis_url(self) -> str:
        """The forwarder as a Redis URL (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def shut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for handle in self._delayed:
            handle.cancel()
        self._delayed.clear()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        subscribed = False
        loop = asyncio.get_running_loop()

        async def upstream() -> None:
            nonlocal subscribed
            try:
                while data := await reader.read(65536):
                    subscribed = subscribed or b"SUBSCRIBE" in data.upper()
                    up_writer.write(data)
                    await up_writer.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                up_writer.transport.abort()

        def later(callback: Callable[[], None]) -> None:
            def run() -> None:
                self._delayed.discard(handle)
                if not writer.transport.is_closing():
                    callback()

            handle = loop.call_later(self.lag, run)
            self._delayed.add(handle)

        async def downstream() -> None:
            try:
                while data := await up_reader.read(65536):
                    if subscribed and self.lag:
                        later(functools.partial(writer.write, data))
                    else:
                        writer.write(data)
                        await writer.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                if subscribed and self.lag:
                    later(writer.transport.abort)  # the close arrives late too
                else:
                    writer.transport.abort()

        await asyncio.gather(upstream(), downstream())
        self._writers.discard(up_writer)  # `writer` stays until closed (shut() aborts it)


# --- Hypothesis: settings and strategies of generated text --------------------------------


UNIT = settings(max_examples=200, deadline=None, derandomize=True, database=None)
HTTP = settings(max_examples=10, deadline=None, derandomize=True, database=None)
#: Any text at all, lone surrogates included: JSON can carry them ("\ud800").
ANY_TEXT = st.text(st.characters(exclude_categories=()))
#: Letters with and without case, one (ß) whose upper case is two letters, final sigma.
UNICODE_LETTERS = "äöüßéñçøåæœαβγδλσςжпр文字日本"
ASCII_ATOM = st.text(string.ascii_letters + string.digits + "_+-", min_size=1, max_size=6)
UNICODE_ATOM = st.text(
    string.ascii_letters + string.digits + UNICODE_LETTERS, min_size=1, max_size=6
)


LOCAL_PART = st.lists(st.one_of(ASCII_ATOM, UNICODE_ATOM), min_size=1, max_size=3).map(".".join)
LABEL = st.one_of(
    st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12),
    st.text(string.ascii_lowercase + "äöüßéñ", min_size=1, max_size=12),
)


DOMAIN = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(LABEL, min_size=1, max_size=2),
    st.sampled_from(["com", "org", "net", "de", "io", "info"]),
)


ADDRESSES = st.builds(lambda local, domain: f"{local}@{domain}", LOCAL_PART, DOMAIN)


def fullwidth(char: str) -> str:
    """The fullwidth form of an ASCII letter or digit (NFKC maps it back)."""
    return chr(ord(char) + 0xFEE0) if char.isascii() and char.isalnum() else char


def case_round_trips(char: str) -> bool:
    """Upper-casing `char` and lower-casing it again gives its lower case back (not so for
    `ß` -> `SS` -> `ss`, or the final sigma, whose upper case lower-cases to the other sigma)."""
    return char.upper().lower() == char.lower()


@st.composite
def mixed_case(draw: st.DrawFn, text: str) -> str:
    """`text` with some letters upper-cased and others lower-cased; only letters whose case
    round-trips are flipped, so the result is the same text under `str.lower()`."""
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(
        (c.upper() if flip else c.lower()) if case_round_trips(c) else c
        for c, flip in zip(text, flips, strict=True)
    )


@st.composite
def nfkc_variant(draw: st.DrawFn, text: str) -> str:
    """`text` with some ASCII letters and digits fullwidth and possibly decomposed (NFD):
    a different string with the same NFKC form."""
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    out = "".join(fullwidth(c) if flip else c for c, flip in zip(text, flips, strict=True))
    if draw(st.booleans()):
        out = unicodedata.normalize("NFD", out)
    return out


#: Edits that turn an address into a look-alike: another case (including the ones that do not
#: round-trip), a compatibility form, `ß` <-> `ss`, `s` -> long s, `i` <-> dotted/dotless i.
LOOK_ALIKE_EDITS: tuple[Callable[[str], str], ...] = (
    str.upper,
    str.lower,
    str.swapcase,
    fullwidth,
    # long s, dotless i, dotted capital I, the two sigmas
    lambda c: {
        "ß": "ss",
        "s": "\u017f",
        "S": "\u017f",
        "i": "\u0131",
        "I": "\u0130",
        "\u03c2": "\u03c3",
        "\u03c3": "\u03c2",
    }.get(c, c),
    lambda c: {"s": "ß", "K": "\u212a", "e": "\u0435"}.get(c, c),  # Kelvin sign, Cyrillic e
)


@st.composite
def look_alike(draw: st.DrawFn, address: str) -> str:
    """`address` with some characters edited by LOOK_ALIKE_EDITS, maybe decomposed (NFD),
    maybe with its domain in ASCII (punycode) form: often the same mailbox, often not."""
    edits = draw(
        st.lists(
            st.one_of(st.none(), st.sampled_from(LOOK_ALIKE_EDITS)),
            min_size=len(address),
            max_size=len(address),
        )
    )
    local, domain = address.rsplit("@", 1)
    out = "".join(c if edit is None else edit(c) for c, edit in zip(local, edits, strict=False))
    if draw(st.booleans()):
        domain = "".join(
            c if edit is None else edit(c)
            for c, edit in zip(domain, edits[len(local) :], strict=False)
        )
    elif draw(st.booleans()):
        domain = validate_email(address, check_deliverability=False).ascii_domain
    out = f"{out}@{domain}"
    if draw(st.booleans()):
        out = unicodedata.normalize("NFD", out)
    return out


def normalised(address: str) -> str:
    """The address as email-validator normalises it: the input of the documented key rule."""
    return validate_email(address, check_deliverability=False).normalized


def same_mailbox(a: str, b: str) -> bool:
    """The documented rule: one account exactly when the normalised addresses are equal after
    `str.lower()` (the domain compared as IDNA, which the normalised form already is)."""
    return normalised(a).lower() == normalised(b).lower()


def acceptable(normalised: str) -> bool:
    """The rules, restated: judged on the NFKC form, 8 characters to 72 bytes of UTF-8 (no
    truncation), encodable, not a common password (case-folded)."""
    try:
        size = len(normalised.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return (
        len(normalised) >= MIN_PASSWORD_CHARS
        and size <= MAX_PASSWORD_BYTES
        and normalised.casefold() not in common_passwords()
    )


def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, httpx.Response]) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


# --- second factors: TOTP -------------------------------------------------------------------


def totp_code(secret: str, at: datetime) -> str:
    """The RFC 6238 code of `secret` at `at` (an authenticator app, computed by the test)."""
    import pyotp

    return str(pyotp.TOTP(secret).at(at))


def claims_of(access_token: str) -> dict[str, Any]:
    """An access token's payload, read without verifying (the test only looks)."""
    claims: dict[str, Any] = jwt.decode(access_token, options={"verify_signature": False})
    return claims


async def enrol_totp(
    client: httpx.AsyncClient, access_token: str, clock: Callable[[], datetime]
) -> tuple[str, list[str]]:
    """Enrol and confirm an authenticator app with a code of `clock`'s time; (the secret, the
    recovery codes). The step of that time is then used: the next code needs a later one."""
    started = await client.post("/auth/mfa/totp", headers=bearer(access_token))
    assert started.status_code == 200, started.text
    secret: str = started.json()["secret"]
    confirmed = await client.post(
        "/auth/mfa/totp/confirm",
        json={"code": totp_code(secret, clock())},
        headers=bearer(access_token),
    )
    assert confirmed.status_code == 200, confirmed.text
    codes: list[str] = confirmed.json()["recovery_codes"]
    return secret, codes


# --- second factors: passkeys (a software authenticator) ---

#: The relying party of an app on the default `public_url` (http://127.0.0.1:8000).
PASSKEY_RP_ID = "127.0.0.1"
PASSKEY_ORIGIN = "http://127.0.0.1:8000"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class SoftCredential:
    """One discoverable credential the software authenticator holds."""

    id: bytes
    key: ec.EllipticCurvePrivateKey
    user_handle: bytes
    counter: int = 0


@dataclass
class SoftAuthenticator:
    """A WebAuthn authenticator in software: what `navigator.credentials.create()/get()` on a
    ctap2 authenticator with resident keys and user verification answer, as
    `PublicKeyCredential.toJSON()` (Chrome's shape, extra keys included). Real EC P-256 keys
    and ECDSA signatures over authenticatorData || SHA-256(clientDataJSON), verified by the
    real py_webauthn behind the API: nothing is mocked. `synced`: a multi-device passkey
    (flags BE and BS; counter always 0, as synced passkeys report it)."""

    rp_id: str = PASSKEY_RP_ID
    origin: str = PASSKEY_ORIGIN
    synced: bool = False
    credentials: list[SoftCredential] = field(default_factory=list)

    _UP, _UV, _BE, _BS, _AT = 0x01, 0x04, 0x08, 0x10, 0x40

    def _flags(self, *, uv: bool, attested: bool = False) -> int:
        flags = self._UP | (self._UV if uv else 0)
        if self.synced:
            flags |= self._BE | self._BS
        return flags | (self._AT if attested else 0)

    def _client_data(self, kind: str, options: dict[str, Any], origin: str | None) -> bytes:
        return json.dumps(
            {
                "type": kind,
                "challenge": options["challenge"],
                "origin": origin or self.origin,
                "crossOrigin": False,
            }
        ).encode()

    def create(
        self,
        options: dict[str, Any],
        *,
        uv: bool = True,
        origin: str | None = None,
        rp_id: str | None = None,
        reuse: SoftCredential | None = None,
    ) -> dict[str, Any]:
        """Make a credential for creation options (`options_to_json` output): its toJSON().
        `reuse`: answer with a credential held already, as a broken or hostile authenticator
        that ignores excludeCredentials would."""
        import cbor2

        assert options["authenticatorSelection"]["residentKey"] == "required"
        assert options["authenticatorSelection"]["userVerification"] == "required"
        if reuse is not None:
            credential = reuse
        else:
            held = {c.id for c in self.credentials}
            excluded = {unb64url(d["id"]) for d in options.get("excludeCredentials", [])}
            assert not held & excluded, "InvalidStateError: this authenticator is excluded"
            credential = SoftCredential(
                id=secrets.token_bytes(16),
                key=ec.generate_private_key(ec.SECP256R1()),
                user_handle=unb64url(options["user"]["id"]),
            )
            self.credentials.append(credential)
        numbers = credential.key.public_key().public_numbers()
        cose_key = cbor2.dumps(
            {
                1: 2,
                3: -7,
                -1: 1,
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )
        auth_data = (
            _rp_hash(rp_id or self.rp_id)
            + bytes([self._flags(uv=uv, attested=True)])
            + credential.counter.to_bytes(4, "big")
            + bytes(16)  # AAGUID: none (attestation "none")
            + len(credential.id).to_bytes(2, "big")
            + credential.id
            + cose_key
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        spki = credential.key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return {
            "id": b64url(credential.id),
            "rawId": b64url(credential.id),
            "type": "public-key",
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {"credProps": {"rk": True}},
            "response": {
                "clientDataJSON": b64url(self._client_data("webauthn.create", options, origin)),
                "attestationObject": b64url(attestation),
                "transports": ["internal", "hybrid"],
                "publicKeyAlgorithm": -7,
                "publicKey": b64url(spki),
                "authenticatorData": b64url(auth_data),
            },
        }

    def get(
        self,
        options: dict[str, Any],
        *,
        credential: SoftCredential | None = None,
        uv: bool = True,
        counter: int | None = None,
        origin: str | None = None,
        rp_id: str | None = None,
    ) -> dict[str, Any]:
        """An assertion for request options (`options_to_json` output) with `credential`
        (default: the first held; discoverable, so no allowCredentials is needed): its
        toJSON(). The counter grows by one per assertion (stays 0 when synced) unless
        `counter` sets it."""
        from cryptography.hazmat.primitives import hashes

        assert options["userVerification"] == "required"
        chosen = credential or self.credentials[0]
        if counter is not None:
            chosen.counter = counter
        elif not self.synced:
            chosen.counter += 1
        auth_data = (
            _rp_hash(rp_id or self.rp_id)
            + bytes([self._flags(uv=uv)])
            + chosen.counter.to_bytes(4, "big")
        )
        client_data = self._client_data("webauthn.get", options, origin)
        signature = chosen.key.sign(auth_data + _digest256(client_data), ec.ECDSA(hashes.SHA256()))
        return {
            "id": b64url(chosen.id),
            "rawId": b64url(chosen.id),
            "type": "public-key",
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": b64url(chosen.user_handle),
            },
        }


def _digest256(data: bytes) -> bytes:
    import hashlib

    return hashlib.sha256(data).digest()


def _rp_hash(text: str) -> bytes:
    return _digest256(text.encode())


async def add_passkey(
    client: httpx.AsyncClient,
    authenticator: SoftAuthenticator,
    access_token: str,
    name: str = "My laptop",
) -> dict[str, Any]:
    """Register a passkey of `authenticator` for the session of `access_token` through HTTP
    (options, then the credential, the ceremony's cookie in the jar); the 201 body."""
    options = await client.post("/auth/passkeys/register/options", headers=bearer(access_token))
    assert options.status_code == 200, options.text
    created = await client.post(
        "/auth/passkeys/register",
        json={"credential": authenticator.create(options.json()), "name": name},
        headers=bearer(access_token),
    )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body
