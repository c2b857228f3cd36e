"""Rate limits on login (contract §4: 429 with Retry-After), on both backends.

Budgets are AuthConfig's defaults unless a test sets its own: 30 login attempts per client
address per minute; failed logins per (email, address) 5 per window, the window doubling
(1, 2, 4 … minutes) each time an address spends it; 50 failed logins per email per hour
from all addresses. Failures count whether or not the email has an account.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from authgate import create_app
from authgate.app import AuthGate
from authgate.store.models import RateLimitCounter
from tests.helpers import (
    ANN,
    PASSWORD,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    login,
    make_app,
    make_config,
    refresh,
    register,
    running,
)

LOGIN_PER_IP = 30
FAILURES_PER_ADDRESS = 5
NEW_PASSWORD = "a brand new secret 42"


def assert_limited(response: httpx.Response, retry_after: int | None = None) -> None:
    assert response.status_code == 429, response.text
    assert response.json() == {
        "detail": response.json()["detail"],
        "code": "rate_limited",
    }
    assert isinstance(response.json()["detail"], str)
    header = response.headers["retry-after"]
    assert header.isdigit(), header
    assert int(header) >= 1
    if retry_after is not None:
        assert int(header) == retry_after, header
    assert "set-cookie" not in response.headers


async def fail(client: httpx.AsyncClient, email: str = "ann@example.com") -> httpx.Response:
    return await client.post("/auth/login", json={"email": email, "password": "wrong guess!"})


@contextlib.asynccontextmanager
async def serving_app(
    backend: Backend, clock: FakeClock, **overrides: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(make_config(backend, rate_limits=True, **overrides), clock=clock)
    async with running(app) as client:
        yield app, client


@contextlib.asynccontextmanager
async def client_at(app: FastAPI, ip: str) -> AsyncIterator[httpx.AsyncClient]:
    """Another client of the same running app, connecting from `ip`."""
    transport = httpx.ASGITransport(app=app, client=(ip, 50001))
    async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as client:
        yield client


# --- per address, per email ---------------------------------------------------------------


async def test_login_attempts_per_ip_are_limited(make_client: AppFactory) -> None:
    async with make_client(rate_limits=True) as client:
        # Every attempt names another email, so only the per-IP budget is spent.
        for i in range(LOGIN_PER_IP):
            response = await client.post(
                "/auth/login", json={"email": f"user{i}@example.com", "password": PASSWORD}
            )
            assert response.status_code == 401, (i, response.text)
        response = await client.post(
            "/auth/login", json={"email": "another@example.com", "password": PASSWORD}
        )
        assert_limited(response)


async def test_failed_logins_hold_back_that_address_for_that_email(
    backend: Backend, clock: FakeClock
) -> None:
    async with serving_app(backend, clock) as (app, client):
        await register(client, "ann@example.com")
        await register(client, "bob@example.com")
        for i in range(FAILURES_PER_ADDRESS):
            assert (await fail(client)).status_code == 401, i
        # The right password from this address waits too, in any case spelling.
        for email in ("ann@example.com", "ANN@example.com"):
            response = await client.post("/auth/login", json={"email": email, "password": PASSWORD})
            assert_limited(response, retry_after=60)
        # Another account from the same address is not affected…
        response = await client.post(
            "/auth/login", json={"email": "bob@example.com", "password": PASSWORD}
        )
        assert response.status_code == 200
        # …nor the same account from another address: the owner still gets in.
        async with client_at(app, "192.0.2.7") as owner:
            response = await owner.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
            assert response.status_code == 200, response.text


async def test_failed_logins_hold_back_an_unknown_email_the_same_way(
    backend: Backend, clock: FakeClock
) -> None:
    async with serving_app(backend, clock) as (_app, client):
        codes = [(await fail(client, "ghost@example.com")).status_code for _ in range(6)]
        assert codes == [401] * FAILURES_PER_ADDRESS + [429]


async def test_the_wait_doubles_each_time_an_address_spends_its_budget(
    backend: Backend, clock: FakeClock
) -> None:
    async with serving_app(backend, clock) as (_app, client):
        await register(client)
        for wait in (60, 120, 240, 480):
            for i in range(FAILURES_PER_ADDRESS):
                assert (await fail(client)).status_code == 401, (wait, i)
            assert_limited(await fail(client), retry_after=wait)
            # Half-way through the wait: still held back, and asking costs nothing.
            clock.advance(wait // 2)
            assert_limited(await fail(client), retry_after=wait - wait // 2)
            clock.advance(wait - wait // 2)
        # A success from that address clears its failures and its doubling.
        response = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert response.status_code == 200
        for i in range(FAILURES_PER_ADDRESS):
            assert (await fail(client)).status_code == 401, i
        assert_limited(await fail(client), retry_after=60)


async def test_the_email_has_an_overall_budget_across_addresses(
    backend: Backend, clock: FakeClock
) -> None:
    async with serving_app(backend, clock, login_failure_limit="12/hour") as (app, client):
        await register(client)
        codes: list[int] = []
        for n in range(1, 5):
            async with client_at(app, f"192.0.2.{n}") as attacker:
                codes += [(await fail(attacker)).status_code for _ in range(5)]
        assert codes == [401] * 12 + [429] * 8
        # Now every address waits for the email's window, the owner's too…
        async with client_at(app, "198.51.100.9") as owner:
            response = await owner.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
            assert_limited(response, retry_after=3600)
        # …and other emails are not affected.
        assert (await fail(client, "bob@example.com")).status_code == 401


async def test_a_single_address_cannot_hold_back_the_email_from_other_addresses(
    backend: Backend, clock: FakeClock
) -> None:
    """The doubling keeps one address below the email's overall budget (50 an hour): over
    three hours of guessing as fast as it is let, the owner's address never waits."""
    start = clock()
    async with (
        serving_app(backend, clock) as (app, client),
        client_at(app, "198.51.100.9") as owner,
    ):
        await register(client)
        for _step in range(60):  # at most 60 steps of trying, then waiting as told
            response = await fail(client)
            if response.status_code == 429:
                clock.advance(int(response.headers["retry-after"]))
            else:
                assert response.status_code == 401
            check = await owner.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
            assert check.status_code == 200, check.text
            if clock() - start > timedelta(hours=3):
                break
        assert clock() - start > timedelta(hours=3)


