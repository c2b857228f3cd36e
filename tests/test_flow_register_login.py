"""Register, login and GET /me through HTTP (interface.md §4), on both backends."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import PASSWORD, AppFactory, bearer, login, register


async def test_register_returns_user(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/auth/register", json={"email": "ann@example.com", "password": PASSWORD}
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "email", "is_active", "is_superuser", "email_verified"}
    assert isinstance(body["id"], int)
    assert body["email"] == "ann@example.com"
    assert body["is_active"] is True
    assert body["is_superuser"] is False
    assert body["email_verified"] is False


async def test_register_same_email_any_case_is_409(client: httpx.AsyncClient) -> None:
    await register(client, "ann@example.com")
    for email in ("ann@example.com", "ANN@Example.COM"):
        response = await client.post("/auth/register", json={"email": email, "password": PASSWORD})
        assert response.status_code == 409
        assert response.json() == {
            "detail": "This email is already registered.",
            "code": "email_taken",
        }


@pytest.mark.parametrize(
    ("email", "password"),
    [
        ("not-an-email", PASSWORD),
        ("ann@", PASSWORD),
        ("", PASSWORD),
        ("ann@example.com", "short"),
        ("ann@example.com", "1234567"),
        ("ann@example.com", "a" * 73),
        ("ann@example.com", "é" * 37),  # 37 characters, 74 bytes
    ],
)
async def test_register_rejects_bad_input_with_422(
    client: httpx.AsyncClient, email: str, password: str
) -> None:
    response = await client.post("/auth/register", json={"email": email, "password": password})
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)
    # Nothing was stored: the same address registers fine afterwards.
    await register(client, "ann@example.com")


async def test_password_limits_are_inclusive(client: httpx.AsyncClient) -> None:
    await register(client, "eight@example.com", "xq7!Lm2p")
    await register(client, "bytes@example.com", "é" * 36)  # exactly 72 bytes
    await login(client, "eight@example.com", "xq7!Lm2p")
    await login(client, "bytes@example.com", "é" * 36)


async def test_validation_errors_never_echo_the_password(client: httpx.AsyncClient) -> None:
    secret = "s3cr3t-" + "x" * 80
    response = await client.post("/auth/register", json={"email": "bad", "password": secret})
    assert response.status_code == 422
    assert "s3cr3t" not in response.text


async def test_login_returns_tokens_and_sets_cookies(client: httpx.AsyncClient) -> None:
    await register(client)
    response = await client.post(
        "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"access_token", "refresh_token", "token_type"}
    assert body["token_type"] == "bearer"
    cookies = {c.split("=", 1)[0]: c for c in response.headers.get_list("set-cookie")}
    assert set(cookies) == {"svc_access_token", "svc_refresh_token", "svc_csrf_token"}
    access, refresh, csrf = (
        cookies["svc_access_token"],
        cookies["svc_refresh_token"],
        cookies["svc_csrf_token"],
    )
    assert access.startswith(f"svc_access_token={body['access_token']};")
    assert refresh.startswith(f"svc_refresh_token={body['refresh_token']};")
    for cookie in (access, refresh, csrf):
        assert "; Secure" in cookie
        assert "SameSite=lax" in cookie
    assert "HttpOnly" in access
    assert "HttpOnly" in refresh
    assert "HttpOnly" not in csrf
    assert "Path=/;" in access or access.endswith("Path=/")
    assert "Path=/auth" in refresh
    assert "Path=/;" in csrf or csrf.endswith("Path=/")
    assert "Max-Age=900" in access
    assert "Max-Age=1209600" in refresh
    assert response.headers["cache-control"] == "no-store"


async def test_cookie_settings_follow_configuration(make_client: AppFactory) -> None:
    async with make_client(
        cookie_secure=False, cookie_samesite="strict", cookie_domain="example.test", prefix="/id"
    ) as client:
        await client.post("/id/register", json={"email": "ann@example.com", "password": PASSWORD})
        response = await client.post(
            "/id/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
    assert response.status_code == 200
    for cookie in response.headers.get_list("set-cookie"):
        assert "Secure" not in cookie
        assert "SameSite=strict" in cookie
        assert "Domain=example.test" in cookie
    refresh = next(c for c in response.headers.get_list("set-cookie") if "svc_refresh" in c)
    assert "Path=/id" in refresh


async def test_login_failures_are_indistinguishable(client: httpx.AsyncClient) -> None:
    await register(client)
    await register(client, "off@example.com")
    from tests.conftest import TEST_SECRET  # noqa: F401 - same app, same secret

    async with asyncio.timeout(30):
        wrong_password = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": "wrong password"}
        )
        unknown_email = await client.post(
            "/auth/login", json={"email": "nobody@example.com", "password": PASSWORD}
        )
        not_an_email = await client.post(
            "/auth/login", json={"email": "nobody", "password": PASSWORD}
        )
        too_long = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": "x" * 200}
        )
    for response in (wrong_password, unknown_email, not_an_email, too_long):
        assert response.status_code == 401
        assert response.content == wrong_password.content
        assert response.json() == {
            "detail": "Invalid email or password.",
            "code": "invalid_credentials",
        }
        assert response.headers["www-authenticate"] == "Bearer"
        assert "set-cookie" not in response.headers


async def test_login_matches_email_without_regard_to_case(client: httpx.AsyncClient) -> None:
    await register(client, "Ann.Lee@Example.com")
    tokens = await login(client, "ann.lee@example.COM")
    me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
    assert me.json()["email"] == "Ann.Lee@example.com"


async def test_me_with_bearer_token(client: httpx.AsyncClient) -> None:
    user = await register(client)
    tokens = await login(client)
    client.cookies.clear()
    response = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
    assert response.status_code == 200
    assert response.json() == user
    assert response.headers["cache-control"] == "no-store"


async def test_me_with_cookie(client: httpx.AsyncClient) -> None:
    user = await register(client)
    await login(client)
    response = await client.get("/auth/me")
    assert response.status_code == 200
    assert response.json() == user


async def test_bearer_header_wins_over_cookie(client: httpx.AsyncClient) -> None:
    await register(client, "ann@example.com")
    await register(client, "bob@example.com")
    await login(client, "ann@example.com")  # Ann's cookies stay in the jar
    bob = (
        await client.post("/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    ).json()
    client.cookies.clear()
    ann = await login(client, "ann@example.com")
    response = await client.get("/auth/me", headers=bearer(bob["access_token"]))
    assert response.json()["email"] == "bob@example.com"
    assert ann["access_token"] != bob["access_token"]
    # A header that is present but invalid does not fall back to the cookie.
    response = await client.get("/auth/me", headers=bearer("garbage"))
    assert response.status_code == 401


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not.a.jwt"},
        {"Authorization": "Basic YW5uOnB3"},
        {"Authorization": "Bearer " + "a" * 5000},
    ],
)
async def test_me_unauthenticated_is_401(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    response = await client.get("/auth/me", headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response.headers["www-authenticate"] == "Bearer"


async def test_refresh_token_is_not_an_access_token(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    response = await client.get("/auth/me", headers=bearer(tokens["refresh_token"]))
    assert response.status_code == 401


async def test_access_token_expires(make_client: AppFactory, clock: object) -> None:
    from tests.conftest import FakeClock

    assert isinstance(clock, FakeClock)
    async with make_client(access_ttl=60) as client:
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        clock.advance(59)
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 200
        clock.advance(1)
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 401


async def test_tokens_from_another_secret_are_refused(make_client: AppFactory) -> None:
    async with make_client() as client:
        await register(client)
        tokens = await login(client)
    async with make_client(secret_key="another-secret-key-also-long-enough-9876543210") as client:
        client.cookies.clear()
        response = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert response.status_code == 401


async def test_concurrent_registrations_never_fail(client: httpx.AsyncClient) -> None:
    """50 at once, 10 addresses: only 201 and 409, and exactly one 201 per address."""

    async def attempt(i: int) -> httpx.Response:
        return await client.post(
            "/auth/register", json={"email": f"user{i % 10}@example.com", "password": PASSWORD}
        )

    async with asyncio.timeout(120):
        responses = await asyncio.gather(*(attempt(i) for i in range(50)))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {201, 409}, codes
    assert codes.count(201) == 10
