"""Sessions: login, refresh (rotation with reuse detection), logout, and authenticating an
access token. A session is a token family: one login and every token rotated from it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from authgate import events
from authgate.cache.ratelimit import Policy
from authgate.errors import (
    CsrfFailed,
    InvalidCredentials,
    InvalidRefreshToken,
    MfaRequired,
    NotAuthenticated,
    RateLimited,
    RefreshTokenReused,
)
from authgate.factors.emails import login_key
from authgate.factors.password_rules import normalise
from authgate.principal import PASSWORD, Client, Level, Principal, SessionState
from authgate.services.context import Services
from authgate.store.grace import Grace
from authgate.store.rotation import Outcome, RefreshBudget, rotate
from authgate.store.sessions import SessionStore, open_session
from authgate.store.users import Credentials, credentials
from authgate.tokens.keys import AccessClaims, TokenError, digest, new_opaque_token, new_session_id

__all__ = ["PASSWORD_PENDING", "IssuedTokens", "SessionService"]

#: A password login of a user with a second factor: `aal1` until the second step.
PASSWORD_PENDING = Level(1, ("pwd",), pending=True)


@dataclass(frozen=True, slots=True)
class IssuedTokens:
    access_token: str
    refresh_token: str
    csrf_token: str
    session_id: str
    user_id: int


class SessionService:
    def __init__(self, services: Services) -> None:
        self.sv = services
        self._budget = RefreshBudget(*services.config.refresh_budget())
        #: Refresh grace in seconds; 0 is the strict rule (contract §4, §8).
        self._grace = services.config.refresh_grace
        #: Bound once: authenticate passes it on every miss of the worker's copy.
        self._load_state = self._read_state

    async def login(
        self, email: str, password: str, *, client_ip: str, user_agent: str | None = None
    ) -> IssuedTokens:
        limiter = self.sv.limiter
        await limiter.hit(Policy.LOGIN_PER_IP, client_ip)
        # Keyed by the canonical email whether or not an account exists, so the lock-out
        # itself tells nothing about which emails are registered.
        key = login_key(email)
        account_key = key or email.strip().lower()
        self.sv.hashing.check_admission()

        user: Credentials | None = None
        if key is not None:
            user = await credentials(self.sv.db, account_key)
        # The failure slot is taken before verifying (a concurrent burst tests exactly the
        # budget) and given back when this turns out to be no attempt: busy, cancelled, or
        # the database away. The account's credentials version keys it: a reset starts afresh.
        attempt = await limiter.login_attempt(account_key, user.version if user else 0, client_ip)
        # Same argon2 work whether the email is unknown, the password wrong or the user
        # inactive: the answer and its timing are the same for all three.
        candidate = normalise(password)
        try:
            ok = await self.sv.hashing.verify(user.password_hash if user else None, candidate)
        except BaseException:
            await attempt.give_back()
            raise
        if not ok or user is None or not user.is_active:
            reason = "unknown_email" if user is None else "wrong_password" if not ok else "inactive"
            events.emit(
                "login_failed",
                outcome="failure",
                user_id=user.user_id if user else None,
                reason=reason,
            )
            raise InvalidCredentials()
        await attempt.succeeded()

        now = self.sv.clock()
        cfg = self.sv.config
        session_id = new_session_id()
        session_end = now + timedelta(seconds=cfg.session_max_age) if cfg.session_max_age else None
        refresh = new_opaque_token()
        refresh_end = self.refresh_end(now, session_end)
        # A user with a second factor gets an `aal1` session that waits for it (contract §9).
        level = PASSWORD_PENDING if user.has_factor else PASSWORD
        new_hash = None
        if self.sv.hashing.needs_rehash(user.password_hash):
            new_hash = await self.sv.hashing.hash(candidate)
            now = self.sv.clock()
        # The session opens only while the credentials that were just verified are current:
        # a reset or deactivation that committed during the hash makes this login fail. The
        # new hash replaces the verified one by compare-and-swap: never undoes a racing reset.
        opened = await open_session(
            self.sv.db,
            session_id=session_id,
            user=user,
            now=now,
            session_end=session_end,
            digest=digest(refresh),
            refresh_end=refresh_end,
            client=Client.of(client_ip, user_agent),
            new_hash=new_hash,
            level=level,
        )
        if not opened:
            events.emit(
                "login_failed",
                outcome="failure",
                user_id=user.user_id,
                reason="credentials_changed",
            )
            raise InvalidCredentials()
        events.emit("login_succeeded", user_id=user.user_id, session_id=session_id)
        return self.issue(user.user_id, session_id, refresh, now, session_end, level)

    async def refresh(
        self,
        token: str,
        *,
        csrf: str | None = None,
        client_ip: str | None = None,
        user_agent: str | None = None,
    ) -> IssuedTokens:
        """Rotate `token`. `csrf` is the double-submitted value when the token came from a
        cookie: it must be bound to the token's own session (`require_csrf`). The session
        records the client as where it was last used."""
        token_digest = digest(token)
        if csrf is not None:
            async with self.sv.db.read() as s:
                owner = await SessionStore(s).refresh_owner(token_digest)
            if owner is None:
                raise InvalidRefreshToken()
            self.require_csrf(csrf, owner[0])

        now = self.sv.clock()
        if self._grace:
            # Refresh grace (contract §8): the successor is derived from `token` under the
            # server's key, so a replay re-derives it (under a previous key too, after a key
            # rotation) and the store finds it by digest; only digests are stored.
            candidates = self.sv.keys.successor_candidates(token)
            grace = Grace(self._grace, [digest(c) for c in candidates])
            new_refresh, new_digest = candidates[0], grace.successors[0]
        else:
            grace, new_refresh = None, new_opaque_token()
            new_digest = digest(new_refresh)
        rotation = await rotate(
            self.sv.db,
            token_digest,
            new_digest,
            now=now,
            refresh_end=self.refresh_end(now, None),
            budget=self._budget,
            client=Client.of(client_ip, user_agent),
            grace=grace,
        )
        outcome, session_id = rotation.outcome, rotation.session_id
        if outcome is Outcome.ROTATED:
            user_id = rotation.user_id
            assert user_id is not None  # set when ROTATED, as session_id is
            assert session_id is not None
            events.emit("refreshed", user_id=user_id, session_id=session_id)
            end = rotation.session_end
            return self.issue(user_id, session_id, new_refresh, now, end, rotation.level)
        if outcome is Outcome.REPLAYED:
            # Spent within the window, its successor unused: that same successor again (never
            # a second branch), with a new access token of the same session.
            user_id = rotation.user_id
            assert user_id is not None  # set when REPLAYED, as session_id is
            assert session_id is not None
            events.emit("refresh_replayed", user_id=user_id, session_id=session_id)
            successor = candidates[rotation.successor]
            end = rotation.session_end
            return self.issue(user_id, session_id, successor, now, end, rotation.level)
        if outcome is Outcome.REUSED:
            # RFC 9700 §4.14.2: a rotated token presented again means it leaked; the store
            # revoked the whole family, the legitimate holder's newest token too.
            assert session_id is not None  # set when REUSED
            await self.sv.sessions_revoked([session_id])
            events.emit("refresh_reused", outcome="failure", session_id=session_id, reason="reuse")
            raise RefreshTokenReused()
        if outcome is Outcome.LIMITED:
            events.emit(
                "refresh_failed", outcome="failure", session_id=session_id, reason="limited"
            )
            raise RateLimited(rotation.retry_after)
        # INVALID, or ENDED: spent, but its session is over, so no successor was added.
        events.emit("refresh_failed", outcome="failure", reason="invalid")
        raise InvalidRefreshToken()

    async def logout(self, refresh_token: str | None, access_token: str | None) -> None:
        """Revoke the family of whichever token is given; anything invalid is ignored."""
        now = self.sv.clock()
        session_ids: set[str] = set()
        if access_token:
            try:
                claims = self.sv.keys.verify_access(access_token, now=now)
            except TokenError:
                pass
            else:
                session_ids.add(claims.session_id)
        async with self.sv.db.write() as s:
            sessions = SessionStore(s)
            if refresh_token:
                owner = await sessions.refresh_owner(digest(refresh_token))
                if owner is not None:
                    session_ids.add(owner[0])
            revoked = [
                sid for sid in sorted(session_ids) if await sessions.revoke(sid, now, "logout")
            ]
        await self.sv.sessions_revoked(revoked)
        for sid in revoked:
            events.emit("logged_out", session_id=sid)

    async def authenticate(
        self, access_token: str, *, allow_pending: bool = False
    ) -> tuple[Principal, AccessClaims]:
        """The active user behind a valid access token of a live session, or NotAuthenticated.
        `MfaRequired` for a session waiting for its second step, unless `allow_pending` (the
        second step itself, contract §9)."""
        now = self.sv.clock()
        try:
            claims = self.sv.keys.verify_access(access_token, now=now)
        except TokenError:
            raise NotAuthenticated() from None
        # Revocation reaches access tokens at once: the family is checked on every request,
        # this worker's copy first (no await), then Redis, then the database (cache/state.py).
        states = self.sv.session_states
        state = states.peek(claims.session_id, claims.user_id) or await states.lookup(
            claims.session_id, claims.user_id, load=self._load_state
        )
        if state is None or not _live(state.revoked, state.expires_at, now):
            raise NotAuthenticated()
        if not state.principal.is_active:
            raise NotAuthenticated()
        if claims.level.pending and not allow_pending:
            raise MfaRequired()
        return state.principal, claims

    async def _read_state(self, session_id: str, user_id: int) -> SessionState | None:
        async with self.sv.db.read() as s:
            return await SessionStore(s).state(session_id, user_id)

    def require_csrf(self, csrf: str, session_id: str) -> None:
        """The CSRF binding, for both cookie paths (an unsafe request on the access cookie, and
        refresh on the refresh cookie): the double-submitted value must be the one issued for
        the session acted on (signed double submit, OWASP CSRF Cheat Sheet), else `CsrfFailed`.

        Checked here, not at the edge: the session is the service's to resolve (a refresh
        token's session is only known from the store), and the value is issued here (`issue`).
        The edge keeps the transport half: the header must equal the cookie."""
        if not self.sv.keys.check_csrf(csrf, session_id):
            raise CsrfFailed()

    def refresh_end(self, now: datetime, session_end: datetime | None) -> datetime:
        end = now + timedelta(seconds=self.sv.config.refresh_ttl)
        return min(end, session_end) if session_end is not None else end

    def issue(
        self,
        user_id: int,
        session_id: str,
        refresh: str,
        now: datetime,
        session_end: datetime | None,
        level: Level,
    ) -> IssuedTokens:
        """The tokens a client gets for `refresh`: an access token of the session at `level`
        (shorter than the session's rest) and a CSRF value bound to the session."""
        ttl = self.sv.config.access_ttl
        if session_end is not None:
            ttl = max(1, min(ttl, int((session_end - now).total_seconds())))
        return IssuedTokens(
            access_token=self.sv.keys.issue_access(
                user_id=user_id, session_id=session_id, now=now, ttl=ttl, level=level
            ),
            refresh_token=refresh,
            csrf_token=self.sv.keys.issue_csrf(session_id),
            session_id=session_id,
            user_id=user_id,
        )


def _live(revoked: bool, expires_at: datetime | None, now: datetime) -> bool:
    return not revoked and (expires_at is None or now < expires_at)
