"""Overload: password hashing sits behind a bounded admission queue. What cannot be served
within the wait budget is refused at once with 503 + Retry-After, never left to time out."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from authgate import create_app
from tests.helpers import PASSWORD, Backend, FakeClock, count_users, make_config, register, running


def _overloadable_app(backend: Backend, clock: FakeClock) -> FastAPI:
    """An app whose queue admits 4 hashes: a one-second budget at an assumed 0.5 s a hash on
    2 threads. Thirty requests at once then must see both answers, whatever the machine."""
    app = create_app(make_config(backend, hash_max_wait=1.0, hash_threads=2), clock=clock)
    app.state.authgate.services.hashing.seconds_per_hash = 0.5
    return app


async def test_logins_beyond_the_queue_get_503_busy(backend: Backend, clock: FakeClock) -> None:
    app = _overloadable_app(backend, clock)
    async with running(app) as client:
        await register(client)
        app.state.authgate.services.hashing.seconds_per_hash = 0.5  # after registering

        async def attempt(i: int) -> tuple[int, dict[str, str], dict[str, str]]:
            email = "ann@example.com" if i % 2 else f"ghost{i}@example.com"
            response = await client.post(
                "/auth/login", json={"email": email, "password": "wrong password"}
            )
            return response.status_code, dict(response.headers), response.json()

        async with asyncio.timeout(120):
            results = await asyncio.gather(*(attempt(i) for i in range(40)))
        codes = [code for code, _, _ in results]
        assert set(codes) == {401, 503}, codes
        for code, headers, body in results:
            if code == 503:
                assert headers["retry-after"] == "1"
                assert body == {"detail": "The service is busy; try again shortly.", "code": "busy"}
        # Unknown and known emails are refused alike: the queue does not look at the account.
        busy_known = sum(1 for i, r in enumerate(results) if r[0] == 503 and i % 2)
        busy_unknown = sum(1 for i, r in enumerate(results) if r[0] == 503 and not i % 2)
        assert busy_known > 0
        assert busy_unknown > 0
        # Once the burst is over, logins are served again.
        response = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert response.status_code == 200


async def test_refused_registrations_store_nothing(backend: Backend, clock: FakeClock) -> None:
    async with running(_overloadable_app(backend, clock)) as client, asyncio.timeout(120):
        responses = await asyncio.gather(
            *(
                client.post(
                    "/auth/register", json={"email": f"u{i}@example.com", "password": PASSWORD}
                )
                for i in range(30)
            )
        )
    codes = [r.status_code for r in responses]
    assert set(codes) == {201, 503}, codes
    assert await count_users(backend) == codes.count(201)
