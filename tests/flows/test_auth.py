"""Refresh (rotation, reuse, CSRF, expiry), logout and deactivation through HTTP
(interface.md §4, contract.md §4), on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from authgate import create_app
from tests.conftest import (
    AppFactory,
    Backend,
    FakeClock,
    bearer,
    login,
    make_config,
    register,
    running,
)

COOKIE_NAMES = {"svc_access_token", "svc_refresh_token", "svc_csrf_token"}

# --- helpers ------------------------------------------------------------------------------


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """An error answer: the status, `{"detail": str, "code": str}`, and for 401 the challenge."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail", "code"}, body
    assert isinstance(body["detail"], str)
    assert isinstance(body["code"], str)
    if code is not None:
        assert body["code"] == code, body
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def set_cookies(response: httpx.Response) -> dict[str, str]:
    """The response's Set-Cookie headers keyed by cookie name (whole header value)."""
    return {c.split("=", 1)[0]: c for c in response.headers.get_list("set-cookie")}


def cookie_value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


def assert_token_response(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"access_token", "refresh_token", "token_type"}
    assert body["token_type"] == "bearer"
    assert isinstance(body["access_token"], str)
    assert body["access_token"]
    assert isinstance(body["refresh_token"], str)
    assert body["refresh_token"]
    cookies = set_cookies(response)
    assert set(cookies) == COOKIE_NAMES
    assert cookie_value(cookies["svc_access_token"]) == body["access_token"]
    assert cookie_value(cookies["svc_refresh_token"]) == body["refresh_token"]
    assert cookie_value(cookies["svc_csrf_token"])
    return body


async def refresh(client: httpx.AsyncClient, token: str) -> httpx.Response:
    """Refresh with the token in the JSON body (no CSRF header needed)."""
    return await client.post("/auth/refresh", json={"refresh_token": token})


