"""Initial schema: users, sessions (token families), refresh tokens, one-time tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from authgate.store.models import BigId, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "authgate_users",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("email_key", sa.String(320), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("is_superuser", sa.Boolean(), nullable=False),
        sa.Column("email_verified", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_users"),
        sa.UniqueConstraint("email_key", name="uq_authgate_users_email_key"),
    )
    op.create_table(
        "authgate_sessions",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("user_id", BigId, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("revoke_reason", sa.String(32), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authgate_users.id"],
            name="fk_authgate_sessions_user_id_authgate_users",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_sessions"),
    )
    op.create_index("ix_authgate_sessions_user_id", "authgate_sessions", ["user_id"])
    op.create_table(
        "authgate_refresh_tokens",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("digest", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["authgate_sessions.id"],
            name="fk_authgate_refresh_tokens_session_id_authgate_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_refresh_tokens"),
        sa.UniqueConstraint("digest", name="uq_authgate_refresh_tokens_digest"),
    )
    op.create_index(
        "ix_authgate_refresh_tokens_session_id", "authgate_refresh_tokens", ["session_id"]
    )
    op.create_index(
        "ix_authgate_refresh_tokens_expires_at", "authgate_refresh_tokens", ["expires_at"]
    )
    op.create_table(
        "authgate_one_time_tokens",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("user_id", BigId, nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("digest", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authgate_users.id"],
            name="fk_authgate_one_time_tokens_user_id_authgate_users",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_one_time_tokens"),
        sa.UniqueConstraint("digest", name="uq_authgate_one_time_tokens_digest"),
    )
    op.create_index(
        "ix_authgate_one_time_tokens_user_purpose",
        "authgate_one_time_tokens",
        ["user_id", "purpose"],
    )
    op.create_index(
        "ix_authgate_one_time_tokens_expires_at", "authgate_one_time_tokens", ["expires_at"]
    )


def downgrade() -> None:
    op.drop_table("authgate_one_time_tokens")
    op.drop_table("authgate_refresh_tokens")
    op.drop_table("authgate_sessions")
    op.drop_table("authgate_users")
