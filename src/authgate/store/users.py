"""Users: the login lookup, adding an account, and the changes that move its credentials.

Functions that take the `Database` are whole units of work: each commits in the dialect's
cheapest atomic form (one autocommitted statement on PostgreSQL, a transaction on SQLite).
`UserStore` takes a session and only flushes: its caller's `db.write()` block commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, delete, exists, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.store.db import Database
from authgate.store.models import Base, Passkey, Session, TotpFactor, User

__all__ = ["Credentials", "UserStore", "add_user", "credentials"]

_users: Table = Base.metadata.tables[User.__tablename__]
_totp: Table = Base.metadata.tables[TotpFactor.__tablename__]
_passkeys: Table = Base.metadata.tables[Passkey.__tablename__]

#: Whether a user has a confirmed second factor (an authenticator app or a passkey): its
#: password logins open `aal1` sessions that wait for the second step (contract §9).
_has_factor = or_(
    exists().where(_totp.c.user_id == _users.c.id, _totp.c.confirmed_at.is_not(None)),
    exists().where(_passkeys.c.user_id == _users.c.id),
).label("has_factor")
#: What login needs of a user, by its canonical email key.
_CREDENTIALS = select(
    _users.c.id,
    _users.c.password_hash,
    _users.c.is_active,
    _users.c.credentials_version,
    _has_factor,
).where(_users.c.email_key == bindparam("email_key"))
#: PostgreSQL: a new user in one autocommitted statement; no row back when the email is taken.
_ADD_USER = (
    pg_insert(_users)
    .on_conflict_do_nothing(index_elements=[_users.c.email_key])
    .returning(_users.c.id)
)


@dataclass(frozen=True, slots=True)
class Credentials:
    user_id: int
    password_hash: str = field(repr=False)
    is_active: bool
    version: int
    #: A confirmed second factor: a password login opens a session pending the second step.
    has_factor: bool = False


async def credentials(db: Database, email_key: str) -> Credentials | None:
    """The login lookup: one indexed row, no ORM object (PostgreSQL: no BEGIN/COMMIT)."""
    if db.is_sqlite:
        async with db.read() as s:
            row = (await s.execute(_CREDENTIALS, {"email_key": email_key})).one_or_none()
    else:
        async with db.autocommit() as conn:
            row = (await conn.execute(_CREDENTIALS, {"email_key": email_key})).one_or_none()
    if row is None:
        return None
    return Credentials(
        row.id, row.password_hash, row.is_active, row.credentials_version, row.has_factor
    )


async def add_user(
    db: Database,
    *,
    email: str,
    email_key: str,
    password_hash: str,
    is_superuser: bool,
    email_verified: bool,
    now: datetime,
) -> User | None:
    """A new active account, committed; None when the email key is taken (the unique index
    decides, not a pre-check)."""
    user = User(
        email=email,
        email_key=email_key,
        password_hash=password_hash,
        is_active=True,
        is_superuser=is_superuser,
        email_verified=email_verified,
        created_at=now,
        updated_at=now,
    )
    if db.is_sqlite:
        async with db.write() as s:
            try:
                async with s.begin_nested():
                    s.add(user)
                    await s.flush()
            except IntegrityError:
                return None
        return user
    # PostgreSQL: INSERT ... ON CONFLICT DO NOTHING, no BEGIN/SAVEPOINT/COMMIT. Unset
    # attributes (id, credentials_version) take the table's defaults.
    values = {c.key: v for c in _users.c if (v := getattr(user, c.key)) is not None}
    async with db.autocommit() as conn:
        user_id = (await conn.execute(_ADD_USER, values)).scalar_one_or_none()
    if user_id is None:
        return None
    user.id = user_id
    return user


class UserStore:
    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def by_id(self, user_id: int) -> User | None:
        return await self.s.get(User, user_id)

    async def credentials_of(self, user_id: int) -> tuple[Credentials, str] | None:
        """What proving the password of a signed-in user needs: its credentials and the
        email key its failed-login counters are kept under."""
        row = (
            await self.s.execute(
                select(
                    User.id,
                    User.password_hash,
                    User.is_active,
                    User.credentials_version,
                    _has_factor,
                    User.email_key,
                ).where(User.id == user_id)
            )
        ).one_or_none()
        if row is None:
            return None
        found = Credentials(
            row.id, row.password_hash, row.is_active, row.credentials_version, row.has_factor
        )
        return found, row.email_key

    async def by_email_key(self, email_key: str) -> User | None:
        result = await self.s.execute(select(User).where(User.email_key == email_key))
        return result.scalar_one_or_none()

    async def reload(self, user: User) -> None:
        """Read `user`'s row again (after an UPDATE statement changed it)."""
        await self.s.refresh(user)

    async def set_password(self, user_id: int, password_hash: str, now: datetime) -> None:
        """A new password: whoever knew the old one loses every way in (the credentials
        version moves, so a login that verified the old password opens no session)."""
        await self.s.execute(
            update(User)
            .where(User.id == user_id)
            .values(
                password_hash=password_hash,
                updated_at=now,
                credentials_version=User.credentials_version + 1,
            )
        )

    async def rehash(self, user_id: int, verified_hash: str, new_hash: str, now: datetime) -> bool:
        """Replace the hash that was just verified by one at the current parameters (same
        password): a compare-and-swap, so a reset that committed meanwhile is never undone.
        False (nothing written) when the stored hash is no longer `verified_hash`."""
        result = await self.s.execute(
            update(User)
            .where(User.id == user_id, User.password_hash == verified_hash)
            .values(password_hash=new_hash, updated_at=now)
            .returning(User.id)
        )
        return result.scalar_one_or_none() is not None

    async def replace_password(
        self, user_id: int, verified_hash: str, new_hash: str, now: datetime
    ) -> bool:
        """A password change: `set_password`, but only while the stored hash is still the one
        the current password was just verified against (a compare-and-swap: a reset or another
        change that committed meanwhile wins). False: nothing written."""
        result = await self.s.execute(
            update(User)
            .where(User.id == user_id, User.password_hash == verified_hash)
            .values(
                password_hash=new_hash,
                updated_at=now,
                credentials_version=User.credentials_version + 1,
            )
            .returning(User.id)
        )
        return result.scalar_one_or_none() is not None

    async def email_key_taken(self, email_key: str) -> bool:
        found = await self.s.scalar(select(User.id).where(User.email_key == email_key))
        return found is not None

    async def change_email(self, user_id: int, email: str, email_key: str, now: datetime) -> bool:
        """The account's address becomes `email`, verified; False (nothing written) when
        another account holds `email_key` (the unique index decides, under any race)."""
        try:
            async with self.s.begin_nested():
                await self.s.execute(
                    update(User)
                    .where(User.id == user_id)
                    .values(email=email, email_key=email_key, email_verified=True, updated_at=now)
                )
        except IntegrityError:
            return False
        return True

    async def delete(self, user_id: int) -> list[str]:
        """Delete the account; its sessions, refresh tokens and one-time tokens go with it
        (foreign keys, ON DELETE CASCADE). The ids of its sessions that were not revoked."""
        live = await self.s.scalars(
            select(Session.id).where(Session.user_id == user_id, Session.revoked_at.is_(None))
        )
        session_ids = list(live)
        await self.s.execute(delete(User).where(User.id == user_id))
        return session_ids

    async def set_flags(self, user_id: int, now: datetime, **flags: bool) -> None:
        """Change flags; deactivation also moves the credentials version (see set_password)."""
        values: dict[str, Any] = {"updated_at": now, **flags}
        if flags.get("is_active") is False:
            values["credentials_version"] = User.credentials_version + 1
        await self.s.execute(update(User).where(User.id == user_id).values(**values))

    async def listing(self) -> list[User]:
        return list((await self.s.execute(select(User).order_by(User.id))).scalars())
