"""Store contract tests: the same cases on SQLite and on PostgreSQL (the `backend` fixture),
calling the stores directly on a migrated database."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from authgate.store.db import Database, upgrade_schema
from tests.helpers import Backend, make_config


@contextlib.asynccontextmanager
async def migrated(backend: Backend) -> AsyncIterator[Database]:
    database = Database(make_config(backend))
    await upgrade_schema(database)
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
async def db(backend: Backend) -> AsyncIterator[Database]:
    async with migrated(backend) as database:
        yield database


@pytest.fixture
async def pg_db(pg_backend: Backend) -> AsyncIterator[Database]:
    """PostgreSQL only, for what SQLite does not run (the one-statement rotation)."""
    async with migrated(pg_backend) as database:
        yield database
