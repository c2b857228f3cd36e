"""Sessions at a raised assurance level (contract §9): the second step of a password login,
and a passkey sign-in, which proves two factors at once.

Both end the same way as a login: tokens for a session at `level`, the access token carrying
`aal` and `amr`. The second step re-issues the same session's tokens (its other refresh
tokens are spent: `store/levels.step_up`); a passkey sign-in opens a new session.
"""

from __future__ import annotations

from datetime import timedelta

from authgate.errors import NotAuthenticated
from authgate.principal import Client, Level
from authgate.services.context import Services
from authgate.services.sessions import IssuedTokens, SessionService
from authgate.store.levels import step_up
from authgate.store.sessions import open_session
from authgate.store.users import UserStore
from authgate.tokens.keys import digest, new_opaque_token, new_session_id

__all__ = ["Assurance"]


class Assurance:
    def __init__(self, services: Services, sessions: SessionService) -> None:
        self.sv = services
        self._sessions = sessions

    async def step_up(self, user_id: int, session_id: str, level: Level) -> IssuedTokens:
        """Raise the live session `session_id` of `user_id` to `level` and re-issue its tokens;
        `NotAuthenticated` when the session is over meanwhile."""
        now = self.sv.clock()
        refresh = new_opaque_token()
        ok, end = await step_up(
            self.sv.db,
            session_id=session_id,
            user_id=user_id,
            level=level,
            now=now,
            digest=digest(refresh),
            refresh_end=self._sessions.refresh_end(now, None),
        )
        if not ok:
            raise NotAuthenticated()
        return self._sessions.issue(user_id, session_id, refresh, now, end, level)

    async def open_session(self, user_id: int, level: Level, client: Client) -> IssuedTokens:
        """A new session of `user_id` at `level`, without a password (a passkey sign-in);
        `NotAuthenticated` when the user is gone or inactive."""
        async with self.sv.db.read() as s:
            found = await UserStore(s).credentials_of(user_id)
        if found is None or not found[0].is_active:
            raise NotAuthenticated()
        user = found[0]
        cfg = self.sv.config
        now = self.sv.clock()
        session_id = new_session_id()
        session_end = now + timedelta(seconds=cfg.session_max_age) if cfg.session_max_age else None
        refresh = new_opaque_token()
        opened = await open_session(
            self.sv.db,
            session_id=session_id,
            user=user,
            now=now,
            session_end=session_end,
            digest=digest(refresh),
            refresh_end=self._sessions.refresh_end(now, session_end),
            client=client,
            level=level,
        )
        if not opened:
            raise NotAuthenticated()
        return self._sessions.issue(user_id, session_id, refresh, now, session_end, level)
