"""Logins racing a password reset or a deactivation (security findings F1 and F2), and the
bound on refresh-token rows (F10).

A login reads the credentials, spends tens of milliseconds hashing, then writes: a reset or a
deactivation can commit in between. The deterministic tests hold a login at that exact point
(after its hash, before its write) while the reset or deactivation completes, through HTTP on
both backends; the real-server test fires concurrent logins at `authgate serve` while the
reset is confirmed, as the review did, and checks that nothing the old password bought
survives.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher
from sqlalchemy import func, select, update

from authgate import create_app
from authgate.factors.hashing import PasswordHashing
from authgate.store.models import RefreshToken, Session, User
from tests.conftest import (
    PASSWORD,
    Backend,
    FakeClock,
    SmtpSink,
    bearer,
    clean_env,
    login,
    make_config,
    register,
    running,
)
from tests.processes.test_serve import serving

ANN = "ann@example.com"
NEW_PASSWORD = "a brand new passphrase"
#: Far cheaper than today's parameters: a login with it re-hashes the password.
OUTDATED = PasswordHasher(time_cost=1, memory_cost=4096, parallelism=1)


class HeldLogin:
    """Holds the first login whose password check matches `password` right after its argon2
    work (verify, or the re-hash after it) until `release()`: the point where a reset or a
    deactivation can commit before the login writes."""

    def __init__(self, hashing: PasswordHashing, password: str, *, at: str) -> None:
        self.reached = asyncio.Event()
        self._go = asyncio.Event()
        self._password = password
        original = getattr(hashing, at)

        async def held(*args: Any) -> Any:
            result = await original(*args)
            if args[-1] == self._password and not self.reached.is_set():
                self.reached.set()
                await self._go.wait()
            return result

        setattr(hashing, at, held)

    def release(self) -> None:
        self._go.set()


async def reset_password(client: httpx.AsyncClient, outbox: list[str]) -> None:
    response = await client.post("/auth/password-reset", json={"email": ANN})
    assert response.status_code == 200, response.text
    for _ in range(500):
        if outbox:
            break
        await asyncio.sleep(0.01)
    response = await client.post(
        "/auth/password-reset/confirm",
        json={"token": outbox.pop(), "new_password": NEW_PASSWORD},
    )
    assert response.status_code == 200, response.text


async def live_sessions(app: Any) -> int:
    async with app.state.authgate.services.db.read() as s:
        count = await s.scalar(
            select(func.count()).select_from(Session).where(Session.revoked_at.is_(None))
        )
    return int(count or 0)


async def login_status(client: httpx.AsyncClient, password: str) -> int:
    response = await client.post("/auth/login", json={"email": ANN, "password": password})
    return response.status_code


def make_app(backend: Backend, clock: FakeClock, outbox: list[str], **overrides: Any) -> Any:
    async def send(_email: str, token: str) -> None:
        outbox.append(token)

    return create_app(make_config(backend, password_reset_send_fn=send, **overrides), clock=clock)


async def test_login_rehash_never_undoes_a_reset(backend: Backend, clock: FakeClock) -> None:
    """F1: a login re-hashing an outdated hash of the old password, while a reset commits,
    must not write the old password back."""
    outbox: list[str] = []
    app = make_app(backend, clock, outbox)
    async with running(app) as client:
        await register(client, ANN)
        async with app.state.authgate.services.db.write() as s:
            await s.execute(update(User).values(password_hash=OUTDATED.hash(PASSWORD)))
        held = HeldLogin(app.state.authgate.services.hashing, PASSWORD, at="hash")
        racing = asyncio.ensure_future(login_status(client, PASSWORD))
        await asyncio.wait_for(held.reached.wait(), 30)
        await reset_password(client, outbox)
        held.release()
        # The password it verified is no longer the account's: no session for it.
        assert await racing == 401
        assert await login_status(client, NEW_PASSWORD) == 200
        assert await login_status(client, PASSWORD) == 401
        assert await live_sessions(app) == 1


@pytest.mark.parametrize("change", ["reset", "deactivate", "deactivate_then_activate"])
async def test_login_that_verified_old_credentials_opens_no_session(
    backend: Backend, clock: FakeClock, change: str
) -> None:
    """F2: a login that verified the password before a reset or a deactivation committed
    opens no session; re-activating the user does not revive anything either."""
    outbox: list[str] = []
    app = make_app(backend, clock, outbox)
    gate = app.state.authgate
    async with running(app) as client:
        await register(client, ANN)
        held = HeldLogin(gate.services.hashing, PASSWORD, at="verify")
        racing = asyncio.ensure_future(login_status(client, PASSWORD))
        await asyncio.wait_for(held.reached.wait(), 30)
        if change == "reset":
            await reset_password(client, outbox)
        else:
            await gate.accounts.set_active(ANN, False)
            if change == "deactivate_then_activate":
                await gate.accounts.set_active(ANN, True)
        held.release()
        assert await racing == 401
        assert await live_sessions(app) == 0


@pytest.mark.subprocess
def test_concurrent_logins_with_old_password_do_not_survive_reset(
    backend: Backend, tmp_path: Path, smtp_sink: SmtpSink
) -> None:
    """F2 against a real server: logins with the old password fired while the reset is
    confirmed; afterwards no token any of them got still works."""
    env = clean_env(
        {
            **backend.env,
            "AUTHGATE_SMTP_URL": smtp_sink.url,
            "AUTHGATE_RATE_LIMITS": "off",
            "AUTHGATE_HASH_MAX_WAIT": "30",
        }
    )
    with serving(env, tmp_path / "logs") as server:
        assert server.post("/auth/register", json={"email": ANN, "password": PASSWORD}).is_success
        assert server.post("/auth/password-reset", json={"email": ANN}).status_code == 200
        messages = asyncio.run(smtp_sink.wait_for(1))
        body = messages[0].get_body(preferencelist=("plain",))
        assert body is not None
        match = re.search(r"token=([A-Za-z0-9_\-]+)", body.get_content())
        assert match is not None
        token = match.group(1)

        def attempt(i: int) -> httpx.Response:
            if i == 6:
                return server.post(
                    "/auth/password-reset/confirm",
                    json={"token": token, "new_password": NEW_PASSWORD},
                )
            return server.post("/auth/login", json={"email": ANN, "password": PASSWORD})

        with ThreadPoolExecutor(max_workers=13) as pool:
            answers = list(pool.map(attempt, range(13)))
        assert answers[6].status_code == 200, answers[6].text
        tokens = [r.json() for i, r in enumerate(answers) if i != 6 and r.status_code == 200]
        for pair in tokens:
            assert server.get("/auth/me", headers=bearer(pair["access_token"])).status_code == 401
            refreshed = server.post("/auth/refresh", json={"refresh_token": pair["refresh_token"]})
            assert refreshed.status_code == 401
        assert (
            server.post("/auth/login", json={"email": ANN, "password": NEW_PASSWORD}).status_code
            == 200
        )
        assert (
            server.post("/auth/login", json={"email": ANN, "password": PASSWORD}).status_code == 401
        )


# --- F10: refresh-token rows are bounded --------------------------------------------------


async def refresh(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post("/auth/refresh", json={"refresh_token": token})


async def test_refresh_is_limited_per_session(backend: Backend, clock: FakeClock) -> None:
    """F10: a small burst of rotations per session, then 429 with Retry-After; the presented
    token is not spent and works once the window is over."""
    app = make_app(backend, clock, [], rate_limits=True, refresh_limit_per_session="3/minute")
    async with running(app) as client:
        await register(client, ANN)
        token = (await login(client, ANN))["refresh_token"]
        for _ in range(3):
            response = await refresh(client, token)
            assert response.status_code == 200, response.text
            token = response.json()["refresh_token"]
        limited = await refresh(client, token)
        assert limited.status_code == 429, limited.text
        assert limited.json()["code"] == "rate_limited"
        assert 1 <= int(limited.headers["Retry-After"]) <= 60
        # Another session of the same user has a budget of its own.
        other = (await login(client, ANN))["refresh_token"]
        assert (await refresh(client, other)).status_code == 200
        clock.advance(61)
        assert (await refresh(client, token)).status_code == 200


async def token_rows(app: Any) -> int:
    async with app.state.authgate.services.db.read() as s:
        return int(await s.scalar(select(func.count()).select_from(RefreshToken)) or 0)


async def test_purge_keeps_only_recent_spent_tokens_of_a_family(
    backend: Backend, clock: FakeClock
) -> None:
    """F10: purge deletes a live family's spent tokens beyond the newest few; a recent one
    is still reuse (the family is revoked), an older one is merely unknown."""
    app = make_app(backend, clock, [])
    gate = app.state.authgate
    async with running(app) as client:
        await register(client, ANN)
        tokens = [(await login(client, ANN))["refresh_token"]]
        for _ in range(20):
            response = await refresh(client, tokens[-1])
            assert response.status_code == 200
            tokens.append(response.json()["refresh_token"])
        assert await token_rows(app) == 21
        await gate.accounts.purge()
        assert await token_rows(app) == 4  # the live token and the newest three spent
        # The oldest tokens are gone: refused, but the family lives on.
        assert (await refresh(client, tokens[0])).status_code == 401
        assert (await refresh(client, tokens[-1])).status_code == 200
        # A recently spent one is still reuse: the whole family is revoked.
        reused = await refresh(client, tokens[-2])
        assert reused.status_code == 401
        assert reused.json()["code"] == "refresh_token_reused"
