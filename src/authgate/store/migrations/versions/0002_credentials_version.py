"""Credentials versions, the per-session refresh limit, sweep indexes, shared rate limits.

- `authgate_users.credentials_version` and `authgate_sessions.credentials_version`: a login
  opens a session only while the credentials it verified are current (security finding F2);
- `authgate_sessions.refresh_window_start` / `refresh_count`: rotations per session (F10);
- indexes on `authgate_sessions.revoked_at` and `authgate_users.updated_at`: each worker's
  invalidation sweep reads what changed since its last one (F3);
- `authgate_rate_limits`: rate-limit counters shared through the database when there is no
  CACHE_URL (F8).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from authgate.store.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("authgate_users") as batch:
        batch.add_column(
            sa.Column("credentials_version", sa.Integer(), nullable=False, server_default="0")
        )
    op.create_index("ix_authgate_users_updated_at", "authgate_users", ["updated_at"])
    with op.batch_alter_table("authgate_sessions") as batch:
        batch.add_column(
            sa.Column("credentials_version", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("refresh_window_start", UTCDateTime(), nullable=True))
        batch.add_column(
            sa.Column("refresh_count", sa.Integer(), nullable=False, server_default="0")
        )
    op.create_index("ix_authgate_sessions_revoked_at", "authgate_sessions", ["revoked_at"])
    op.create_table(
        "authgate_rate_limits",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("window_end", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_authgate_rate_limits"),
    )
    op.create_index("ix_authgate_rate_limits_window_end", "authgate_rate_limits", ["window_end"])


def downgrade() -> None:
    op.drop_index("ix_authgate_rate_limits_window_end", table_name="authgate_rate_limits")
    op.drop_table("authgate_rate_limits")
    op.drop_index("ix_authgate_sessions_revoked_at", table_name="authgate_sessions")
    with op.batch_alter_table("authgate_sessions") as batch:
        batch.drop_column("refresh_count")
        batch.drop_column("refresh_window_start")
        batch.drop_column("credentials_version")
    op.drop_index("ix_authgate_users_updated_at", table_name="authgate_users")
    with op.batch_alter_table("authgate_users") as batch:
        batch.drop_column("credentials_version")