async def test_rate_limits_off_never_answer_429(make_client: AppFactory) -> None:
    async with make_client(rate_limits=False) as client:
        for i in range(FAILURES_PER_ADDRESS * 3):
            response = await client.post(
                "/auth/login", json={"email": "ghost@example.com", "password": f"guess {i}!"}
            )
            assert response.status_code == 401


# --- F6: a password reset ends the hold-back ----------------------------------------------


async def test_a_confirmed_reset_lets_the_new_password_in_at_once(
    backend: Backend, clock: FakeClock, outbox: Outbox
) -> None:
    async with serving_app(
        backend, clock, login_failure_limit="8/hour", password_reset_send_fn=outbox
    ) as (app, client):
        await register(client)
        # Held back from this address, and the email's overall budget spent from others.
        for _ in range(FAILURES_PER_ADDRESS):
            assert (await fail(client)).status_code == 401
        async with client_at(app, "192.0.2.1") as attacker:
            for _ in range(3):
                assert (await fail(attacker)).status_code == 401
            assert_limited(await fail(attacker))
        assert_limited(
            await client.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
        )
        response = await client.post("/auth/password-reset", json={"email": "ann@example.com"})
        assert response.status_code == 200
        (_, token), *_ = await outbox.wait_for(1)
        response = await client.post(
            "/auth/password-reset/confirm", json={"token": token, "new_password": NEW_PASSWORD}
        )
        assert response.status_code == 200, response.text
        # No clock moved: the owner, from the very address that was held back, is in.
        response = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": NEW_PASSWORD}
        )
        assert response.status_code == 200, response.text
        # Guessing at the new password starts from a fresh budget, not from nothing.
        async with client_at(app, "192.0.2.1") as attacker:
            assert (await fail(attacker)).status_code == 401


