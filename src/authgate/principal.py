"""Who an authenticated request acts for, and the state of the session it rides on.

These values sit at the top of the package, beside `config`, `errors` and `events`, because
every layer holds them and none owns them: the store builds them from the rows
(`SessionStore.state`), the cache keeps them (each worker's copy and the Redis entries), the
services hand them out (`SessionService.authenticate`) and the web layer renders them
(GET /me, `CurrentUser`). In any one of those folders, the others would import sideways.

A `Principal` is frozen and carries exactly what GET /me and `CurrentUser` expose: never
the password hash, nor the email key the store matches logins by. A cached or logged
principal cannot leak a credential, and nothing can mistake it for a row to write back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "NO_CLIENT",
    "PASSWORD",
    "Client",
    "Level",
    "Principal",
    "SessionInfo",
    "SessionState",
]

#: Longest user agent kept for a session (contract §5); longer ones are cut.
MAX_USER_AGENT = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """A user as an authenticated request sees it (a snapshot, not the row)."""

    id: int
    #: The address as the user wrote it (domain normalised).
    email: str
    is_active: bool
    is_superuser: bool
    email_verified: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Level:
    """How strongly a session's user was authenticated (contract §9; NIST SP 800-63B assurance
    levels, RFC 8176 method references). Sessions store it; access tokens carry it as the
    `aal` and `amr` claims, and `"mfa": "pending"` while `pending`.

    `pending`: an `aal1` session of a user with a second factor. Until the second step raises
    it to `aal2`, only that step and logout accept its tokens (`mfa_required` elsewhere).
    """

    aal: int
    amr: tuple[str, ...]
    pending: bool = False

    @property
    def stored_amr(self) -> str:
        """`amr` as the session row keeps it: the methods separated by spaces."""
        return " ".join(self.amr)

    @staticmethod
    def of(aal: int, amr: str, pending: bool) -> Level:
        """The level of a session row (shared instances: rows repeat a few levels)."""
        return _level(int(aal), amr, bool(pending))


@functools.lru_cache(maxsize=64)
def _level(aal: int, amr: str, pending: bool) -> Level:
    return Level(aal, tuple(amr.split()), pending)


#: A password login of a user without a second factor; also every session older than
#: migration 0005.
PASSWORD = Level(1, ("pwd",))


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session (token family) and its user, as the store and the cache tiers answer."""

    principal: Principal
    revoked: bool
    #: The session's absolute end (`SESSION_MAX_AGE`); None: no end but the refresh tokens'.
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class Client:
    """Where a login or refresh came from, as the user's list of sessions shows it."""

    ip: str | None
    user_agent: str | None

    @classmethod
    def of(cls, ip: str | None, user_agent: str | None) -> Client:
        """`user_agent` cut to `MAX_USER_AGENT` characters; empty values as None."""
        return cls(ip or None, user_agent[:MAX_USER_AGENT] if user_agent else None)


#: Nothing known of the client (the command line, a library call without one).
NO_CLIENT = Client(None, None)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One live session of a user, as GET /sessions lists it."""

    id: str
    created_at: datetime
    #: The login or the latest refresh.
    last_active_at: datetime
    expires_at: datetime | None
    ip: str | None
    user_agent: str | None
