"""What the admin API reads of users: a search by email in keyset pages, and one user with
whether it has a second factor.

Pages are keyed by the user id (ascending), never by an offset: a user added while an operator
pages through the list gets a higher id than any page already read (ids are never reused:
`sqlite_autoincrement`, a PostgreSQL sequence), so it shows up on a later page, and no user is
seen twice or skipped because others were added or deleted before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.store.models import Passkey, TotpFactor, User

__all__ = ["AdminStore", "UserRow", "like_pattern"]

#: A confirmed authenticator app or any passkey (the same rule as a login's `has_factor`).
_HAS_FACTOR = or_(
    exists().where(TotpFactor.user_id == User.id, TotpFactor.confirmed_at.is_not(None)),
    exists().where(Passkey.user_id == User.id),
).label("has_factor")


@dataclass(frozen=True, slots=True)
class UserRow:
    """A user as the admin API shows it: the row and whether it has a second factor."""

    user: User
    has_factor: bool


def like_pattern(text: str) -> str:
    """`text` as a LIKE substring pattern that matches it literally (`%`, `_` and the escape
    character itself are escaped with a backslash; the query says `ESCAPE '\\'`)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class AdminStore:
    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def page(self, *, query: str | None, after_id: int | None, limit: int) -> list[UserRow]:
        """Up to `limit` users with an id above `after_id`, by id ascending; with `query`,
        only those whose email contains it (case-insensitive: the lower-cased email key)."""
        condition: list[ColumnElement[bool]] = []
        if after_id is not None:
            condition.append(User.id > after_id)
        if query:
            condition.append(User.email_key.like(like_pattern(query.lower()), escape="\\"))
        result = await self.s.execute(
            select(User, _HAS_FACTOR).where(*condition).order_by(User.id).limit(limit)
        )
        return [UserRow(user, bool(has_factor)) for user, has_factor in result.all()]

    async def user(self, user_id: int) -> UserRow | None:
        row = (
            await self.s.execute(select(User, _HAS_FACTOR).where(User.id == user_id))
        ).one_or_none()
        return None if row is None else UserRow(row[0], bool(row[1]))

    async def has_factor(self, user_id: int) -> bool:
        """Whether the user has a second factor (False for no such user)."""
        found = await self.s.scalar(select(_HAS_FACTOR).where(User.id == user_id))
        return bool(found)
