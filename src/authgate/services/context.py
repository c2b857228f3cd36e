"""What the flows share: the resources they run on, the clock, and background work.

The service layer imports no web framework; `routes.py` translates HTTP to these calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from authgate.cache.ratelimit import RateLimiter
from authgate.cache.state import DatabaseStates, SessionStates
from authgate.config import AuthConfig
from authgate.factors.hashing import PasswordHashing
from authgate.factors.sealing import Sealer
from authgate.mail.delivery import MailSender, Notices, Purpose
from authgate.store.db import Database
from authgate.tokens.keys import Keys

__all__ = ["Background", "Clock", "Services", "utcnow"]

logger = logging.getLogger("authgate")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Background:
    """Fire-and-forget work that must not shape the answer (mail after a reset request).

    Tasks are kept referenced until done, bounded in number, and awaited at shutdown.
    """

    def __init__(self, max_pending: int = 1000) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._max_pending = max_pending

    def spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        if len(self._tasks) >= self._max_pending:
            coro.close()
            logger.error("background queue full; dropped %s", what)
            return
        task = asyncio.create_task(self._run(coro, what))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await coro
        except Exception as exc:
            # The type only: an SMTP or driver error message may quote what was sent.
            logger.error("background %s failed: %s", what, type(exc).__name__)

    async def drain(self, wait_s: float = 10.0) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=wait_s)


@dataclass
class Services:
    """Everything a flow needs, built once by the composition root (`app.py`, `cli.py`)."""

    config: AuthConfig
    db: Database
    keys: Keys
    hashing: PasswordHashing
    limiter: RateLimiter
    senders: dict[Purpose, MailSender | None]
    background: Background
    #: Seals the TOTP secrets (AES-GCM under a key derived from the secret key).
    sealer: Sealer
    #: Notice mails (password changed, email change requested); None without SMTP.
    notices: Notices | None = None
    clock: Clock = utcnow
    #: Session state in tiers (cache/state.py): `Cache.session_states`; the database alone
    #: without a shared cache.
    session_states: SessionStates = field(default_factory=DatabaseStates)

    async def sessions_revoked(self, session_ids: list[str]) -> None:
        """Call after the commit that revoked `session_ids`."""
        await self.session_states.revoke(session_ids)

    async def user_changed(self, user_id: int) -> None:
        """Call after the commit that changed a user's flags."""
        await self.session_states.forget_user(user_id)
