"""Second factors in the database: the TOTP factor of a user and its recovery codes.

`FactorStore` takes a session and only flushes; its caller's `db.write()` block commits.
The two single-use rules are each one conditional UPDATE, so the database decides between
racing requests (PostgreSQL re-checks the WHERE clause on the row it waited for; SQLite has
one writer at a time):

- a TOTP time step is accepted once: `last_step` only moves forward (`accept_step`);
- a recovery code is spent once: `used_at` is set only while it is NULL (`spend_code`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from sqlalchemy import delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.principal import Level
from authgate.store.levels import raise_level
from authgate.store.models import Passkey, RecoveryCode, TotpFactor, User
from authgate.store.sessions import SessionStore

__all__ = ["FactorStatus", "FactorStore", "TotpRow"]


@dataclass(frozen=True, slots=True)
class TotpRow:
    secret_sealed: bytes = field(repr=False)
    confirmed: bool
    last_step: int | None


@dataclass(frozen=True, slots=True)
class FactorStatus:
    totp: Literal["none", "pending", "enabled"]
    recovery_codes_remaining: int
    passkeys: int


class FactorStore:
    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    # --- the user row -------------------------------------------------------------------

    async def lock_user(self, user_id: int) -> bool | None:
        """Lock the user's row until the transaction ends (PostgreSQL `FOR UPDATE`; SQLite's
        writer is alone anyway) and say whether it has a confirmed factor; None: no user.
        Two first enrolments of one user then run one after the other, and only the first is
        the first."""
        found = await self.s.scalar(select(User.id).where(User.id == user_id).with_for_update())
        if found is None:
            return None
        return await self.has_factor(user_id)

    async def has_factor(self, user_id: int) -> bool:
        """A confirmed TOTP factor or any passkey (what makes a password login pending)."""
        query = select(
            or_(
                exists().where(TotpFactor.user_id == user_id, TotpFactor.confirmed_at.is_not(None)),
                exists().where(Passkey.user_id == user_id),
            )
        )
        return bool(await self.s.scalar(query))

    async def bump_credentials(self, user_id: int, now: datetime) -> None:
        """A change of credentials: sessions opened before it no longer rotate, but the one
        that `SessionStore.follow_credentials` brings along."""
        await self.s.execute(
            update(User)
            .where(User.id == user_id)
            .values(credentials_version=User.credentials_version + 1, updated_at=now)
        )

    async def first_factor_added(
        self, user_id: int, session_id: str, level: Level, now: datetime
    ) -> tuple[list[str], bool]:
        """The first factor of a user is a change of credentials, in the caller's transaction
        (with the user row locked by `lock_user`): whoever held another session with the
        password alone loses it, and the session that added the factor goes on at `level`.
        (the ids of the sessions revoked, whether the current session was raised)."""
        await self.bump_credentials(user_id, now)
        sessions = SessionStore(self.s)
        await sessions.follow_credentials(session_id, user_id)
        revoked = await sessions.revoke_all(user_id, now, "factor_added", keep=session_id)
        return revoked, await raise_level(self.s, session_id, user_id, level, now)

    # --- TOTP ---------------------------------------------------------------------------

    async def totp(self, user_id: int) -> TotpRow | None:
        row = (
            await self.s.execute(
                select(
                    TotpFactor.secret_sealed, TotpFactor.confirmed_at, TotpFactor.last_step
                ).where(TotpFactor.user_id == user_id)
            )
        ).one_or_none()
        if row is None:
            return None
        return TotpRow(row.secret_sealed, row.confirmed_at is not None, row.last_step)

    async def put_pending(self, user_id: int, sealed: bytes, now: datetime) -> bool:
        """A new pending factor, replacing a pending one; False (nothing written) when the
        user's factor is confirmed (the primary key decides under any race)."""
        await self.s.execute(
            delete(TotpFactor).where(
                TotpFactor.user_id == user_id, TotpFactor.confirmed_at.is_(None)
            )
        )
        try:
            async with self.s.begin_nested():
                await self.s.execute(
                    insert(TotpFactor).values(user_id=user_id, secret_sealed=sealed, created_at=now)
                )
        except IntegrityError:
            return False
        return True

    async def confirm(self, user_id: int, sealed: bytes, step: int, now: datetime) -> bool:
        """Pending → confirmed, with `step` as its first accepted step. Only while the pending
        secret is still `sealed` (the one the code was checked against: a new enrolment that
        committed meanwhile is not confirmed by a code of the old one). False: nothing written."""
        result = await self.s.execute(
            update(TotpFactor)
            .where(
                TotpFactor.user_id == user_id,
                TotpFactor.confirmed_at.is_(None),
                TotpFactor.secret_sealed == sealed,
            )
            .values(confirmed_at=now, last_step=step)
            .returning(TotpFactor.user_id)
        )
        return result.scalar_one_or_none() is not None

    async def accept_step(self, user_id: int, step: int) -> bool:
        """Accept a code of time `step` for the confirmed factor, once: True for exactly one
        of any number of racing requests with codes of this step; False for a step at or
        before the last accepted one (a replay, or an older code after a newer one)."""
        result = await self.s.execute(
            update(TotpFactor)
            .where(
                TotpFactor.user_id == user_id,
                TotpFactor.confirmed_at.is_not(None),
                or_(TotpFactor.last_step.is_(None), TotpFactor.last_step < step),
            )
            .values(last_step=step)
            .returning(TotpFactor.user_id)
        )
        return result.scalar_one_or_none() is not None

    async def reseal(self, user_id: int, old: bytes, new: bytes) -> None:
        """The secret sealed again under the current key (after a key rotation), unless the
        row changed meanwhile."""
        await self.s.execute(
            update(TotpFactor)
            .where(TotpFactor.user_id == user_id, TotpFactor.secret_sealed == old)
            .values(secret_sealed=new)
        )

    async def delete_totp(self, user_id: int) -> bool:
        """Remove the factor (pending or confirmed) and every recovery code; False: none."""
        result = await self.s.execute(
            delete(TotpFactor).where(TotpFactor.user_id == user_id).returning(TotpFactor.user_id)
        )
        removed = result.scalar_one_or_none() is not None
        await self.s.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user_id))
        return removed

    # --- recovery codes -----------------------------------------------------------------

    async def replace_codes(self, user_id: int, digests: list[bytes], now: datetime) -> None:
        """The user's recovery codes become exactly `digests` (the old set dies)."""
        await self.s.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user_id))
        await self.s.execute(
            insert(RecoveryCode),
            [{"user_id": user_id, "digest": d, "created_at": now} for d in digests],
        )

    async def spend_code(self, user_id: int, digest: bytes, now: datetime) -> bool:
        """Spend the user's unused code with `digest`: True for exactly one of any number of
        racing requests with it; False for an unknown, another user's or a used code."""
        result = await self.s.execute(
            update(RecoveryCode)
            .where(
                RecoveryCode.user_id == user_id,
                RecoveryCode.digest == digest,
                RecoveryCode.used_at.is_(None),
            )
            .values(used_at=now)
            .returning(RecoveryCode.id)
        )
        return result.scalar_one_or_none() is not None

    async def codes_remaining(self, user_id: int) -> int:
        count = await self.s.scalar(
            select(func.count())
            .select_from(RecoveryCode)
            .where(RecoveryCode.user_id == user_id, RecoveryCode.used_at.is_(None))
        )
        return int(count or 0)

    # --- the account page ---------------------------------------------------------------

    async def status(self, user_id: int) -> FactorStatus:
        row = await self.totp(user_id)
        totp: Literal["none", "pending", "enabled"] = (
            "none" if row is None else "enabled" if row.confirmed else "pending"
        )
        passkeys = await self.s.scalar(
            select(func.count()).select_from(Passkey).where(Passkey.user_id == user_id)
        )
        return FactorStatus(totp, await self.codes_remaining(user_id), int(passkeys or 0))
