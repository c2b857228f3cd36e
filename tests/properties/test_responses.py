"""What every response of the API carries, on both backends: the contract's error shape for
unknown paths and methods, `X-Content-Type-Options: nosniff`, `Cache-Control: no-store` on
everything that holds a token or a profile, and CORS headers only for configured origins."""

from __future__ import annotations

import httpx

from tests.helpers import PASSWORD, AppFactory, bearer, login, register


async def test_unknown_paths_are_404_in_the_contract_shape(client: httpx.AsyncClient) -> None:
    for method, path in (
        ("GET", "/nope"),
        ("POST", "/auth/nope"),
        ("GET", "/auth"),
        ("GET", "/auth/health"),
        ("GET", "/auth/me/extra"),
        ("GET", "/../etc/passwd"),
        ("GET", "/%00"),
    ):
        response = await client.request(method, path)
        assert response.status_code == 404, (method, path, response.status_code)
        assert response.json()["code"] == "not_found"
        assert set(response.json()) == {"detail", "code"}
        assert response.headers["x-content-type-options"] == "nosniff"


async def test_wrong_method_is_405_in_the_contract_shape(client: httpx.AsyncClient) -> None:
    for method, path in (
        ("GET", "/auth/register"),
        ("PUT", "/auth/login"),
        ("DELETE", "/auth/logout"),
        ("PATCH", "/auth/refresh"),
        ("POST", "/auth/me"),
        ("GET", "/auth/password-reset/confirm"),
        ("POST", "/health"),
        ("DELETE", "/readiness"),
    ):
        response = await client.request(method, path)
        assert response.status_code == 405, (method, path, response.status_code)
        assert response.json() == {
            "detail": response.json()["detail"],
            "code": "method_not_allowed",
        }
        assert isinstance(response.json()["detail"], str)
        assert "allow" in response.headers
        assert response.headers["x-content-type-options"] == "nosniff"


async def test_every_response_carries_nosniff(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    responses = [
        await client.get("/health"),
        await client.get("/readiness"),
        await client.get("/openapi.json"),
        await client.get("/auth/me", headers=bearer(tokens["access_token"])),
        await client.get("/auth/me"),
        await client.post("/auth/login", json={"email": "ann@example.com", "password": "wrong!!!"}),
        await client.post("/auth/register", json={}),
        await client.post("/auth/refresh", json={"refresh_token": tokens["refresh_token"]}),
        await client.post("/auth/logout"),
        await client.get("/nope"),
    ]
    for response in responses:
        assert response.headers.get("x-content-type-options") == "nosniff", response.url


async def test_no_store_on_everything_that_carries_a_token_or_profile(
    client: httpx.AsyncClient,
) -> None:
    register_response = await client.post(
        "/auth/register", json={"email": "ann@example.com", "password": PASSWORD}
    )
    login_response = await client.post(
        "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
    )
    tokens = login_response.json()
    me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
    refreshed = await client.post("/auth/refresh", json={"refresh_token": tokens["refresh_token"]})
    logout = await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
    for response in (register_response, login_response, me, refreshed, logout):
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-content-type-options"] == "nosniff"


async def test_no_cors_unless_configured(make_client: AppFactory) -> None:
    evil = {"Origin": "https://evil.example"}
    async with make_client() as client:
        response = await client.get("/health", headers=evil)
        assert "access-control-allow-origin" not in response.headers
        preflight = await client.options(
            "/auth/login",
            headers={**evil, "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in preflight.headers
    async with make_client(cors_origins="https://app.example") as client:
        ok = await client.get("/health", headers={"Origin": "https://app.example"})
        assert ok.headers["access-control-allow-origin"] == "https://app.example"
        assert ok.headers["access-control-allow-credentials"] == "true"
        response = await client.get("/health", headers=evil)
        assert "access-control-allow-origin" not in response.headers
