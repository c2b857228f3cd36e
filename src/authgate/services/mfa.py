"""TOTP and recovery codes (contract §9): enrolment, the second step, removal.

- **Enrolment** is pending until a correct code confirms it; a pending factor changes nothing
  at login. Confirming the user's *first* factor is a change of credentials: in one
  transaction the user row is locked, its credentials version moves, every other session is
  revoked and the enrolling session goes on at `aal2`. Later enrolments change no session.
- **A code is accepted once**: the time step it matched is accepted by one conditional UPDATE
  (`FactorStore.accept_step`), so a replay, even within the 90 s window and even racing, is
  refused. A recovery code is spent the same way.
- **Lock-out**: a failure slot of `MFA_FAILURES_PER_ACCOUNT` (5 per 15 minutes by default) is
  reserved *before* any code is checked, confirm and verify alike: a burst tests exactly the
  budget, and when it is spent even a right code gets 429. A success gives its slot back.
- **Verify** accepts any live session of a user with an enabled factor: a pending one (the
  second step of a login) and one that is not (a step-up). The session keeps its methods and
  gains "otp" (RFC 8176: TOTP and recovery codes are both one-time passwords) at `aal2`.
- Removing the factor or making new recovery codes asks for the password again, with the
  same failed-login slot as self-service (`SelfService.prove_password`).

No code, secret or URI is ever in an event, a log line or an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from authgate import events
from authgate.cache.ratelimit import Policy
from authgate.errors import Conflict, InvalidCode, NotAuthenticated, NotFound
from authgate.factors import recovery, totp
from authgate.factors.sealing import SealError
from authgate.principal import Level, Principal
from authgate.services.assurance import Assurance
from authgate.services.context import Services
from authgate.services.self_service import SelfService, when
from authgate.services.sessions import IssuedTokens
from authgate.store.factors import FactorStatus, FactorStore, TotpRow
from authgate.store.sessions import SessionStore

__all__ = ["MfaService", "TotpEnrolment"]

logger = logging.getLogger("authgate")

#: The level of a password session that proved a one-time password as well (RFC 8176).
PASSWORD_AND_OTP = Level(2, ("pwd", "otp"))
_APP = "an authenticator app"


@dataclass(frozen=True, slots=True)
class TotpEnrolment:
    secret: str = field(repr=False)
    otpauth_uri: str = field(repr=False)
    qr_svg: str = field(repr=False)


def _context(user_id: int) -> bytes:
    """The associated data of a user's sealed secret: it opens in no other row."""
    return b"totp:%d" % user_id


