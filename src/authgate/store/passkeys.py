"""Passkeys in the database: a user's WebAuthn credentials, and the outstanding ceremonies.

`PasskeyStore` takes a session and only flushes; its caller's `db.write()` block commits.
Every read or change of a user's passkeys is scoped to that user: another user's passkey id
is as unknown as one that never existed. Two rules are single statements, so the database
decides between racing requests (PostgreSQL re-checks the WHERE clause on the row it waited
for; SQLite has one writer at a time):

- a challenge is used once: `take_challenge` deletes it and returns it in one statement,
  whether or not the verification that follows succeeds;
- a signature counter never goes backwards: `advance` moves it only upwards (or leaves an
  authenticator without a counter at 0), and no row changed means the assertion is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.store.models import Passkey, WebAuthnChallenge

__all__ = ["CHALLENGE_TTL", "PasskeyInfo", "PasskeyStore", "StoredPasskey"]

#: A ceremony's challenge lives 5 minutes (contract §9), as long as the browser's timeout.
CHALLENGE_TTL = timedelta(seconds=300)


@dataclass(frozen=True, slots=True)
class PasskeyInfo:
    """A passkey as the account page lists it."""

    id: int
    name: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class StoredPasskey:
    """What a sign-in needs of the passkey its credential id names."""

    id: int
    user_id: int
    public_key: bytes
    sign_count: int
    device_type: str


_INFO = (Passkey.id, Passkey.name, Passkey.created_at, Passkey.last_used_at)


class PasskeyStore:
    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    # --- a user's passkeys ----------------------------------------------------------------

    async def add(
        self,
        user_id: int,
        *,
        credential_id: bytes,
        public_key: bytes,
        sign_count: int,
        device_type: str,
        backed_up: bool,
        transports: str | None,
        name: str,
        now: datetime,
    ) -> PasskeyInfo | None:
        """The new passkey; None when its credential id is registered already (to anyone)."""
        try:
            async with self.s.begin_nested():
                new_id = await self.s.scalar(
                    insert(Passkey)
                    .values(
                        user_id=user_id,
                        credential_id=credential_id,
                        public_key=public_key,
                        sign_count=sign_count,
                        device_type=device_type,
                        backed_up=backed_up,
                        transports=transports,
                        name=name,
                        created_at=now,
                    )
                    .returning(Passkey.id)
                )
        except IntegrityError:
            return None
        assert new_id is not None
        return PasskeyInfo(new_id, name, now, None)

    async def listing(self, user_id: int) -> list[PasskeyInfo]:
        """The user's passkeys, oldest first."""
        result = await self.s.execute(
            select(*_INFO).where(Passkey.user_id == user_id).order_by(Passkey.id)
        )
        return [PasskeyInfo(*row) for row in result.all()]

    async def credential_ids(self, user_id: int) -> list[bytes]:
        """The user's credential ids (registration excludes them)."""
        result = await self.s.execute(
            select(Passkey.credential_id).where(Passkey.user_id == user_id)
        )
        return list(result.scalars())

    async def rename(self, user_id: int, passkey_id: int, name: str) -> PasskeyInfo | None:
        """Rename the user's passkey; None for any other id."""
        row = (
            await self.s.execute(
                update(Passkey)
                .where(Passkey.id == passkey_id, Passkey.user_id == user_id)
                .values(name=name)
                .returning(*_INFO)
            )
        ).one_or_none()
        return PasskeyInfo(*row) if row is not None else None

    async def remove(self, user_id: int, passkey_id: int) -> bool:
        """Delete the user's passkey; False for any other id."""
        result = await self.s.execute(
            delete(Passkey)
            .where(Passkey.id == passkey_id, Passkey.user_id == user_id)
            .returning(Passkey.id)
        )
        return result.scalar_one_or_none() is not None

    # --- sign-in ------------------------------------------------------------------------

    async def by_credential(self, credential_id: bytes) -> StoredPasskey | None:
        row = (
            await self.s.execute(
                select(
                    Passkey.id,
                    Passkey.user_id,
                    Passkey.public_key,
                    Passkey.sign_count,
                    Passkey.device_type,
                ).where(Passkey.credential_id == credential_id)
            )
        ).one_or_none()
        return StoredPasskey(*row) if row is not None else None

    async def advance(self, passkey_id: int, sign_count: int, now: datetime) -> bool:
        """Record a verified assertion's counter and use: only when it grew, or both it and
        the stored one are 0 (an authenticator without a counter; WebAuthn §6.1.1). False:
        a counter that went backwards or stood still (a cloned authenticator, or a racing
        replay of the same assertion), and nothing changed."""
        result = await self.s.execute(
            update(Passkey)
            .where(
                Passkey.id == passkey_id,
                # `sign_count < :new OR (:new = 0 AND sign_count = 0)`, the second half decided
                # here since :new is known (no stored counter is negative).
                Passkey.sign_count < sign_count if sign_count > 0 else Passkey.sign_count == 0,
            )
            .values(sign_count=sign_count, last_used_at=now)
            .returning(Passkey.id)
        )
        return result.scalar_one_or_none() is not None

    # --- ceremonies -----------------------------------------------------------------------

    async def put_challenge(
        self,
        *,
        binding: bytes,
        purpose: str,
        user_id: int | None,
        challenge: bytes,
        now: datetime,
    ) -> None:
        """Keep a ceremony's challenge under `binding` (the digest of the browser's cookie
        value) until `now + CHALLENGE_TTL`."""
        await self.s.execute(
            insert(WebAuthnChallenge).values(
                binding=binding,
                purpose=purpose,
                user_id=user_id,
                challenge=challenge,
                created_at=now,
                expires_at=now + CHALLENGE_TTL,
            )
        )

    async def take_challenge(
        self, binding: bytes, purpose: str, now: datetime
    ) -> tuple[int | None, bytes] | None:
        """Consume the challenge bound to `binding` for `purpose`: (its user id, the challenge),
        deleted in the same statement; None when there is none or it expired (gone as well)."""
        row = (
            await self.s.execute(
                delete(WebAuthnChallenge)
                .where(WebAuthnChallenge.binding == binding, WebAuthnChallenge.purpose == purpose)
                .returning(
                    WebAuthnChallenge.user_id,
                    WebAuthnChallenge.challenge,
                    WebAuthnChallenge.expires_at,
                )
            )
        ).one_or_none()
        if row is None or row.expires_at <= now:
            return None
        return row.user_id, row.challenge
