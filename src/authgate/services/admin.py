"""The admin API's flows (contract §10): find, create, change and delete users and end their
sessions, for a superuser or the holder of `AUTHGATE_ADMIN_TOKEN` (the `Actor`).

Every change is an `admin_*` event naming the actor, with `user_id` the user acted on.
Deactivation and deletion reach access tokens at once, as the operator's command does: the
sessions are revoked in the same transaction, and after the commit every worker's copy of
the sessions and of the user is dropped (`Services.sessions_revoked`, `user_changed`).

Cursors are opaque: the last id of a page and a MAC over it, the listing it belongs to and
its filters, under a key derived from the secret key. A cursor that was altered, or that
belongs to another listing or other filters, is a 400, never a query.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime

from authgate import events
from authgate.errors import BadRequest, Conflict, NotFound
from authgate.principal import SessionInfo
from authgate.services.accounts import AccountService
from authgate.services.context import Services
from authgate.store.admin import AdminStore, UserRow
from authgate.store.audit import AuditRow, AuditStore
from authgate.store.sessions import SessionStore
from authgate.store.users import UserStore

__all__ = ["Actor", "AdminService", "Cursors", "UserDetail"]

#: Largest id a cursor or a path may name: a signed 64-bit integer (both databases' ids).
MAX_ID = 2**63 - 1
_ID_BYTES = 8
_MAC_BYTES = 16
#: 24 bytes in unpadded base64url.
_CURSOR = re.compile(r"[A-Za-z0-9_-]{32}")


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts through the admin API: a superuser (`user_id`) or the admin token (None)."""

    user_id: int | None

    @property
    def label(self) -> str:
        """The events' `actor`: "user:<id>" or "admin_token" (never the token itself)."""
        return "admin_token" if self.user_id is None else f"user:{self.user_id}"


@dataclass(frozen=True, slots=True)
class UserDetail:
    row: UserRow
    sessions: list[SessionInfo]


class Cursors:
    """Opaque, tamper-evident keyset cursors: base64url(last id ‖ MAC(listing, filters, id))."""

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, b"authgate/admin-cursor/v1", hashlib.sha256).digest()

    def _mac(self, listing: str, filters: str, last_id: int) -> bytes:
        message = f"{listing}\x00{filters}\x00{last_id}".encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, listing: str, filters: str, last_id: int) -> str:
        raw = last_id.to_bytes(_ID_BYTES, "big") + self._mac(listing, filters, last_id)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def decode(self, listing: str, filters: str, cursor: str) -> int:
        """The last id of the page the cursor followed; `BadRequest` for any other text."""
        # Exactly the text `encode` makes: base64's decoder would skip stray characters.
        if not _CURSOR.fullmatch(cursor):
            raise BadRequest("Invalid cursor.")
        raw = base64.urlsafe_b64decode(cursor + "==")
        last_id = int.from_bytes(raw[:_ID_BYTES], "big")
        if not hmac.compare_digest(raw[_ID_BYTES:], self._mac(listing, filters, last_id)):
            raise BadRequest("Invalid cursor.")
        return last_id