class MfaService:
    def __init__(self, services: Services, assurance: Assurance) -> None:
        self.sv = services
        self.assurance = assurance
        # The password proof and the notices of self-service: one lock-out slot for every
        # step that asks for the password again.
        self._account = SelfService(services)

    async def status(self, user: Principal) -> FactorStatus:
        async with self.sv.db.read() as s:
            return await FactorStore(s).status(user.id)

    # --- enrolment ----------------------------------------------------------------------

    async def enrol_totp(self, user: Principal) -> TotpEnrolment:
        """A new pending secret (replacing a pending one); `Conflict` when TOTP is enabled."""
        secret = totp.new_secret()
        sealed = self.sv.sealer.seal(secret.encode("ascii"), _context(user.id))
        async with self.sv.db.write() as s:
            factors = FactorStore(s)
            if await factors.lock_user(user.id) is None:
                raise NotAuthenticated()
            if not await factors.put_pending(user.id, sealed, self.sv.clock()):
                raise Conflict("An authenticator app is already enabled; remove it first.")
        uri = totp.otpauth_uri(secret, user.email, self.sv.config.product_name)
        return TotpEnrolment(secret, uri, totp.qr_svg(uri))

    async def confirm_totp(self, user: Principal, session_id: str, code: str) -> list[str]:
        """Pending → enabled with a correct code; the new recovery codes (shown once)."""
        async with self.sv.db.read() as s:
            row = await FactorStore(s).totp(user.id)
        if row is None or row.confirmed:
            raise Conflict("No authenticator app enrolment is pending.")
        slot = await self.sv.limiter.reserve(Policy.MFA_FAILURES_PER_ACCOUNT, str(user.id))
        now = self.sv.clock()
        step, resealed = self._match(user.id, row, code)
        if step is None:
            events.emit(
                "factor_enrolled",
                outcome="failure",
                user_id=user.id,
                session_id=session_id,
                reason="invalid_code",
                factor="totp",
            )
            raise InvalidCode()
        codes = recovery.new_codes()
        async with self.sv.db.write() as s:
            factors = FactorStore(s)
            had_factor = await factors.lock_user(user.id)
            confirmed = had_factor is not None and await factors.confirm(
                user.id, row.secret_sealed, step, now
            )
            if not confirmed:
                # A right code, but the enrolment changed meanwhile (removed, replaced,
                # confirmed by a racing request): no failure of the user's.
                await slot.give_back()
                raise Conflict("The enrolment changed meanwhile; start it again.")
            if resealed is not None:
                await factors.reseal(user.id, row.secret_sealed, resealed)
            await factors.replace_codes(user.id, [recovery.digest_code(c) for c in codes], now)
            revoked: list[str] = []
            if not had_factor:
                # The first factor is a change of credentials: whoever held another session
                # with the password alone loses it.
                revoked, _ = await factors.first_factor_added(
                    user.id, session_id, PASSWORD_AND_OTP, now
                )
        await slot.give_back()
        await self.sv.sessions_revoked(revoked)
        events.emit("factor_enrolled", user_id=user.id, session_id=session_id, factor="totp")
        for sid in revoked:
            events.emit("session_revoked", user_id=user.id, session_id=sid, reason="factor_added")
        self._account.notify("factor_added", user.email, factor=_APP, changed_at=when(now))
        return codes

    # --- removal and new recovery codes -------------------------------------------------

    async def remove_totp(
        self, user: Principal, session_id: str, password: str, *, client_ip: str
    ) -> None:
        """Remove the factor and its recovery codes; every other session is revoked."""
        await self._account.prove_password(user, password, client_ip, "factor_removed")
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            row = await FactorStore(s).totp(user.id)
            if row is None or not await FactorStore(s).delete_totp(user.id):
                raise NotFound("No authenticator app is enrolled.")
            revoked = await SessionStore(s).revoke_all(
                user.id, now, "factor_removed", keep=session_id
            )
        await self.sv.sessions_revoked(revoked)
        events.emit("factor_removed", user_id=user.id, session_id=session_id, factor="totp")
        for sid in revoked:
            events.emit("session_revoked", user_id=user.id, session_id=sid, reason="factor_removed")
        if row.confirmed:
            self._account.notify("factor_removed", user.email, factor=_APP, changed_at=when(now))

    async def regenerate_recovery_codes(
        self, user: Principal, password: str, *, client_ip: str
    ) -> list[str]:
        """A new set of recovery codes (the old set dies); needs an enabled TOTP factor."""
        async with self.sv.db.read() as s:
            row = await FactorStore(s).totp(user.id)
        if row is None or not row.confirmed:
            raise Conflict("Recovery codes come with an enabled authenticator app.")
        await self._account.prove_password(user, password, client_ip, "recovery_codes_regenerated")
        codes = recovery.new_codes()
        async with self.sv.db.write() as s:
            factors = FactorStore(s)
            current = await factors.totp(user.id)
            if current is None or not current.confirmed:
                raise Conflict("Recovery codes come with an enabled authenticator app.")
            digests = [recovery.digest_code(c) for c in codes]
            await factors.replace_codes(user.id, digests, self.sv.clock())
        events.emit("recovery_codes_regenerated", user_id=user.id, factor="recovery_code")
        return codes

    # --- the second step ----------------------------------------------------------------

    async def verify(
        self,
        user: Principal,
        session_id: str,
        level: Level,
        *,
        code: str | None = None,
        recovery_code: str | None = None,
    ) -> IssuedTokens:
        """The session at `aal2` with "otp" among its methods, its tokens re-issued; exactly
        one of `code` (TOTP) and `recovery_code`. `InvalidCode` for a wrong, malformed or
        replayed code; `RateLimited` once the account's failures are spent."""
        factor = "totp" if code is not None else "recovery_code"
        slot = await self.sv.limiter.reserve(Policy.MFA_FAILURES_PER_ACCOUNT, str(user.id))
        if code is not None:
            ok = await self._accept_totp(user.id, code)
        else:
            assert recovery_code is not None
            ok = await self._spend_recovery_code(user, session_id, recovery_code)
        if not ok:
            events.emit(
                "mfa_failed",
                outcome="failure",
                user_id=user.id,
                session_id=session_id,
                reason="invalid_code",
                factor=factor,
            )
            raise InvalidCode()
        await slot.give_back()
        amr = (*level.amr, *(() if "otp" in level.amr else ("otp",)))
        tokens = await self.assurance.step_up(user.id, session_id, Level(2, amr))
        events.emit("mfa_verified", user_id=user.id, session_id=session_id, factor=factor)
        return tokens

    async def _accept_totp(self, user_id: int, code: str) -> bool:
        async with self.sv.db.read() as s:
            row = await FactorStore(s).totp(user_id)
        if row is None or not row.confirmed:
            return False
        step, resealed = self._match(user_id, row, code)
        if step is None:
            return False
        async with self.sv.db.write() as s:
            factors = FactorStore(s)
            if not await factors.accept_step(user_id, step):
                return False  # replayed: this step (or a later one) was accepted already
            if resealed is not None:
                await factors.reseal(user_id, row.secret_sealed, resealed)
        return True

    async def _spend_recovery_code(self, user: Principal, session_id: str, typed: str) -> bool:
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            factors = FactorStore(s)
            if not await factors.spend_code(user.id, recovery.digest_code(typed), now):
                return False
            remaining = await factors.codes_remaining(user.id)
        events.emit(
            "recovery_code_used", user_id=user.id, session_id=session_id, factor="recovery_code"
        )
        self._account.notify(
            "recovery_code_used", user.email, changed_at=when(now), remaining=str(remaining)
        )
        return True

    def _match(self, user_id: int, row: TotpRow, code: str) -> tuple[int | None, bytes | None]:
        """(the step `code` matches or None, the secret sealed again under the current key
        when a previous key opened it)."""
        try:
            secret, previous = self.sv.sealer.open(row.secret_sealed, _context(user_id))
        except SealError:
            # No key we hold opens it (the secret key changed without _PREVIOUS): the factor
            # cannot be used until it is removed and enrolled again.
            logger.error("a TOTP secret does not open with any configured key")
            return None, None
        step = totp.matching_step(secret.decode("ascii"), code, self.sv.clock())
        resealed = self.sv.sealer.seal(secret, _context(user_id)) if previous else None
        return step, resealed
