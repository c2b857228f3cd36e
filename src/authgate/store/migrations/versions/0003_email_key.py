"""Email keys by the new rule: email-validator's address, ASCII domain, `str.lower()` local part.

Until 0003 the unique key was NFKC + case-fold of the whole address, which merged different
mailboxes (`sam@` spelt with a fullwidth or a long s took `sam@`; `victim@straße.de` took
`victim@strasse.de`, another domain): security finding F12. This migration recomputes
`authgate_users.email_key` from the stored `email` of every row, so that an existing account
keeps logging in with the address it has (login computes the new key).

The key function is a frozen copy of the rule as it stood at 0003, not an import of
`authgate.factors.emails`: a migration must mean the same thing when that module changes.

The new key is finer than the old one, so it cannot create duplicates. Defensively, a row is
never made to fail the migration: the rows whose key changes are first given a placeholder
(so that their old keys are free), then, in primary-key order, each takes its new key; when
that is taken (by an earlier row), the later row keeps its old key, and the collision is
logged (user ids only, never an address). A stored address that email-validator no longer
accepts keeps its key, logged the same way.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from email_validator import EmailNotValidError, validate_email

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

log = logging.getLogger("authgate.store.migrations")

#: Rows read (and placeholders written) per round trip.
BATCH = 1000
#: The width of the column.
KEY_LENGTH = 320

_users = sa.table(
    "authgate_users",
    sa.column("id", sa.BigInteger()),
    sa.column("email", sa.String()),
    sa.column("email_key", sa.String()),
)


def key_0003(email: str) -> str | None:
    """The key by the 0003 rule; None when the stored address is not valid (any more)."""
    try:
        result = validate_email(email, check_deliverability=False)
    except EmailNotValidError:
        return None
    key = result.local_part.lower() + "@" + result.ascii_domain.lower()
    return key if len(key) <= KEY_LENGTH else None


def key_0001(email: str) -> str | None:
    """The key by the rule before 0003 (for the downgrade)."""
    key = unicodedata.normalize("NFKC", email).casefold()
    return key if len(key) <= KEY_LENGTH else None


def upgrade() -> None:
    _rekey(op.get_bind(), key_0003, "0003")


def downgrade() -> None:
    # The old rule is coarser: two accounts the new rule told apart may want one old key; the
    # later one then keeps its key (logged), as in the upgrade.
    _rekey(op.get_bind(), key_0001, "0003 downgrade")


def _placeholder(user_id: int) -> str:
    # Not an address (a space), so no real key can ever equal it; unique by the id.
    return f"rekeying {user_id}"


def _rekey(conn: sa.Connection, key_of: Callable[[str], str | None], step: str) -> None:
    set_key = (
        sa.update(_users)
        .where(_users.c.id == sa.bindparam("b_id"))
        .values(email_key=sa.bindparam("b_key"))
    )

    # 1. Read every row in primary-key order; park each row whose key changes on a placeholder,
    #    which frees its old key for whichever row the new rule gives it to.
    changing: list[tuple[int, str, str]] = []  # (id, old key, new key)
    unkeyable = 0
    last_id: int | None = None
    while True:
        query = sa.select(_users.c.id, _users.c.email, _users.c.email_key).order_by(_users.c.id)
        if last_id is not None:
            query = query.where(_users.c.id > last_id)
        rows = conn.execute(query.limit(BATCH)).all()
        if not rows:
            break
        last_id = rows[-1].id
        parked = []
        for row in rows:
            new = key_of(row.email)
            if new is None:
                unkeyable += 1
                log.warning(
                    "migration %s: user %s keeps its email key: its stored address is not a "
                    "valid address by the current rules",
                    step,
                    row.id,
                )
            elif new != row.email_key:
                changing.append((row.id, row.email_key, new))
                parked.append({"b_id": row.id, "b_key": _placeholder(row.id)})
        if parked:
            conn.execute(set_key, parked)

    # 2. In primary-key order, each parked row takes its new key, or its old one when an
    #    earlier row holds the new one. Keys of later batches are still placeholders, keys of
    #    earlier batches are final, so one query per batch says what is taken.
    collisions = 0
    for start in range(0, len(changing), BATCH):
        batch = changing[start : start + BATCH]
        wanted = {key for _, old, new in batch for key in (old, new)}
        taken = set(
            conn.execute(
                sa.select(_users.c.email_key).where(_users.c.email_key.in_(sorted(wanted)))
            ).scalars()
        )
        updates = []
        for user_id, old, new in batch:
            if new not in taken:
                key = new
            elif old not in taken:
                collisions += 1
                key = old
                log.warning(
                    "migration %s: user %s keeps its current email key: the key this rule "
                    "gives it is already another user's",
                    step,
                    user_id,
                )
            else:  # an earlier row's new key is this row's old key: not seen, but not fatal
                collisions += 1
                key = _placeholder(user_id)
                log.error(
                    "migration %s: user %s has neither its old nor its new email key free; "
                    "it cannot log in until an operator sets its email",
                    step,
                    user_id,
                )
            taken.add(key)
            updates.append({"b_id": user_id, "b_key": key})
        conn.execute(set_key, updates)

    log.info(
        "migration %s: %d email keys recomputed, %d kept on a collision, %d kept as their "
        "stored address is not valid",
        step,
        len(changing) - collisions,
        collisions,
        unkeyable,
    )
