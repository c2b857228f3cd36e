"""The audit log (contract §10): `authgate_audit_events`, one row per security event.

`user_id` has no foreign key (the rows outlive a deleted account). Indexes serve the queries
of `authgate audit` and `GET /admin/audit`, newest first by id: (user_id, id), (event, id);
and (time) serves the retention trim of `authgate purge`. AUTOINCREMENT on SQLite so an id is
never reused after the newest rows were purged (the keyset cursors rely on it).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from authgate.store.models import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TABLE = "authgate_audit_events"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("time", UTCDateTime(), nullable=False),
        sa.Column("event", sa.String(40), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=True),
        sa.Column("session_id", sa.String(32), nullable=True),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("factor", sa.String(16), nullable=True),
        sa.Column("actor", sa.String(64), nullable=True),
        sa.Column("client_ip", sa.String(64), nullable=True),
        sa.Column("user_agent", sa.String(256), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_authgate_audit_events"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_authgate_audit_events_user_id_id", _TABLE, ["user_id", "id"])
    op.create_index("ix_authgate_audit_events_event_id", _TABLE, ["event", "id"])
    op.create_index("ix_authgate_audit_events_time", _TABLE, ["time"])


def downgrade() -> None:
    op.drop_table(_TABLE)