class AdminService:
    def __init__(self, services: Services, accounts: AccountService) -> None:
        self.sv = services
        self.accounts = accounts
        self.cursors = Cursors(services.config.secret())

    async def has_factor(self, user_id: int) -> bool:
        """Whether the user has a second factor: a superuser who has one acts only at aal2."""
        async with self.sv.db.read() as s:
            return await AdminStore(s).has_factor(user_id)

    # --- reading ----------------------------------------------------------------------

    async def list_users(
        self, query: str | None, limit: int, cursor: str | None
    ) -> tuple[list[UserRow], str | None]:
        """A page of users by id (those whose email contains `query`), and the cursor of the
        next page (None on the last one)."""
        filters = query or ""
        after = self.cursors.decode("users", filters, cursor) if cursor else None
        async with self.sv.db.read() as s:
            rows = await AdminStore(s).page(query=query, after_id=after, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        following = self.cursors.encode("users", filters, rows[-1].user.id) if more else None
        return rows, following

    async def user(self, user_id: int) -> UserDetail:
        async with self.sv.db.read() as s:
            row = await AdminStore(s).user(user_id)
            if row is None:
                raise NotFound("No such user.")
            sessions = await SessionStore(s).live(user_id, self.sv.clock())
        return UserDetail(row, sessions)

    async def audit(
        self,
        *,
        user_id: int | None,
        event: str | None,
        since: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> tuple[list[AuditRow], str | None]:
        """A page of the audit log, newest first (the user's, the event's, since a moment),
        and the cursor of the next (older) page; None on the last one."""
        if event is not None and event not in events.EVENT_NAMES:
            raise BadRequest("No such event.")
        when = since.isoformat() if since is not None else ""
        filters = f"{user_id or ''}|{event or ''}|{when}"
        before = self.cursors.decode("audit", filters, cursor) if cursor else None
        async with self.sv.db.read() as s:
            rows = await AuditStore(s).page(
                user_id=user_id, event=event, since=since, before_id=before, limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        following = self.cursors.encode("audit", filters, rows[-1].id) if more else None
        return rows, following

    # --- changing ---------------------------------------------------------------------

    async def create_user(
        self,
        actor: Actor,
        email: str,
        password: str,
        *,
        is_superuser: bool,
        email_verified: bool,
    ) -> UserRow:
        """A new active account (the password rules apply: `PasswordRejected`; `EmailTaken`).
        Not counted against any address's registration limit: the admin is authenticated."""
        user = await self.accounts.register(
            email, password, is_superuser=is_superuser, email_verified=email_verified
        )
        events.emit("admin_user_created", user_id=user.id, actor=actor.label)
        return UserRow(user, has_factor=False)

    async def update_user(
        self,
        actor: Actor,
        user_id: int,
        *,
        is_active: bool | None = None,
        is_superuser: bool | None = None,
        email_verified: bool | None = None,
    ) -> UserRow:
        """Change the flags given; deactivation revokes every session of the user. A superuser
        may not deactivate or demote themself (`Conflict`): an instance would otherwise lose
        its last administrator by a slip, and another admin can always do it."""
        if actor.user_id == user_id and (is_active is False or is_superuser is False):
            raise Conflict("Administrators cannot deactivate or demote themselves.")
        given = {"is_active": is_active, "is_superuser": is_superuser}
        flags = {
            k: v for k, v in {**given, "email_verified": email_verified}.items() if v is not None
        }
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            users = UserStore(s)
            if await users.by_id(user_id) is None:
                raise NotFound("No such user.")
            await users.set_flags(user_id, now, **flags)
            revoked = (
                await SessionStore(s).revoke_all(user_id, now, "deactivated")
                if is_active is False
                else []
            )
            row = await AdminStore(s).user(user_id)
            assert row is not None
            await users.reload(row.user)
        await self.sv.sessions_revoked(revoked)
        await self.sv.user_changed(user_id)
        # Which flags were written, never their values' context: a short, fixed vocabulary.
        events.emit(
            "admin_user_updated", user_id=user_id, actor=actor.label, reason=",".join(sorted(flags))
        )
        if is_active is not None:
            events.emit("activated" if is_active else "deactivated", user_id=user_id)
        for sid in revoked:
            events.emit("session_revoked", user_id=user_id, session_id=sid, reason="deactivated")
        return row

    async def delete_user(self, actor: Actor, user_id: int) -> None:
        """Delete the account with its sessions, factors and tokens (as DELETE /me does)."""
        if actor.user_id == user_id:
            raise Conflict("Administrators cannot delete themselves here; use DELETE /me.")
        async with self.sv.db.write() as s:
            users = UserStore(s)
            if await users.by_id(user_id) is None:
                raise NotFound("No such user.")
            revoked = await users.delete(user_id)
        await self.sv.sessions_revoked(revoked)
        await self.sv.user_changed(user_id)
        events.emit("admin_user_deleted", user_id=user_id, actor=actor.label)

    async def revoke_sessions(self, actor: Actor, user_id: int) -> int:
        """Revoke every live session of the user; how many."""
        now = self.sv.clock()
        async with self.sv.db.write() as s:
            if await UserStore(s).by_id(user_id) is None:
                raise NotFound("No such user.")
            revoked = await SessionStore(s).revoke_live(user_id, now, "admin")
        await self.sv.sessions_revoked(revoked)
        events.emit("admin_sessions_revoked", user_id=user_id, actor=actor.label)
        for sid in revoked:
            events.emit("session_revoked", user_id=user_id, session_id=sid, reason="admin")
        return len(revoked)
