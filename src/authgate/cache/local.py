"""This worker's copy of live sessions and their users: a warm GET /me asks no one.

The copy may answer only while it provably has heard every invalidation (see `state.py` for
the whole scheme): its subscription is open and was replayed from the database since it
opened (`subscribed`, `replayed`), a pong proved the subscription current within `lease`
seconds (`heard`), and a database sweep begun within `sweep_lease` seconds has completed
(`replayed`). A fill that began before an invalidation is discarded (`generation`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime

from authgate.cache.sweep import SWEEP_LEASE
from authgate.principal import Principal, SessionState

__all__ = ["LEASE", "LocalState"]

#: The copy is used only if a pong proved the subscription current this recently (shorter
#: than a writer's acknowledgement wait, `StateCache` `ack_timeout`, 1 s by default).
LEASE = 0.75


class LocalState:
    """Live sessions of active users, each with its user's current principal.

    A session entry holds the `SessionState` it answers with, so a hit allocates nothing;
    it answers only while its principal *is* its user's entry, so dropping the user entry
    (a user change) retires every session entry filled before it.
    """

    def __init__(
        self,
        *,
        ttl: float,
        lease: float = LEASE,
        sweep_lease: float = SWEEP_LEASE,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._lease = lease
        self._sweep_lease = sweep_lease
        self._max = max_entries
        self._clock = clock
        self._sessions: dict[str, tuple[SessionState, float]] = {}
        self._users: dict[int, tuple[Principal, float]] = {}
        #: Bumped by every invalidation: a fill that began before one is discarded.
        self.generation = 0
        self._live = False
        self._heard = -math.inf
        self._swept = -math.inf
        self._subscribed = False
        self._epoch = 0  # bumped by every confirmed (re)subscribe
        #: Hits so far: a plain int on GET /me's path, which the metrics read now and then.
        self.hits = 0

    @property
    def live(self) -> bool:
        if not self._live:
            return False
        now = self._clock()
        return now - self._heard < self._lease and now - self._swept < self._sweep_lease

    def now(self) -> float:
        return self._clock()

    def get(self, session_id: str, user_id: int) -> SessionState | None:
        """The session's state, or None when this worker has no usable copy of it."""
        session = self._sessions.get(session_id)
        if session is None or not self.live:
            return None
        state, until = session
        user = self._users.get(user_id)
        now = self._clock()
        # Identity, not equality: another user's entry (a token for a session id it does not
        # own) or a user entry replaced since the fill never matches.
        if user is None or user[0] is not state.principal or now >= until or now >= user[1]:
            return None
        self.hits += 1
        return state

    def put(
        self, generation: int, session_id: str, principal: Principal, expires_at: datetime | None
    ) -> None:
        """Keep a live session of an active user, unless an invalidation came since
        `generation` was read (before the caller's first await)."""
        if generation != self.generation or not self.live:
            return
        # Bounded: the oldest entry goes first (dicts keep insertion order).
        if len(self._sessions) >= self._max:
            del self._sessions[next(iter(self._sessions))]
        if len(self._users) >= self._max:
            del self._users[next(iter(self._users))]
        current = self._users.get(principal.id)
        if current is not None and current[0] == principal:
            principal = current[0]  # the user's other sessions keep answering
        until = self._clock() + self._ttl
        self._sessions[session_id] = (SessionState(principal, False, expires_at), until)
        self._users[principal.id] = (principal, until)

    def drop_sessions(self, session_ids: list[str]) -> None:
        self.generation += 1
        for sid in session_ids:
            self._sessions.pop(sid, None)

    def drop_user(self, user_id: int) -> None:
        self.generation += 1
        self._users.pop(user_id, None)

    # --- what the copy may be trusted on ----------------------------------------------------

    def heard(self, sent_at: float | None = None) -> None:
        """The subscription was current as of `sent_at` (a ping's send time; default now)."""
        at = self._clock() if sent_at is None else sent_at
        self._heard = max(self._heard, at)

    def subscribed(self) -> None:
        """A (re)subscribe was confirmed: distrust the copy until a replay begun after it."""
        self.reset(live=False)
        self._subscribed = True
        self._epoch += 1

    def unsubscribed(self) -> None:
        """The subscription is gone (lost, or stopped): forget everything."""
        self._subscribed = False
        self.reset(live=False)

    def replay_token(self) -> int | None:
        """Taken when a sweep starts: the subscription it may replay for (None: none)."""
        return self._epoch if self._subscribed else None

    def replayed(self, started_at: float, token: int | None) -> None:
        """A database sweep begun at `started_at` (with `token` from `replay_token`) has been
        applied; the copy opens if the subscription it began under is still the current one."""
        self._swept = max(self._swept, started_at)
        if token is not None and self._subscribed and token == self._epoch and not self._live:
            self.generation += 1
            self._live = True

    def reset(self, *, live: bool) -> None:
        """Forget everything; `live=True` also vouches for the subscription and the sweep as of
        now (tests and embedders; the subscriber itself opens the copy after its replay)."""
        self.generation += 1
        self._sessions.clear()
        self._users.clear()
        self._live = live
        if live:
            now = self._clock()
            self.heard(now)
            self._swept = max(self._swept, now)
        else:
            self._heard = -math.inf  # only a pong on the next subscription counts
