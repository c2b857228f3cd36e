"""Alembic environment: runs on the connection that `authgate.store.db.upgrade_schema` passes in."""

from __future__ import annotations

from alembic import context

from authgate.store.migrations import VERSION_TABLE
from authgate.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `authgate db upgrade`, not the alembic command")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
