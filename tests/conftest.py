"""The fixtures: every behavioural test runs on both backends.

- `sqlite`: the embedded default (SQLite file in a fresh data dir, in-process cache);
- `postgres`: PostgreSQL + Redis on loopback. Each test gets a fresh database, cloned from a
  template migrated once per run, and its own Redis key prefix (deleted afterwards).

When PostgreSQL or Redis cannot be reached, the `postgres` half skips with a message on a
developer's machine and fails in CI (`CI=true`), where skipping would hide a broken backend.

Only fixtures live here; what they are built from (and every other shared helper) is in
tests/helpers.py.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from authgate import create_app
from tests.helpers import (
    BACKENDS,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    PgBouncer,
    PgTemplate,
    SmtpSink,
    make_config,
    postgres_backend,
    require_pgbouncer,
    running,
)

# --- the backends -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_template() -> Iterator[PgTemplate]:
    template = PgTemplate()
    yield template
    template.drop_template()


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


@pytest.fixture(scope="module")
def pgbouncer() -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction pooling mode in front of the test PostgreSQL (skips
    without the binary, fails under CI=true)."""
    bouncer = PgBouncer(require_pgbouncer())
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No authgate setting in the environment (`AUTHGATE_*`, `DATABASE_URL`, `CACHE_URL`), and
    a fresh working directory: what `AuthConfig()` reads is what the test sets."""
    for name in list(os.environ):
        if name.startswith("AUTHGATE_") or name in ("DATABASE_URL", "CACHE_URL"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


# --- the clock ----------------------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- the application ----------------------------------------------------------------------


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


# --- mail -----------------------------------------------------------------------------------


@pytest.fixture
def smtp_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()