async def post_with_cookies(
    client: httpx.AsyncClient,
    path: str,
    cookies: dict[str, str],
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST with exactly these cookies (the jar is emptied first, and afterwards)."""
    client.cookies.clear()
    cookie_header = "; ".join(f"{k}={v}" for k, v in cookies.items())
    all_headers = {**(headers or {}), **({"Cookie": cookie_header} if cookies else {})}
    try:
        return await client.post(path, headers=all_headers)
    finally:
        client.cookies.clear()


async def me_status(client: httpx.AsyncClient, access_token: str) -> int:
    client.cookies.clear()
    response = await client.get("/auth/me", headers=bearer(access_token))
    if response.status_code == 401:
        assert_error(response, 401)
    return response.status_code


async def fresh_session(
    client: httpx.AsyncClient, email: str = "ann@example.com"
) -> tuple[dict[str, Any], str]:
    """Log in; (token body, csrf cookie value). The jar is left empty."""
    client.cookies.clear()
    response = await client.post(
        "/auth/login", json={"email": email, "password": "correct horse battery"}
    )
    body = assert_token_response(response)
    csrf = cookie_value(set_cookies(response)["svc_csrf_token"])
    client.cookies.clear()
    return body, csrf


# --- rotation through the body -------------------------------------------------------------


async def test_refresh_with_body_rotates(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    response = await refresh(client, tokens["refresh_token"])  # no CSRF header, no cookies
    new = assert_token_response(response)
    assert new["refresh_token"] != tokens["refresh_token"]
    assert new["access_token"] != tokens["access_token"]
    assert response.headers["cache-control"] == "no-store"
    cookies = set_cookies(response)
    assert "Path=/auth" in cookies["svc_refresh_token"]
    assert "HttpOnly" in cookies["svc_refresh_token"]
    assert "HttpOnly" in cookies["svc_access_token"]
    assert "HttpOnly" not in cookies["svc_csrf_token"]
    # The new tokens work: the access token at /me, the refresh token for another rotation.
    assert await me_status(client, new["access_token"]) == 200
    newer = assert_token_response(await refresh(client, new["refresh_token"]))
    assert len({tokens["refresh_token"], new["refresh_token"], newer["refresh_token"]}) == 3


async def test_refresh_keeps_the_old_access_token_of_a_live_family(
    client: httpx.AsyncClient,
) -> None:
    """Rotation alone revokes nothing: the family is still live."""
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    assert_token_response(await refresh(client, tokens["refresh_token"]))
    assert await me_status(client, tokens["access_token"]) == 200


# --- reuse detection ----------------------------------------------------------------------


async def test_reuse_revokes_the_whole_family(client: httpx.AsyncClient) -> None:
    await register(client)
    first = await login(client)
    client.cookies.clear()
    second = assert_token_response(await refresh(client, first["refresh_token"]))
    third = assert_token_response(await refresh(client, second["refresh_token"]))
    assert await me_status(client, third["access_token"]) == 200

    assert await me_status(client, first["access_token"]) == 200
    # An attacker replays the first (already rotated) refresh token.
    reused = await refresh(client, first["refresh_token"])
    assert_error(reused, 401, "refresh_token_reused")
    assert "set-cookie" not in reused.headers

    # The legitimate holder's newest refresh token is dead too …
    assert_error(await refresh(client, third["refresh_token"]), 401)
    # … and every access token of the family is refused at once, not at expiry.
    for access in (first["access_token"], second["access_token"], third["access_token"]):
        assert await me_status(client, access) == 401


async def test_reuse_leaves_other_sessions_alone(client: httpx.AsyncClient) -> None:
    await register(client)
    a, _ = await fresh_session(client)
    b, _ = await fresh_session(client)
    assert_token_response(await refresh(client, a["refresh_token"]))
    assert_error(await refresh(client, a["refresh_token"]), 401, "refresh_token_reused")
    assert await me_status(client, a["access_token"]) == 401
    assert await me_status(client, b["access_token"]) == 200
    assert_token_response(await refresh(client, b["refresh_token"]))


async def test_reuse_of_a_token_rotated_in_a_revoked_family_stays_401(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    first = await login(client)
    client.cookies.clear()
    second = assert_token_response(await refresh(client, first["refresh_token"]))
    assert_error(await refresh(client, first["refresh_token"]), 401, "refresh_token_reused")
    for _ in range(3):
        assert_error(await refresh(client, first["refresh_token"]), 401)
        assert_error(await refresh(client, second["refresh_token"]), 401)


# --- cookie transport and CSRF ------------------------------------------------------------


async def test_refresh_from_cookie_jar_with_csrf_header(client: httpx.AsyncClient) -> None:
    await register(client)
    response = await client.post(
        "/auth/login", json={"email": "ann@example.com", "password": "correct horse battery"}
    )
    tokens = assert_token_response(response)
    csrf = client.cookies.get("svc_csrf_token")
    assert csrf is not None
    # The jar holds the refresh cookie (Path=/auth) and sends it to /auth/refresh.
    response = await client.post("/auth/refresh", headers={"X-CSRF-Token": csrf})
    new = assert_token_response(response)
    assert new["refresh_token"] != tokens["refresh_token"]
    # The jar now holds the rotated cookies; the next cookie refresh uses the new CSRF value.
    assert client.cookies.get("svc_refresh_token") == new["refresh_token"]
    new_csrf = client.cookies.get("svc_csrf_token")
    assert new_csrf is not None
    assert_token_response(await client.post("/auth/refresh", headers={"X-CSRF-Token": new_csrf}))
    # The original token was spent by the cookie refresh: presenting it again is reuse.
    assert_error(await refresh(client, tokens["refresh_token"]), 401, "refresh_token_reused")


async def test_cookie_refresh_csrf_failures_are_403_and_spend_nothing(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    a, a_csrf = await fresh_session(client)
    b, b_csrf = await fresh_session(client)
    assert a_csrf != b_csrf
    refresh_a = a["refresh_token"]

    attempts: list[tuple[dict[str, str], dict[str, str]]] = [
        # header absent
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": a_csrf}, {}),
        # header absent and no CSRF cookie either
        ({"svc_refresh_token": refresh_a}, {}),
        # header present, CSRF cookie absent
        ({"svc_refresh_token": refresh_a}, {"X-CSRF-Token": a_csrf}),
        # header valid for this session, but the cookie differs (no double submit)
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": "other"}, {"X-CSRF-Token": a_csrf}),
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": b_csrf}, {"X-CSRF-Token": a_csrf}),
        # header wrong
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": a_csrf}, {"X-CSRF-Token": "wrong"}),
        # header differs from the cookie by one character
        (
            {"svc_refresh_token": refresh_a, "svc_csrf_token": a_csrf},
            {"X-CSRF-Token": a_csrf[:-1] + ("0" if a_csrf[-1] != "0" else "1")},
        ),
        # empty header
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": a_csrf}, {"X-CSRF-Token": ""}),
        # header equal to the cookie, but both are another session's valid CSRF value
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": b_csrf}, {"X-CSRF-Token": b_csrf}),
        # header and cookie equal, but forged
        ({"svc_refresh_token": refresh_a, "svc_csrf_token": "x.y"}, {"X-CSRF-Token": "x.y"}),
    ]
    for cookies, headers in attempts:
        response = await post_with_cookies(client, "/auth/refresh", cookies, headers)
        assert_error(response, 403, "csrf_failed")
        assert "set-cookie" not in response.headers

    # None of the 403s spent the token: session A still rotates with its own CSRF value.
    response = await post_with_cookies(
        client,
        "/auth/refresh",
        {"svc_refresh_token": refresh_a, "svc_csrf_token": a_csrf},
        {"X-CSRF-Token": a_csrf},
    )
    new_a = assert_token_response(response)
    assert new_a["refresh_token"] != refresh_a
    # And session B was untouched by any of it.
    assert_token_response(await refresh(client, b["refresh_token"]))


async def test_csrf_of_the_rotated_session_stays_valid_for_it(client: httpx.AsyncClient) -> None:
    """The CSRF value handed out at refresh is bound to the same session (family)."""
    await register(client)
    a, _ = await fresh_session(client)
    response = await refresh(client, a["refresh_token"])
    new = assert_token_response(response)
    new_csrf = cookie_value(set_cookies(response)["svc_csrf_token"])
    response = await post_with_cookies(
        client,
        "/auth/refresh",
        {"svc_refresh_token": new["refresh_token"], "svc_csrf_token": new_csrf},
        {"X-CSRF-Token": new_csrf},
    )
    assert_token_response(response)


async def test_refresh_without_cookie_or_body_is_401(client: httpx.AsyncClient) -> None:
    await register(client)
    _, csrf = await fresh_session(client)
    for cookies, headers in [
        ({}, {}),
        ({}, {"X-CSRF-Token": csrf}),
        ({"svc_csrf_token": csrf}, {"X-CSRF-Token": csrf}),
        ({"svc_refresh_token": ""}, {}),
    ]:
        response = await post_with_cookies(client, "/auth/refresh", cookies, headers)
        assert_error(response, 401)


async def test_cookie_refresh_with_unknown_token_is_401(client: httpx.AsyncClient) -> None:
    await register(client)
    _, csrf = await fresh_session(client)
    response = await post_with_cookies(
        client,
        "/auth/refresh",
        {"svc_refresh_token": "not-a-real-token", "svc_csrf_token": csrf},
        {"X-CSRF-Token": csrf},
    )
    assert_error(response, 401)


async def test_body_wins_over_cookie_and_needs_no_csrf(client: httpx.AsyncClient) -> None:
    await register(client)
    a, _ = await fresh_session(client)
    b, _ = await fresh_session(client)
    client.cookies.clear()
    response = await client.post(
        "/auth/refresh",
        json={"refresh_token": b["refresh_token"]},
        headers={"Cookie": f"svc_refresh_token={a['refresh_token']}"},
    )
    assert_token_response(response)
    client.cookies.clear()
    # B's token was the one spent; A's still rotates.
    assert_error(await refresh(client, b["refresh_token"]), 401, "refresh_token_reused")
    assert_token_response(await refresh(client, a["refresh_token"]))


# --- concurrency --------------------------------------------------------------------------


async def test_concurrent_refreshes_exactly_one_wins(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()

    async with asyncio.timeout(60):
        responses = await asyncio.gather(
            *(refresh(client, tokens["refresh_token"]) for _ in range(10))
        )
    codes = [r.status_code for r in responses]
    assert codes.count(200) == 1, codes
    assert codes.count(401) == 9, codes
    for r in responses:
        if r.status_code == 401:
            assert_error(r, 401)
    winner = next(r for r in responses if r.status_code == 200).json()
    # (The family may already be revoked here, depending on which request ran first.)

    # The losers presented a rotated token: the family is revoked, the winner's tokens too.
    client.cookies.clear()
    assert_error(await refresh(client, winner["refresh_token"]), 401)
    assert await me_status(client, winner["access_token"]) == 401
    assert await me_status(client, tokens["access_token"]) == 401


async def test_concurrent_refreshes_of_different_sessions_all_succeed(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    sessions = [(await fresh_session(client))[0] for _ in range(5)]
    async with asyncio.timeout(60):
        responses = await asyncio.gather(*(refresh(client, s["refresh_token"]) for s in sessions))
    for r in responses:
        assert_token_response(r)


# --- invalid tokens -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "a" * 43,
        "a" * 512,
        "not.a.jwt",
        "💥☃\u0000",
        " ",
    ],
)
async def test_invalid_refresh_tokens_are_401(client: httpx.AsyncClient, token: str) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    response = await refresh(client, token)
    assert_error(response, 401, "invalid_refresh_token")
    # An access token is not a refresh token.
    assert_error(await refresh(client, tokens["access_token"]), 401)
    # None of it disturbed the real session.
    assert_token_response(await refresh(client, tokens["refresh_token"]))


@pytest.mark.parametrize(
    "body",
    [
        {"refresh_token": ""},
        {"refresh_token": "a" * 513},
        {"refresh_token": "a" * 10_000},
        {"refresh_token": None},
        {"refresh_token": 12345},
        {"refresh_token": ["x"]},
        {},
        {"token": "x"},
    ],
)
async def test_malformed_refresh_bodies_are_422(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await client.post("/auth/refresh", json=body)
    assert response.status_code == 422, response.text
    assert isinstance(response.json()["detail"], list)


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'"string"',
        b"{",
        b"\xff\xfe",
        b"null",
        b'{"refresh_token": "\\ud800"}',  # a lone surrogate, escaped in JSON
    ],
)
async def test_non_object_refresh_bodies_are_never_500(
    client: httpx.AsyncClient, content: bytes
) -> None:
    response = await client.post(
        "/auth/refresh", content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code in (400, 401, 403, 422), response.text
    assert response.status_code != 500


async def test_very_long_refresh_cookie_is_never_500(client: httpx.AsyncClient) -> None:
    await register(client)
    _, csrf = await fresh_session(client)
    response = await post_with_cookies(
        client,
        "/auth/refresh",
        {"svc_refresh_token": "a" * 8000, "svc_csrf_token": csrf},
        {"X-CSRF-Token": csrf},
    )
    assert response.status_code in (401, 403, 422), response.text


# --- expiry (the clock moves; nothing sleeps) ---------------------------------------------


async def test_refresh_token_expires_after_refresh_ttl(
    make_client: AppFactory, clock: FakeClock
) -> None:
    async with make_client(refresh_ttl=60) as client:
        await register(client)
        a, _ = await fresh_session(client)
        b, _ = await fresh_session(client)
        clock.advance(59)
        assert_token_response(await refresh(client, a["refresh_token"]))
        clock.advance(1)
        assert_error(await refresh(client, b["refresh_token"]), 401, "invalid_refresh_token")


async def test_each_rotation_renews_the_refresh_ttl(
    make_client: AppFactory, clock: FakeClock
) -> None:
    async with make_client(refresh_ttl=60, session_max_age=0) as client:
        await register(client)
        tokens, _ = await fresh_session(client)
        current = tokens["refresh_token"]
        for _ in range(5):  # 5 x 50 s = 250 s, far past one refresh TTL
            clock.advance(50)
            current = assert_token_response(await refresh(client, current))["refresh_token"]
        clock.advance(59)
        last = assert_token_response(await refresh(client, current))
        clock.advance(60)
        assert_error(await refresh(client, last["refresh_token"]), 401, "invalid_refresh_token")


async def test_session_max_age_caps_rotation(make_client: AppFactory, clock: FakeClock) -> None:
    async with make_client(session_max_age=100, refresh_ttl=60) as client:
        await register(client)
        tokens, _ = await fresh_session(client)
        clock.advance(50)
        second = assert_token_response(await refresh(client, tokens["refresh_token"]))
        clock.advance(40)  # t = 90
        third = assert_token_response(await refresh(client, second["refresh_token"]))
        assert await me_status(client, third["access_token"]) == 200
        clock.advance(10)  # t = 100: the family is over, though the last rotation was 10 s ago
        assert_error(await refresh(client, third["refresh_token"]), 401)
        assert await me_status(client, third["access_token"]) == 401
        # A new login starts a new family.
        fresh, _ = await fresh_session(client)
        assert_token_response(await refresh(client, fresh["refresh_token"]))


async def test_a_rotation_just_before_session_end_lives_only_until_it(
    make_client: AppFactory, clock: FakeClock
) -> None:
    async with make_client(session_max_age=100, refresh_ttl=60) as client:
        await register(client)
        tokens, _ = await fresh_session(client)
        clock.advance(59)
        second = assert_token_response(await refresh(client, tokens["refresh_token"]))
        clock.advance(40)  # t = 99
        last = assert_token_response(await refresh(client, second["refresh_token"]))
        assert await me_status(client, last["access_token"]) == 200
        clock.advance(1)  # t = 100, though the refresh TTL alone would allow 59 s more
        assert_error(await refresh(client, last["refresh_token"]), 401)
        assert await me_status(client, last["access_token"]) == 401


async def test_session_max_age_zero_means_no_absolute_limit(
    make_client: AppFactory, clock: FakeClock
) -> None:
    # Each step is longer than the default session_max_age would allow in total after 3 steps.
    async with make_client(session_max_age=0, refresh_ttl=1_000_000) as client:
        await register(client)
        tokens, _ = await fresh_session(client)
        current = tokens
        for _ in range(4):  # 3.6 million seconds > 30 days (the default maximum)
            clock.advance(900_000)
            current = assert_token_response(await refresh(client, current["refresh_token"]))
            assert await me_status(client, current["access_token"]) == 200
        clock.advance(1_000_000)  # only the refresh TTL still applies
        assert_error(await refresh(client, current["refresh_token"]), 401)


async def test_default_session_max_age_applies(make_client: AppFactory, clock: FakeClock) -> None:
    async with make_client(refresh_ttl=1_000_000) as client:
        await register(client)
        tokens, _ = await fresh_session(client)
        current = tokens
        for _ in range(2):
            clock.advance(900_000)
            current = assert_token_response(await refresh(client, current["refresh_token"]))
        clock.advance(900_000)  # 2.7 million seconds > 2 592 000
        assert_error(await refresh(client, current["refresh_token"]), 401)


# --- inactive users -----------------------------------------------------------------------


async def test_deactivation_revokes_sessions_and_reactivation_does_not_revive_them(
    backend: Backend, clock: FakeClock
) -> None:
    app = create_app(make_config(backend), clock=clock)
    async with running(app) as client:
        gate = app.state.authgate
        await register(client)
        await register(client, "bob@example.com")
        a, _ = await fresh_session(client)
        b, _ = await fresh_session(client)
        bob, _ = await fresh_session(client, "bob@example.com")
        for s in (a, b, bob):
            assert await me_status(client, s["access_token"]) == 200

        user = await gate.accounts.set_active("ann@example.com", False)
        assert user is not None
        assert user.is_active is False

        for s in (a, b):
            assert_error(await refresh(client, s["refresh_token"]), 401)
            assert await me_status(client, s["access_token"]) == 401
        # Login is refused with the wrong-password answer.
        response = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": "correct horse battery"}
        )
        assert_error(response, 401, "invalid_credentials")
        # Another user is untouched.
        assert await me_status(client, bob["access_token"]) == 200
        assert_token_response(await refresh(client, bob["refresh_token"]))

        user = await gate.accounts.set_active("ann@example.com", True)
        assert user is not None
        assert user.is_active is True
        # The old sessions stay dead …
        for s in (a, b):
            assert_error(await refresh(client, s["refresh_token"]), 401)
            assert await me_status(client, s["access_token"]) == 401
        # … but a new login works.
        c, _ = await fresh_session(client)
        assert await me_status(client, c["access_token"]) == 200
        assert_token_response(await refresh(client, c["refresh_token"]))


async def test_inactive_user_is_refused_even_with_a_live_session(
    backend: Backend, clock: FakeClock
) -> None:
    """`is_active` is checked on every request, not only through the revocation it causes."""
    from authgate.store.users import UserStore

    app = create_app(make_config(backend), clock=clock)
    async with running(app) as client:
        gate = app.state.authgate
        user = await register(client)
        a, _ = await fresh_session(client)
        b, _ = await fresh_session(client)
        assert await me_status(client, a["access_token"]) == 200  # state cached, if cached
        # Flip the flag alone, leaving the sessions unrevoked (as a direct database edit would),
        # and tell the cache the user changed, as every writer of user flags does.
        async with gate.services.db.write() as s:
            await UserStore(s).set_flags(user["id"], clock(), is_active=False)
        await gate.services.user_changed(user["id"])
        assert await me_status(client, a["access_token"]) == 401
        assert_error(await refresh(client, a["refresh_token"]), 401)
        # Flipping it back: session B was never spent nor revoked, so it works again.
        async with gate.services.db.write() as s:
            await UserStore(s).set_flags(user["id"], clock(), is_active=True)
        await gate.services.user_changed(user["id"])
        assert await me_status(client, b["access_token"]) == 200


# --- logout -------------------------------------------------------------------------------


def assert_logout_response(response: httpx.Response, prefix: str = "/auth") -> None:
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"message"}
    assert isinstance(body["message"], str)
    cookies = set_cookies(response)
    assert set(cookies) == COOKIE_NAMES
    paths = {"svc_access_token": "/", "svc_refresh_token": prefix, "svc_csrf_token": "/"}
    for name, header in cookies.items():
        assert "Max-Age=0" in header, header
        attributes = [a.strip() for a in header.split(";")[1:]]
        assert f"Path={paths[name]}" in attributes, header
        assert cookie_value(header) in ("", '""'), header


async def test_logout_with_body_revokes_the_family(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    rotated = assert_token_response(await refresh(client, tokens["refresh_token"]))
    assert await me_status(client, rotated["access_token"]) == 200
    response = await client.post("/auth/logout", json={"refresh_token": rotated["refresh_token"]})
    assert_logout_response(response)
    assert_error(await refresh(client, rotated["refresh_token"]), 401)
    assert await me_status(client, rotated["access_token"]) == 401
    assert await me_status(client, tokens["access_token"]) == 401


async def test_logout_with_a_spent_token_of_the_family_revokes_it_too(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    rotated = assert_token_response(await refresh(client, tokens["refresh_token"]))
    client.cookies.clear()
    assert_logout_response(
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
    )
    assert_error(await refresh(client, rotated["refresh_token"]), 401)
    assert await me_status(client, rotated["access_token"]) == 401


async def test_logout_with_cookie_jar_clears_it(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)  # cookies stay in the jar
    assert set(client.cookies) >= COOKIE_NAMES
    assert (await client.get("/auth/me")).status_code == 200
    response = await client.post("/auth/logout")  # no body, no CSRF header
    assert_logout_response(response)
    assert not any(name in COOKIE_NAMES for name in client.cookies)
    assert_error(await refresh(client, tokens["refresh_token"]), 401)
    assert await me_status(client, tokens["access_token"]) == 401


async def test_logout_with_only_the_refresh_cookie(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    assert await me_status(client, tokens["access_token"]) == 200
    response = await post_with_cookies(
        client, "/auth/logout", {"svc_refresh_token": tokens["refresh_token"]}
    )
    assert_logout_response(response)
    assert_error(await refresh(client, tokens["refresh_token"]), 401)
    assert await me_status(client, tokens["access_token"]) == 401


async def test_logout_with_only_a_bearer_token(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    assert await me_status(client, tokens["access_token"]) == 200
    response = await client.post("/auth/logout", headers=bearer(tokens["access_token"]))
    assert_logout_response(response)
    assert await me_status(client, tokens["access_token"]) == 401
    assert_error(await refresh(client, tokens["refresh_token"]), 401)


async def test_logout_with_only_the_access_cookie(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    response = await post_with_cookies(
        client, "/auth/logout", {"svc_access_token": tokens["access_token"]}
    )
    assert_logout_response(response)
    assert await me_status(client, tokens["access_token"]) == 401
    assert_error(await refresh(client, tokens["refresh_token"]), 401)


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {},
        {"json": {"refresh_token": "garbage"}},
        {"json": {"refresh_token": "a" * 512}},
        {"headers": {"Authorization": "Bearer garbage"}},
        {"headers": {"Cookie": "svc_refresh_token=garbage; svc_access_token=garbage"}},
    ],
)
async def test_logout_with_nothing_or_garbage_is_200(
    client: httpx.AsyncClient, kwargs: dict[str, Any]
) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    client.cookies.clear()
    assert_logout_response(await client.post("/auth/logout", **kwargs))
    # Nothing real was touched.
    assert await me_status(client, tokens["access_token"]) == 200
    assert_token_response(await refresh(client, tokens["refresh_token"]))


async def test_logout_twice_and_with_revoked_tokens_is_200(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens, _ = await fresh_session(client)
    for _ in range(3):
        client.cookies.clear()
        assert_logout_response(
            await client.post(
                "/auth/logout",
                json={"refresh_token": tokens["refresh_token"]},
                headers=bearer(tokens["access_token"]),
            )
        )
    # A family revoked by reuse detection logs out fine too.
    other, _ = await fresh_session(client)
    assert_token_response(await refresh(client, other["refresh_token"]))
    assert_error(await refresh(client, other["refresh_token"]), 401, "refresh_token_reused")
    client.cookies.clear()
    assert_logout_response(
        await client.post("/auth/logout", json={"refresh_token": other["refresh_token"]})
    )


async def test_logout_needs_no_csrf_even_with_cookies(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens, csrf = await fresh_session(client)
    response = await post_with_cookies(
        client,
        "/auth/logout",
        {"svc_refresh_token": tokens["refresh_token"], "svc_csrf_token": csrf},
        {"X-CSRF-Token": "wrong"},
    )
    assert_logout_response(response)
    assert_error(await refresh(client, tokens["refresh_token"]), 401)


async def test_logout_of_one_session_leaves_another(client: httpx.AsyncClient) -> None:
    await register(client)
    a, _ = await fresh_session(client)
    b, _ = await fresh_session(client)
    assert await me_status(client, a["access_token"]) == 200
    assert await me_status(client, b["access_token"]) == 200
    assert_logout_response(
        await client.post("/auth/logout", json={"refresh_token": a["refresh_token"]})
    )
    client.cookies.clear()
    assert await me_status(client, a["access_token"]) == 401
    assert await me_status(client, b["access_token"]) == 200
    assert_token_response(await refresh(client, b["refresh_token"]))


async def test_logout_clears_cookies_under_a_custom_prefix(make_client: AppFactory) -> None:
    async with make_client(prefix="/id") as client:
        await client.post(
            "/id/register", json={"email": "ann@example.com", "password": "correct horse battery"}
        )
        response = await client.post(
            "/id/login", json={"email": "ann@example.com", "password": "correct horse battery"}
        )
        assert response.status_code == 200
        assert_logout_response(await client.post("/id/logout"), prefix="/id")


# --- CSRF on other cookie-authenticated unsafe requests -----------------------------------


async def test_email_verification_by_cookie_needs_csrf(client: httpx.AsyncClient) -> None:
    await register(client)
    a, a_csrf = await fresh_session(client)
    _, b_csrf = await fresh_session(client)
    access = a["access_token"]

    for cookies, headers in [
        ({"svc_access_token": access, "svc_csrf_token": a_csrf}, {}),
        ({"svc_access_token": access}, {}),
        ({"svc_access_token": access, "svc_csrf_token": a_csrf}, {"X-CSRF-Token": "wrong"}),
        ({"svc_access_token": access, "svc_csrf_token": "other"}, {"X-CSRF-Token": a_csrf}),
        ({"svc_access_token": access, "svc_csrf_token": b_csrf}, {"X-CSRF-Token": b_csrf}),
    ]:
        response = await post_with_cookies(client, "/auth/email-verification", cookies, headers)
        assert_error(response, 403, "csrf_failed")

    # With the right value the request gets through; no sender is configured, hence 501.
    response = await post_with_cookies(
        client,
        "/auth/email-verification",
        {"svc_access_token": access, "svc_csrf_token": a_csrf},
        {"X-CSRF-Token": a_csrf},
    )
    assert_error(response, 501, "not_configured")

    # A bearer header needs no CSRF value.
    client.cookies.clear()
    response = await client.post("/auth/email-verification", headers=bearer(access))
    assert_error(response, 501, "not_configured")

    # No credentials at all: 401, not 403.
    client.cookies.clear()
    assert_error(await client.post("/auth/email-verification"), 401, "not_authenticated")


async def test_get_me_by_cookie_needs_no_csrf(client: httpx.AsyncClient) -> None:
    await register(client)
    await login(client)
    assert (await client.get("/auth/me")).status_code == 200
