"""One-time tokens: password reset, email verification and email change. Stored by digest
only; spending one is a conditional UPDATE, so of several concurrent spends exactly one
matches a row.
`TokenStore` only flushes: its caller's `db.write()` block commits."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from authgate.store.models import OneTimeToken

__all__ = ["TokenStatus", "TokenStore"]

#: What a one-time token is, as far as a page may tell the person holding the link.
TokenStatus = Literal["live", "expired", "used", "invalid"]


class TokenStore:
    """One-time tokens: password reset, email verification and email change."""

    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def add(
        self,
        *,
        user_id: int,
        purpose: str,
        digest: bytes,
        now: datetime,
        expires_at: datetime,
        new_email: str | None = None,
    ) -> None:
        """A new token; `new_email` is the address an email-change token confirms."""
        self.s.add(
            OneTimeToken(
                user_id=user_id,
                purpose=purpose,
                digest=digest,
                created_at=now,
                expires_at=expires_at,
                new_email=new_email,
            )
        )
        await self.s.flush()

    async def peek(self, purpose: str, digest: bytes, now: datetime) -> int | None:
        """The user id of a live token, without spending it."""
        return await self.s.scalar(select(OneTimeToken.user_id).where(*_live(purpose, digest, now)))

    async def status(self, purpose: str, digest: bytes, now: datetime) -> TokenStatus:
        """What the token is, read-only: a plain SELECT that never spends, changes or extends
        it (the pages a mailed link opens ask this on GET, which mail scanners send). A spent
        token reads as used even once past its expiry; one purged or of another purpose is
        invalid."""
        row = (
            await self.s.execute(
                select(OneTimeToken.used_at, OneTimeToken.expires_at).where(
                    OneTimeToken.digest == digest, OneTimeToken.purpose == purpose
                )
            )
        ).one_or_none()
        if row is None:
            return "invalid"
        if row.used_at is not None:
            return "used"
        return "live" if row.expires_at > now else "expired"

    async def spend(self, purpose: str, digest: bytes, now: datetime) -> int | None:
        """Spend a live token atomically; the user id, or None when none matched."""
        result = await self.s.execute(
            update(OneTimeToken)
            .where(*_live(purpose, digest, now))
            .values(used_at=now)
            .returning(OneTimeToken.user_id)
        )
        return result.scalar_one_or_none()

    async def spend_email_change(self, digest: bytes, now: datetime) -> tuple[int, str] | None:
        """Spend a live email-change token atomically: (user id, the new address), or None."""
        result = await self.s.execute(
            update(OneTimeToken)
            .where(*_live("email_change", digest, now))
            .values(used_at=now)
            .returning(OneTimeToken.user_id, OneTimeToken.new_email)
        )
        row = result.one_or_none()
        if row is None or row.new_email is None:
            return None
        return row.user_id, row.new_email

    async def spend_all(self, user_id: int, now: datetime, *purposes: str) -> None:
        """Spend every outstanding token of the user for these purposes."""
        await self.s.execute(
            update(OneTimeToken)
            .where(
                OneTimeToken.user_id == user_id,
                OneTimeToken.purpose.in_(purposes),
                OneTimeToken.used_at.is_(None),
            )
            .values(used_at=now)
        )


def _live(purpose: str, digest: bytes, now: datetime) -> tuple[ColumnElement[bool], ...]:
    return (
        OneTimeToken.digest == digest,
        OneTimeToken.purpose == purpose,
        OneTimeToken.used_at.is_(None),
        OneTimeToken.expires_at > now,
    )
