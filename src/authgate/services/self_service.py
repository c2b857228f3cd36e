"""Self-service accounts (contract §5): a signed-in user's sessions, password change, email
change with double opt-in, and deleting the account.

Every step that changes credentials or the account asks for the password again, and a wrong
one counts as a failed login of that account (the same lock-out, `RateLimiter.login_attempt`):
a stolen access token cannot be turned into a password oracle.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from authgate import events
from authgate.cache.ratelimit import Policy
from authgate.errors import (
    BadRequest,
    EmailTaken,
    InvalidOneTimeToken,
    NotAuthenticated,
    NotConfigured,
    NotFound,
    WrongPassword,
)
from authgate.factors.emails import EmailProblem, canonical_email
from authgate.factors.password_rules import check_new_password, normalise
from authgate.mail.delivery import MailSender, NoticeKind
from authgate.principal import Principal, SessionInfo
from authgate.services.context import Services
from authgate.store.one_time import TokenStore
from authgate.store.sessions import SessionStore
from authgate.store.users import Credentials, UserStore
from authgate.tokens.keys import digest, new_opaque_token

__all__ = ["SelfService", "when"]

#: A session id as `new_session_id` makes them; anything else is no session (404, unread).
_SESSION_ID = re.compile(r"[0-9A-Za-z_-]{16,64}")


class SelfService:
    def __init__(self, services: Services) -> None:
        self.sv = services

    # --- sessions ---------------------------------------------------------------------

    async def sessions(self, user_id: int) -> list[SessionInfo]:
        """The user's live sessions, newest first."""
        async with self.sv.db.read() as s:
            return await SessionStore(s).live(user_id, self.sv.clock())

    async def revoke_session(self, user_id: int, session_id: str) -> None:
        """Revoke one of the user's live sessions; `NotFound` for any other id (unknown and
        someone else's alike)."""
        if not _SESSION_ID.fullmatch(session_id):
            raise NotFound("No such session.")
        await self._revoke(user_id, session_id=session_id)

    async def revoke_other_sessions(self, user_id: int, current: str) -> int:
        """Revoke every live session of the user but `current`; how many."""
        return len(await self._revoke(user_id, keep=current))

    async def _revoke(
        self, user_id: int, *, session_id: str | None = None, keep: str | None = None
    ) -> list[str]:
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            revoked = await SessionStore(s).revoke_live(
                user_id, now, "user", session_id=session_id, keep=keep
            )
        if session_id is not None and not revoked:
            raise NotFound("No such session.")
        await self.sv.sessions_revoked(revoked)
        for sid in revoked:
            events.emit("session_revoked", user_id=user_id, session_id=sid, reason="user")
        return revoked

    # --- password change --------------------------------------------------------------

    async def change_password(
        self,
        user: Principal,
        session_id: str,
        current_password: str,
        new_password: str,
        *,
        client_ip: str,
    ) -> None:
        """Replace the password; the session `session_id` goes on, every other session of
        the user is revoked and outstanding reset and email-change tokens die.
        `PasswordRejected` (nothing counted) when `new_password` breaks the rules."""
        new_password = check_new_password(new_password)
        event = "password_changed"
        # The new password is hashed whether or not the current one is right: the same
        # argon2 work on every path.
        proof, new_hash = await self.prove_password(
            user, current_password, client_ip, event, new_password
        )
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            # A compare-and-swap on the hash just verified: a reset or another change that
            # committed meanwhile wins, and this one proved a password that is no longer it.
            assert new_hash is not None
            if not await UserStore(s).replace_password(
                proof.user_id, proof.password_hash, new_hash, now
            ):
                raise WrongPassword()
            sessions = SessionStore(s)
            await sessions.follow_credentials(session_id, proof.user_id)
            revoked = await sessions.revoke_all(
                proof.user_id, now, "password_changed", keep=session_id
            )
            await TokenStore(s).spend_all(proof.user_id, now, "reset", "email_change")
        await self.sv.sessions_revoked(revoked)
        events.emit(event, user_id=proof.user_id, session_id=session_id)
        for sid in revoked:
            events.emit(
                "session_revoked", user_id=proof.user_id, session_id=sid, reason="password_changed"
            )
        self.notify("password_changed", user.email, changed_at=when(now))

    # --- email change -----------------------------------------------------------------

    async def request_email_change(
        self, user: Principal, new_email: str, password: str, *, client_ip: str
    ) -> None:
        """Mail a confirmation link to `new_email` and a notice to the current address;
        nothing changes until the link is followed (`confirm_email_change`)."""
        sender = self._email_change_sender()
        try:
            address, key = canonical_email(new_email)
        except EmailProblem as exc:
            raise BadRequest(f"Invalid email address: {exc}") from None
        event = "email_change_requested"
        proof, _ = await self.prove_password(user, password, client_ip, event)
        async with self.sv.db.read() as s:
            taken = await UserStore(s).email_key_taken(key)
        if taken:
            events.emit(event, outcome="failure", user_id=proof.user_id, reason="email_taken")
            raise EmailTaken()
        await self.sv.limiter.hit(Policy.EMAIL_CHANGE_PER_ACCOUNT, str(proof.user_id))
        token = new_opaque_token()
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            tokens = TokenStore(s)
            # Only the newest link works.
            await tokens.spend_all(proof.user_id, now, "email_change")
            await tokens.add(
                user_id=proof.user_id,
                purpose="email_change",
                digest=digest(token),
                now=now,
                expires_at=now + timedelta(seconds=self.sv.config.email_change_ttl),
                new_email=address,
            )
        events.emit(event, user_id=proof.user_id)
        self.sv.background.spawn(sender.send(address, token), "email change mail")
        self.notify("email_change_requested", user.email, new_email=address)

    async def confirm_email_change(self, token: str) -> None:
        """The account's address becomes the one the token was mailed to, verified.
        `EmailTaken` (the token unspent) when another account took the address meanwhile."""
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            tokens = TokenStore(s)
            spent = await tokens.spend_email_change(digest(token), now)
            if spent is None:
                raise InvalidOneTimeToken()
            user_id, address = spent
            try:
                address, key = canonical_email(address)
            except EmailProblem:
                raise InvalidOneTimeToken() from None
            if not await UserStore(s).change_email(user_id, address, key, now):
                events.emit(
                    "email_change_completed",
                    outcome="failure",
                    user_id=user_id,
                    reason="email_taken",
                )
                raise EmailTaken()
            # Links mailed to the old address (or to another new one) die with it.
            await tokens.spend_all(user_id, now, "email_change", "reset", "verify")
        await self.sv.user_changed(user_id)
        events.emit("email_change_completed", user_id=user_id)

    # --- deletion ---------------------------------------------------------------------

    async def delete_account(self, user: Principal, password: str, *, client_ip: str) -> None:
        """Delete the account, its sessions and every token, in one transaction."""
        event = "account_deleted"
        proof, _ = await self.prove_password(user, password, client_ip, event)
        async with self.sv.db.write() as s:
            revoked = await UserStore(s).delete(proof.user_id)
        await self.sv.sessions_revoked(revoked)
        await self.sv.user_changed(proof.user_id)
        events.emit(event, user_id=proof.user_id)

    # --- helpers ----------------------------------------------------------------------

    async def prove_password(
        self,
        user: Principal,
        password: str,
        client_ip: str,
        event: str,
        then_hash: str | None = None,
    ) -> tuple[Credentials, str | None]:
        """Verify the signed-in user's password as a login would (admission, the failed-login
        slot, one argon2 verification); `WrongPassword` when it is wrong. With `then_hash`,
        also hash that password, right or wrong, and return the hash."""
        hashing = self.sv.hashing
        hashing.check_admission()
        async with self.sv.db.read() as s:
            found = await UserStore(s).credentials_of(user.id)
        if found is None:
            raise NotAuthenticated()  # deleted meanwhile
        proof, email_key = found
        attempt = await self.sv.limiter.login_attempt(email_key, proof.version, client_ip)
        try:
            ok = await hashing.verify(proof.password_hash, normalise(password))
            new_hash = await hashing.hash(then_hash) if then_hash is not None else None
        except BaseException:
            await attempt.give_back()
            raise
        if not ok:
            events.emit(event, outcome="failure", user_id=user.id, reason="wrong_password")
            raise WrongPassword()
        await attempt.succeeded()
        return proof, new_hash

    def _email_change_sender(self) -> MailSender:
        sender = self.sv.senders["email_change"]
        if sender is None:
            raise NotConfigured("Email change is not configured.")
        return sender

    def notify(self, kind: NoticeKind, email: str, **context: str) -> None:
        """A notice to the account's address, after the answer; none without SMTP."""
        notices = self.sv.notices
        if notices is not None:
            self.sv.background.spawn(notices.send(kind, email, **context), f"{kind} notice")


def when(moment: datetime) -> str:
    """A moment as the notice mails say it ("2026-11-23 14:05 UTC")."""
    return moment.strftime("%Y-%m-%d %H:%M UTC")
