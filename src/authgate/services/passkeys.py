"""Passkeys (contract §9): registration and sign-in ceremonies, the user's list.

A ceremony is two requests. The first (`registration_options`, `login_options`) keeps a
challenge under the digest of a random binding value that only the asking browser gets (in a
cookie); the second (`register`, `login`) must bring that value, consumes the challenge in
one statement whether or not what follows succeeds, and then verifies. So a challenge is
used once, within 5 minutes, by the browser that asked for it.

A passkey with user verification proves two factors (something held, unlocked by something
known or being): a sign-in with it is `aal2` on its own, and it is also the second step of a
password login. RFC 8176 method references: "hwk" for a device-bound key, "swk" for a synced
one (its private key leaves the device), and "user" for the verification.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from authgate import events
from authgate.cache.ratelimit import Policy
from authgate.errors import (
    InvalidCredentials,
    NotAuthenticated,
    NotFound,
    PasskeyRejected,
    PasswordRequired,
)
from authgate.factors.passkeys import (
    CeremonyFailed,
    authentication_options,
    parse_assertion,
    registration_options,
    user_handle,
    verify_assertion,
    verify_registration,
)
from authgate.mail.delivery import NoticeKind
from authgate.principal import Client, Level, Principal
from authgate.services.assurance import Assurance
from authgate.services.context import Services
from authgate.services.self_service import SelfService, when
from authgate.services.sessions import IssuedTokens
from authgate.store.factors import FactorStore
from authgate.store.passkeys import PasskeyInfo, PasskeyStore
from authgate.store.sessions import SessionStore
from authgate.tokens.keys import AccessClaims, digest, new_opaque_token

__all__ = ["Ceremony", "PasskeyService"]

_REGISTER = "register"
_LOGIN = "login"


#: One answer for every failed passkey sign-in (unknown credential, bad signature, stale or
#: foreign challenge, counter, another user's pending session): no oracle.
_SIGN_IN_FAILED = "The passkey could not be verified."


@dataclass(frozen=True, slots=True)
class Ceremony:
    """The options for the browser (JSON text) and the binding value for its cookie."""

    options_json: str
    binding: str


def _kind(device_type: str) -> str:
    """RFC 8176: a hardware-bound key, or a software (synced) one."""
    return "swk" if device_type == "multi_device" else "hwk"


class PasskeyService:
    def __init__(self, services: Services, assurance: Assurance) -> None:
        self.sv = services
        self.assurance = assurance
        self._self_service = SelfService(services)

    # --- registration ---------------------------------------------------------------------

    async def registration_options(self, user: Principal) -> Ceremony:
        async with self.sv.db.read() as s:
            exclude = await PasskeyStore(s).credential_ids(user.id)
        options = registration_options(
            self.sv.config, user_id=user.id, email=user.email, exclude=exclude
        )
        return await self._keep(options.json, options.challenge, _REGISTER, user.id)

    async def register(
        self,
        user: Principal,
        session_id: str,
        binding: str | None,
        credential: dict[str, Any],
        name: str,
    ) -> PasskeyInfo:
        """Verify and keep a new passkey. The user's first factor is a change of credentials:
        every other session is revoked and this one is raised to `aal2` (it just proved the
        passkey, with user verification), in the same transaction as the insert."""
        challenge = await self._take(binding, _REGISTER)
        if challenge is None or challenge[0] != user.id:
            self._failed("factor_enrolled", user.id, "challenge_invalid")
            raise PasskeyRejected()
        try:
            new = verify_registration(self.sv.config, credential, challenge[1])
        except CeremonyFailed as exc:
            self._failed("factor_enrolled", user.id, exc.reason)
            raise PasskeyRejected() from None
        now = self.sv.clock()
        revoked: list[str] = []
        async with self.sv.db.write() as s:
            factors = FactorStore(s)
            had_factor = await factors.lock_user(user.id)
            if had_factor is None:
                raise NotAuthenticated()
            added = await PasskeyStore(s).add(
                user.id,
                credential_id=new.credential_id,
                public_key=new.public_key,
                sign_count=new.sign_count,
                device_type=new.device_type,
                backed_up=new.backed_up,
                transports=new.transports,
                name=name,
                now=now,
            )
            if added is None:
                self._failed("factor_enrolled", user.id, "already_registered")
                raise PasskeyRejected("This passkey is registered already.")
            if not had_factor:
                level = Level(2, ("pwd", _kind(new.device_type), "user"))
                revoked, raised = await factors.first_factor_added(user.id, session_id, level, now)
                if not raised:
                    raise NotAuthenticated()  # the session ended meanwhile: nothing is kept
        await self.sv.sessions_revoked(revoked)
        for sid in revoked:
            events.emit("session_revoked", user_id=user.id, session_id=sid, reason="factor_added")
        events.emit("passkey_registered", user_id=user.id, session_id=session_id, factor="passkey")
        events.emit("factor_enrolled", user_id=user.id, session_id=session_id, factor="passkey")
        self._notify("factor_added", user.email, factor="a passkey", changed_at=when(now))
        return added

    # --- the account page ------------------------------------------------------------------

    async def listing(self, user: Principal) -> list[PasskeyInfo]:
        async with self.sv.db.read() as s:
            return await PasskeyStore(s).listing(user.id)

    async def rename(self, user: Principal, passkey_id: int, name: str) -> PasskeyInfo:
        """`NotFound` for an id that is not one of the user's passkeys."""
        async with self.sv.db.write() as s:
            renamed = await PasskeyStore(s).rename(user.id, passkey_id, name)
        if renamed is None:
            raise NotFound("No such passkey.")
        events.emit("passkey_renamed", user_id=user.id, factor="passkey")
        return renamed

    async def remove(
        self,
        user: Principal,
        session_id: str,
        passkey_id: int,
        password: str | None,
        *,
        client_ip: str,
    ) -> None:
        """Remove a passkey, with the password (a wrong one counts as a failed login of the
        account); every other session of the user is revoked, this one goes on."""
        if password is None:
            raise PasswordRequired()
        await self._self_service.prove_password(user, password, client_ip, "factor_removed")
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            if not await PasskeyStore(s).remove(user.id, passkey_id):
                raise NotFound("No such passkey.")
            revoked = await SessionStore(s).revoke_all(
                user.id, now, "factor_removed", keep=session_id
            )
        await self.sv.sessions_revoked(revoked)
        events.emit("factor_removed", user_id=user.id, session_id=session_id, factor="passkey")
        for sid in revoked:
            events.emit("session_revoked", user_id=user.id, session_id=sid, reason="factor_removed")
        self._notify("factor_removed", user.email, factor="a passkey", changed_at=when(now))

    # --- sign-in ----------------------------------------------------------------------------

    async def login_options(self, *, client_ip: str) -> Ceremony:
        # Counted as a login attempt of the address: each one writes a row.
        await self.sv.limiter.hit(Policy.LOGIN_PER_IP, client_ip)
        options = authentication_options(self.sv.config)
        return await self._keep(options.json, options.challenge, _LOGIN, None)

    async def login(
        self,
        binding: str | None,
        credential: dict[str, Any],
        pending: AccessClaims | None,
        client: Client,
    ) -> IssuedTokens:
        """Sign in with a passkey: with `pending` (the request's session, waiting for its
        second step) that session of the same user is raised to `aal2`; without, a new
        `aal2` session opens. Every failure is the same 401."""
        try:
            assertion = parse_assertion(credential)
        except CeremonyFailed:
            raise PasskeyRejected() from None
        event = "mfa_failed" if pending is not None else "login_failed"
        pending_user = pending.user_id if pending is not None else None
        challenge = await self._take(binding, _LOGIN)
        async with self.sv.db.read() as s:
            stored = await PasskeyStore(s).by_credential(assertion.credential_id)
        if challenge is None or stored is None:
            reason = "challenge_invalid" if challenge is None else "unknown_passkey"
            self._failed(event, pending_user, reason)
            raise InvalidCredentials(_SIGN_IN_FAILED)
        handle = assertion.user_handle
        if handle is not None and not hmac.compare_digest(handle, user_handle(stored.user_id)):
            self._failed(event, stored.user_id, "user_handle_mismatch")
            raise InvalidCredentials(_SIGN_IN_FAILED)
        if pending_user is not None and pending_user != stored.user_id:
            self._failed(event, pending_user, "other_user")
            raise InvalidCredentials(_SIGN_IN_FAILED)
        try:
            count, device_type = verify_assertion(
                self.sv.config,
                assertion,
                challenge=challenge[1],
                public_key=stored.public_key,
                sign_count=stored.sign_count,
            )
        except CeremonyFailed as exc:
            self._failed(event, stored.user_id, exc.reason)
            raise InvalidCredentials(_SIGN_IN_FAILED) from None
        async with self.sv.db.write() as s:
            advanced = await PasskeyStore(s).advance(stored.id, count, self.sv.clock())
        if not advanced:
            self._failed(event, stored.user_id, "counter_not_increasing")
            raise InvalidCredentials(_SIGN_IN_FAILED)
        kind = _kind(device_type)
        if pending is not None:
            level = Level(2, ("pwd", kind, "user"))
            try:
                tokens = await self.assurance.step_up(stored.user_id, pending.session_id, level)
            except NotAuthenticated:
                self._failed(event, stored.user_id, "session_over")
                raise
            events.emit(
                "mfa_verified",
                user_id=stored.user_id,
                session_id=tokens.session_id,
                factor="passkey",
            )
        else:
            try:
                tokens = await self.assurance.open_session(
                    stored.user_id, Level(2, (kind, "user")), client
                )
            except NotAuthenticated:
                self._failed(event, stored.user_id, "inactive")
                raise InvalidCredentials(_SIGN_IN_FAILED) from None
            events.emit("login_succeeded", user_id=stored.user_id, session_id=tokens.session_id)
        events.emit(
            "passkey_used", user_id=stored.user_id, session_id=tokens.session_id, factor="passkey"
        )
        return tokens

    # --- helpers ----------------------------------------------------------------------------

    async def _keep(
        self, options_json: str, challenge: bytes, purpose: str, user_id: int | None
    ) -> Ceremony:
        binding = new_opaque_token()
        async with self.sv.db.write() as s:
            await PasskeyStore(s).put_challenge(
                binding=digest(binding),
                purpose=purpose,
                user_id=user_id,
                challenge=challenge,
                now=self.sv.clock(),
            )
        return Ceremony(options_json, binding)

    async def _take(self, binding: str | None, purpose: str) -> tuple[int | None, bytes] | None:
        """Consume the challenge of this browser's binding value, committed before anything
        is verified: a failed attempt spends it too."""
        if not binding:
            return None
        async with self.sv.db.write() as s:
            return await PasskeyStore(s).take_challenge(digest(binding), purpose, self.sv.clock())

    def _failed(self, event: str, user_id: int | None, reason: str) -> None:
        events.emit(event, outcome="failure", user_id=user_id, reason=reason, factor="passkey")

    def _notify(self, kind: NoticeKind, email: str, **context: str) -> None:
        self._self_service.notify(kind, email, **context)
