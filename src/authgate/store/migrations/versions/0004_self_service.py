"""Self-service accounts: where and when each session was last used; email changes.

- `authgate_sessions.last_active_at`, `ip`, `user_agent`: written at login and at each
  refresh (never by an authenticated request: GET /me stays free of writes), shown by
  GET /sessions;
- `authgate_one_time_tokens.new_email`: the address an email-change token confirms;
- SQLite: `authgate_users` gets AUTOINCREMENT. Accounts can now be deleted, and SQLite's
  plain integer key hands the highest deleted id to the next new row: a new registrant would
  inherit the deleted account's audit trail and whatever a host application keeps under its
  id. (PostgreSQL's identity sequence never reuses an id.)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from authgate.store.models import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _never_reuse_user_ids()
    with op.batch_alter_table("authgate_sessions") as batch:
        batch.add_column(sa.Column("last_active_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("ip", sa.String(64), nullable=True))
        batch.add_column(sa.Column("user_agent", sa.String(256), nullable=True))
    with op.batch_alter_table("authgate_one_time_tokens") as batch:
        batch.add_column(sa.Column("new_email", sa.String(320), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("authgate_one_time_tokens") as batch:
        batch.drop_column("new_email")
    with op.batch_alter_table("authgate_sessions") as batch:
        batch.drop_column("user_agent")
        batch.drop_column("ip")
        batch.drop_column("last_active_at")


def _never_reuse_user_ids() -> None:
    """Rebuild `authgate_users` with AUTOINCREMENT (SQLite cannot alter a key in place).

    Dropping the old table during the rebuild would cascade to every session and token with
    foreign keys on, so they are turned off around it; the pragma is silently ignored inside
    a transaction, hence the check rather than the hope."""
    bind = op.get_bind()
    bind.exec_driver_sql("PRAGMA foreign_keys=OFF")
    if bind.exec_driver_sql("PRAGMA foreign_keys").scalar() != 0:
        raise RuntimeError("SQLite foreign keys could not be turned off for the users rebuild")
    try:
        with op.batch_alter_table(
            "authgate_users", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
        problems = bind.exec_driver_sql("PRAGMA foreign_key_check").all()
        if problems:
            raise RuntimeError(f"foreign key check failed after the rebuild: {len(problems)} rows")
    finally:
        bind.exec_driver_sql("PRAGMA foreign_keys=ON")
