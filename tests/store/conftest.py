"""Store contract tests: the same cases on SQLite and on PostgreSQL (the `backend` fixture),
calling the stores directly on a migrated database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from authgate.store.db import Database, upgrade_schema
from tests.helpers import Backend, make_config


@pytest.fixture
async def db(backend: Backend) -> AsyncIterator[Database]:
    database = Database(make_config(backend))
    await upgrade_schema(database)
    try:
        yield database
    finally:
        await database.dispose()
