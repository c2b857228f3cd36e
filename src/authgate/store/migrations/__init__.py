"""Alembic migrations, shipped inside the package and applied by `authgate db upgrade`."""

#: Our own version table, so a host application's Alembic history can share the database.
VERSION_TABLE = "authgate_alembic_version"

#: The newest revision in versions/ (a test checks it against Alembic's own head). A process
#: that finds the database at this revision never imports Alembic.
HEAD_REVISION = "0006"
