"""Alembic migrations, shipped inside the package and applied by `authgate db upgrade`."""

#: Our own version table, so a host application's Alembic history can share the database.
VERSION_TABLE = "authgate_alembic_version"