# --- F5: the slot is reserved before verifying --------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "budget"),
    [
        ({"login_limit_per_ip": "1000/minute"}, FAILURES_PER_ADDRESS),
        (
            {
                "login_limit_per_ip": "1000/minute",
                "login_failure_limit_per_address": "100/minute",
                "login_failure_limit": "10/hour",
            },
            10,
        ),
    ],
    ids=["per-address", "per-email"],
)
async def test_a_concurrent_burst_tests_exactly_the_budget(
    backend: Backend, clock: FakeClock, overrides: dict[str, str], budget: int
) -> None:
    async with serving_app(backend, clock, **overrides) as (_app, client):
        await register(client)
        async with asyncio.timeout(120):
            responses = await asyncio.gather(*(fail(client) for _ in range(30)))
        codes = sorted(r.status_code for r in responses)
        assert codes == [401] * budget + [429] * (30 - budget)
        assert_limited(
            await client.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
        )


async def test_a_request_answered_busy_is_no_attempt(backend: Backend, clock: FakeClock) -> None:
    budget = 10
    async with serving_app(
        backend,
        clock,
        login_failure_limit_per_address=f"{budget}/minute",
        login_limit_per_ip="1000/minute",
        hash_threads=1,
        hash_max_wait=0.05,
    ) as (_app, client):
        await register(client)
        async with asyncio.timeout(120):
            burst = await asyncio.gather(*(fail(client) for _ in range(30)))
        codes = [r.status_code for r in burst]
        # The queue refused some after their slot was taken; others may have found every
        # slot reserved at that moment (429) by requests that were then refused.
        assert 503 in codes, codes
        # One at a time now (the queue is idle): exactly what the 503s did not spend is left.
        rest = []
        for _ in range(budget + 1):
            response = await fail(client)
            rest.append(response.status_code)
            if response.status_code == 429:
                break
        assert rest[-1] == 429, rest
        assert codes.count(401) + rest.count(401) == budget, (codes, rest)


async def test_a_cancelled_request_is_no_attempt(backend: Backend, clock: FakeClock) -> None:
    async with serving_app(backend, clock, hash_threads=1) as (app, client):
        await register(client)
        hashing = app.state.authgate.services.hashing
        for _ in range(FAILURES_PER_ADDRESS - 1):
            assert (await fail(client)).status_code == 401
        # The last slot is taken by a login whose client goes away while it is verified.
        task = asyncio.ensure_future(fail(client))
        async with asyncio.timeout(30):
            while hashing._pending == 0:  # noqa: ASYNC110 - polling a counter, bounded
                await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await fail(client)).status_code == 401  # the slot came back
        assert_limited(await fail(client))


async def test_keys_name_no_email_and_no_address(backend: Backend, clock: FakeClock) -> None:
    async with serving_app(backend, clock) as (app, client):
        await register(client)
        assert (await fail(client)).status_code == 401
        gate: AuthGate = app.state.authgate
        if backend.name == "postgres":
            redis = gate.cache.client  # type: ignore[attr-defined]
            pattern = backend.settings["cache_prefix"] + "rl:*"
            keys = [k.decode() async for k in redis.scan_iter(match=pattern, count=500)]
        else:
            async with gate.services.db.read() as s:
                keys = list((await s.execute(select(RateLimitCounter.key))).scalars())
        assert keys, "no counters written"
        for key in keys:
            for personal in ("ann", "example", "127.0.0.1"):
                assert personal not in key, key


# --- budgets from the settings; what a reset does to them --------------------------------


async def test_limits_are_configurable(make_client: AppFactory) -> None:
    async with make_client(rate_limits=True, login_limit_per_ip="3/minute") as client:
        codes = [
            (
                await client.post("/auth/login", json={"email": "x@example.com", "password": "y"})
            ).status_code
            for _ in range(4)
        ]
    assert codes == [401, 401, 401, 429]


async def test_reset_requests_per_account_are_capped_silently(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(
        rate_limits=True, password_reset_send_fn=outbox, reset_limit_per_account="2/hour"
    ) as client:
        await register(client)
        answers = [
            (await client.post("/auth/password-reset", json={"email": "ann@example.com"})).json()
            for _ in range(4)
        ]
        await outbox.wait_for(2)
    # The app has shut down, so every background send has finished: exactly two went out.
    assert len(outbox.sent) == 2
    assert all(a == answers[0] for a in answers)


# --- F10: refreshes per session ----------------------------------------------------------


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
