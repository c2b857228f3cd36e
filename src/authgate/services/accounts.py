"""Accounts: registration, password reset, email verification, and the operator's commands."""

from __future__ import annotations

from datetime import timedelta

from authgate import events
from authgate.cache.ratelimit import Policy
from authgate.errors import EmailTaken, InvalidOneTimeToken, NotConfigured
from authgate.factors.emails import canonical_email, login_key
from authgate.factors.password_rules import check_new_password
from authgate.mail.delivery import MailSender, Purpose
from authgate.principal import Principal
from authgate.services.context import Services
from authgate.store.models import User
from authgate.store.one_time import TokenStatus, TokenStore
from authgate.store.purge import PurgeResult, purge
from authgate.store.sessions import SessionStore
from authgate.store.users import UserStore, add_user
from authgate.tokens.keys import digest, new_opaque_token

__all__ = ["AccountService", "PurgeResult", "TokenStatus"]


class AccountService:
    def __init__(self, services: Services) -> None:
        self.sv = services

    # --- registration -----------------------------------------------------------------

    async def register(
        self,
        email: str,
        password: str,
        *,
        client_ip: str | None = None,
        is_superuser: bool = False,
        email_verified: bool = False,
    ) -> User:
        """Create an account; `PasswordRejected` (before anything is counted or stored) when
        `password` breaks the password rules."""
        password = check_new_password(password)
        if client_ip is not None:
            await self.sv.limiter.hit(Policy.REGISTER_PER_IP, client_ip)
        self.sv.hashing.check_admission()
        address, key = canonical_email(email)
        password_hash = await self.sv.hashing.hash(password)
        user = await add_user(
            self.sv.db,
            email=address,
            email_key=key,
            password_hash=password_hash,
            is_superuser=is_superuser,
            email_verified=email_verified,
            now=self.sv.clock(),
        )
        if user is None:
            raise EmailTaken()
        events.emit("registered", user_id=user.id)
        return user

    # --- password reset ----------------------------------------------------------------

    async def request_password_reset(self, email: str, *, client_ip: str) -> None:
        """Answer at once; look the account up and mail it in the background.

        The work that differs between a known and an unknown email (a lookup hit, a token
        insert, an SMTP exchange) all happens after the answer, so neither the answer nor
        its timing tells whether the email is registered.
        """
        sender = self._sender("reset")
        await self.sv.limiter.hit(Policy.RESET_PER_IP, client_ip)
        key = login_key(email)
        if key is None:
            return
        self.sv.background.spawn(self._send_reset(key, sender), "password reset mail")

    async def _send_reset(self, key: str, sender: MailSender) -> None:
        async with self.sv.db.read() as s:
            user = await UserStore(s).by_email_key(key)
        if user is None or not user.is_active:
            events.emit("password_reset_requested", outcome="failure", reason="no_account")
            return
        if not await self.sv.limiter.try_hit(Policy.RESET_PER_ACCOUNT, key):
            events.emit(
                "password_reset_requested", outcome="failure", user_id=user.id, reason="limited"
            )
            return
        token = await self._new_token(user.id, "reset", self.sv.config.reset_ttl)
        events.emit("password_reset_requested", user_id=user.id)
        await sender.send(user.email, token)

    async def confirm_password_reset(self, token: str, new_password: str) -> None:
        """Set the password the token was mailed for; `PasswordRejected` (the token unspent)
        when `new_password` breaks the password rules."""
        new_password = check_new_password(new_password)
        token_digest = digest(token)
        now = self.sv.clock()
        # Look before hashing, so random tokens cost a lookup, not an argon2 hash.
        async with self.sv.db.read() as s:
            if await TokenStore(s).peek("reset", token_digest, now) is None:
                raise InvalidOneTimeToken()
        password_hash = await self.sv.hashing.hash(new_password)
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            tokens = TokenStore(s)
            user_id = await tokens.spend("reset", token_digest, now)
            if user_id is None:
                raise InvalidOneTimeToken()
            await UserStore(s).set_password(user_id, password_hash, now)
            await tokens.spend_all(user_id, now, "reset")
            revoked = await SessionStore(s).revoke_all(user_id, now, "password_reset")
        await self.sv.sessions_revoked(revoked)
        events.emit("password_reset_completed", user_id=user_id)
        for sid in revoked:
            events.emit("logged_out", session_id=sid, user_id=user_id, reason="password_reset")

    # --- email verification -----------------------------------------------------------

    async def request_verification(self, user: Principal, *, client_ip: str) -> bool:
        """Mail a verification link; False (and no mail) when the email is already verified."""
        sender = self._sender("verify")
        if user.email_verified:
            return False
        await self.sv.limiter.hit(Policy.VERIFY_PER_IP, client_ip)
        token = await self._new_token(user.id, "verify", self.sv.config.verify_ttl)
        events.emit("verification_requested", user_id=user.id)
        self.sv.background.spawn(sender.send(user.email, token), "verification mail")
        return True

    async def confirm_verification(self, token: str) -> None:
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            tokens = TokenStore(s)
            user_id = await tokens.spend("verify", digest(token), now)
            if user_id is None:
                raise InvalidOneTimeToken()
            await UserStore(s).set_flags(user_id, now, email_verified=True)
            await tokens.spend_all(user_id, now, "verify")
        await self.sv.user_changed(user_id)
        events.emit("verification_completed", user_id=user_id)

    # --- what a mailed link holds -----------------------------------------------------

    async def token_status(self, purpose: Purpose, token: str) -> TokenStatus:
        """`live`, `expired`, `used` or `invalid`: a read-only look at a one-time token of any
        purpose (reset, verify, email_change). Never spends, changes or extends it: the pages
        a mailed link opens call this on GET, which mail scanners send before the person."""
        async with self.sv.db.read() as s:
            return await TokenStore(s).status(purpose, digest(token), self.sv.clock())

    # --- operator commands ------------------------------------------------------------

    async def set_active(self, email: str, active: bool) -> User | None:
        """Flip `is_active`; deactivation also revokes every session. None if no such user."""
        key = login_key(email)
        if key is None:
            return None
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            users = UserStore(s)
            user = await users.by_email_key(key)
            if user is None:
                return None
            await users.set_flags(user.id, now, is_active=active)
            revoked = (
                await SessionStore(s).revoke_all(user.id, now, "deactivated") if not active else []
            )
            await users.reload(user)
        await self.sv.sessions_revoked(revoked)
        await self.sv.user_changed(user.id)
        events.emit("activated" if active else "deactivated", user_id=user.id)
        return user

    async def list_users(self) -> list[User]:
        async with self.sv.db.read() as s:
            return await UserStore(s).listing()

    async def purge(self, batch_size: int = 5000) -> PurgeResult:
        """Delete finished sessions, expired refresh tokens and spent or expired one-time
        tokens, in batches of `batch_size` rows, each its own short transaction: a purge of
        millions of rows never holds a lock for long, and logins and refreshes go on."""
        return await purge(
            self.sv.db,
            self.sv.clock(),
            batch_size,
            audit_retention_days=self.sv.config.audit_retention_days,
        )

    # --- helpers ----------------------------------------------------------------------

    def _sender(self, purpose: Purpose) -> MailSender:
        sender = self.sv.senders[purpose]
        if sender is None:
            raise NotConfigured(
                "Password reset is not configured."
                if purpose == "reset"
                else "Email verification is not configured."
            )
        return sender

    async def _new_token(self, user_id: int, purpose: str, ttl: int) -> str:
        token = new_opaque_token()
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            await TokenStore(s).add(
                user_id=user_id,
                purpose=purpose,
                digest=digest(token),
                now=now,
                expires_at=now + timedelta(seconds=ttl),
            )
        return token
