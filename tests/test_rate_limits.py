"""Rate limits on login (contract §4: 429 with Retry-After), on both backends.

Budgets are ratelimit.Limits' defaults: 30 login attempts per client IP per minute, and
10 failed logins per email per 15 minutes (whether or not the email has an account).
"""

from __future__ import annotations

import httpx

from tests.conftest import PASSWORD, AppFactory, register

LOGIN_PER_IP = 30
FAILURES_PER_EMAIL = 10


def assert_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.json() == {
        "detail": response.json()["detail"],
        "code": "rate_limited",
    }
    assert isinstance(response.json()["detail"], str)
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit(), retry_after
    assert int(retry_after) >= 1
    assert "set-cookie" not in response.headers


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


async def test_failed_logins_lock_an_existing_email(make_client: AppFactory) -> None:
    async with make_client(rate_limits=True) as client:
        await register(client, "ann@example.com")
        await register(client, "bob@example.com")
        for i in range(FAILURES_PER_EMAIL):
            response = await client.post(
                "/auth/login", json={"email": "ann@example.com", "password": f"wrong {i}!"}
            )
            assert response.status_code == 401, (i, response.text)
        # The right password no longer gets in: the email is locked, in any case spelling.
        for email in ("ann@example.com", "ANN@example.com"):
            response = await client.post("/auth/login", json={"email": email, "password": PASSWORD})
            assert_limited(response)
        # Another account from the same address is not affected.
        response = await client.post(
            "/auth/login", json={"email": "bob@example.com", "password": PASSWORD}
        )
        assert response.status_code == 200


async def test_failed_logins_lock_an_unknown_email_the_same_way(
    make_client: AppFactory,
) -> None:
    async with make_client(rate_limits=True) as client:
        for i in range(FAILURES_PER_EMAIL):
            response = await client.post(
                "/auth/login", json={"email": "ghost@example.com", "password": f"guess {i}!"}
            )
            assert response.status_code == 401, (i, response.text)
        response = await client.post(
            "/auth/login", json={"email": "ghost@example.com", "password": PASSWORD}
        )
        assert_limited(response)


async def test_rate_limits_off_never_answer_429(make_client: AppFactory) -> None:
    async with make_client(rate_limits=False) as client:
        for i in range(FAILURES_PER_EMAIL + 2):
            response = await client.post(
                "/auth/login", json={"email": "ghost@example.com", "password": f"guess {i}!"}
            )
            assert response.status_code == 401
