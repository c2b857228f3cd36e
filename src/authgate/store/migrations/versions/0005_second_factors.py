"""Second factors (contract §9): session assurance, TOTP, recovery codes and passkeys.

- `authgate_sessions.aal`, `amr`, `mfa_pending`: the session's assurance level. Existing
  sessions are password sessions of users without a factor (`aal1`, `pwd`, nothing due).
- `authgate_totp_factors`: one authenticator app per user, its secret sealed (AES-GCM), the
  last accepted time step (replay).
- `authgate_recovery_codes`: digests of single-use recovery codes.
- `authgate_passkeys`: WebAuthn credentials.
- `authgate_webauthn_challenges`: outstanding ceremonies (single use, 5 minutes, bound to a
  browser), purged with the other expired rows.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from authgate.store.models import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _user_fk(name: str) -> sa.ForeignKey:
    return sa.ForeignKey("authgate_users.id", ondelete="CASCADE", name=name)


def upgrade() -> None:
    # Plain ALTER TABLE ... ADD COLUMN (SQLite allows NOT NULL with a constant default): a
    # batch rebuild of the sessions table would cascade to every refresh token.
    op.add_column(
        "authgate_sessions",
        sa.Column("aal", sa.SmallInteger(), nullable=False, server_default="1"),
    )
    op.add_column(
        "authgate_sessions",
        sa.Column("amr", sa.String(64), nullable=False, server_default="pwd"),
    )
    op.add_column(
        "authgate_sessions",
        sa.Column("mfa_pending", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "authgate_totp_factors",
        sa.Column(
            "user_id",
            _BIG_ID,
            _user_fk("fk_authgate_totp_factors_user_id_authgate_users"),
            nullable=False,
        ),
        sa.Column("secret_sealed", sa.LargeBinary(128), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("confirmed_at", UTCDateTime(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", name="pk_authgate_totp_factors"),
    )
    op.create_table(
        "authgate_recovery_codes",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column(
            "user_id",
            _BIG_ID,
            _user_fk("fk_authgate_recovery_codes_user_id_authgate_users"),
            nullable=False,
        ),
        sa.Column("digest", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_recovery_codes"),
        sa.UniqueConstraint("digest", name="uq_authgate_recovery_codes_digest"),
    )
    op.create_index("ix_authgate_recovery_codes_user_id", "authgate_recovery_codes", ["user_id"])
    op.create_table(
        "authgate_passkeys",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column(
            "user_id",
            _BIG_ID,
            _user_fk("fk_authgate_passkeys_user_id_authgate_users"),
            nullable=False,
        ),
        sa.Column("credential_id", sa.LargeBinary(1023), nullable=False),
        sa.Column("public_key", sa.LargeBinary(1024), nullable=False),
        sa.Column("sign_count", sa.BigInteger(), nullable=False),
        sa.Column("device_type", sa.String(16), nullable=False),
        sa.Column("backed_up", sa.Boolean(), nullable=False),
        sa.Column("transports", sa.String(128), nullable=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("last_used_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_passkeys"),
        sa.UniqueConstraint("credential_id", name="uq_authgate_passkeys_credential_id"),
    )
    op.create_index("ix_authgate_passkeys_user_id", "authgate_passkeys", ["user_id"])
    op.create_table(
        "authgate_webauthn_challenges",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("binding", sa.LargeBinary(32), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column(
            "user_id",
            _BIG_ID,
            _user_fk("fk_authgate_webauthn_challenges_user_id_authgate_users"),
            nullable=True,
        ),
        sa.Column("challenge", sa.LargeBinary(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_webauthn_challenges"),
        sa.UniqueConstraint("binding", name="uq_authgate_webauthn_challenges_binding"),
    )
    op.create_index(
        "ix_authgate_webauthn_challenges_expires_at",
        "authgate_webauthn_challenges",
        ["expires_at"],
    )


def downgrade() -> None:
    op.drop_table("authgate_webauthn_challenges")
    op.drop_table("authgate_passkeys")
    op.drop_table("authgate_recovery_codes")
    op.drop_table("authgate_totp_factors")
    # SQLite 3.35+ drops a column in place (no rebuild, no cascade).
    for column in ("mfa_pending", "amr", "aal"):
        op.drop_column("authgate_sessions", column)
