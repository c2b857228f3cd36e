"""Security hardening (issue 4): each test fails if its protection is removed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from argon2 import PasswordHasher
from pydantic import ValidationError
from sqlalchemy import func, select

from authgate import AuthConfig, create_app
from authgate.config import ConfigError
from authgate.datadir import ensure_secret_key
from authgate.store.db import Database
from authgate.store.models import User
from authgate.store.users import UserStore
from tests.conftest import (
    PASSWORD,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    bearer,
    login,
    make_config,
    register,
    running,
)

# --- configuration refused at start-up -------------------------------------------------


def test_production_without_a_secret_key_refuses_to_start(tmp_path: Path) -> None:
    config = AuthConfig(data_dir=tmp_path, database_url="postgresql://db.invalid/authgate")
    with pytest.raises(ConfigError, match="AUTHGATE_SECRET_KEY must be set"):
        ensure_secret_key(config)
    assert not (tmp_path / "secret_key").exists()


@pytest.mark.parametrize(
    "key",
    [
        "short",
        "a" * 64,  # long, one character
        "changeme-changeme-changeme-changeme",  # long, eight different characters
        "0123456789" * 2,  # varied but short
    ],
)
def test_weak_secret_keys_are_refused_without_quoting_them(key: str) -> None:
    with pytest.raises(ValidationError) as info:
        AuthConfig(secret_key=key)
    assert key not in str(info.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("login_limit_per_ip", "lots"),
        ("cors_origins", "*"),
        ("cors_origins", "example.com"),
        ("trusted_proxies", "10.0.0.0/33"),
    ],
)
def test_bad_settings_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError):
        AuthConfig(**{field: value})


# --- passwords --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "password",
    [
        "password1",
        "PASSWORD1",
        "Qwertyuiop",
        "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44\uff11",
    ],
)
async def test_common_passwords_are_refused_on_register(
    client: httpx.AsyncClient, password: str
) -> None:
    response = await client.post(
        "/auth/register", json={"email": "ann@example.com", "password": password}
    )
    assert response.status_code == 422
    assert "most commonly used" in response.text
    await register(client)  # nothing was stored


async def test_common_passwords_are_refused_on_reset(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        await client.post("/auth/password-reset", json={"email": "ann@example.com"})
        (_, token), *_ = await outbox.wait_for(1)
        response = await client.post(
            "/auth/password-reset/confirm", json={"token": token, "new_password": "iloveyou1"}
        )
        assert response.status_code == 422
        assert "most commonly used" in response.text
        response = await client.post(
            "/auth/password-reset/confirm", json={"token": token, "new_password": "a fresh one 42"}
        )
        assert response.status_code == 200


async def test_nfkc_is_applied_on_every_path(make_client: AppFactory, outbox: Outbox) -> None:
    ligature, plain = "\ufb01nancial plan 2026", "financial plan 2026"  # "ﬁ" vs "fi"
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client, password=ligature)
        await login(client, password=plain)
        await login(client, password=ligature)
        await client.post("/auth/password-reset", json={"email": "ann@example.com"})
        (_, token), *_ = await outbox.wait_for(1)
        response = await client.post(
            "/auth/password-reset/confirm",
            json={"token": token, "new_password": "\uff53\uff45\uff43\uff52\uff45\uff54 garden 7"},
        )
        assert response.status_code == 200
        await login(client, password="secret garden 7")


async def test_outdated_hash_parameters_are_upgraded_at_login(
    backend: Backend, clock: FakeClock
) -> None:
    app = create_app(make_config(backend), clock=clock)
    gate = app.state.authgate
    async with running(app) as client:
        user = await register(client)
        old = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(PASSWORD)
        async with gate.services.db.write() as s:
            await UserStore(s).set_password(user["id"], old, clock())
        await login(client)
        async with gate.services.db.read() as s:
            stored = (await UserStore(s).by_id(user["id"])).password_hash  # type: ignore[union-attr]
        assert stored != old
        assert "m=19456,t=2,p=1" in stored
        await login(client)


async def test_over_long_password_at_login_is_a_plain_401(client: httpx.AsyncClient) -> None:
    await register(client)
    response = await client.post(
        "/auth/login", json={"email": "ann@example.com", "password": PASSWORD + "x" * 1000}
    )
    assert response.status_code == 401
    assert response.json()["code"] == "invalid_credentials"


# --- rate limits and lock-out ---------------------------------------------------------


async def test_limits_are_configurable(make_client: AppFactory) -> None:
    async with make_client(rate_limits=True, login_limit_per_ip="3/minute") as client:
        codes = [
            (
                await client.post("/auth/login", json={"email": "x@example.com", "password": "y"})
            ).status_code
            for _ in range(4)
        ]
    assert codes == [401, 401, 401, 429]


async def test_password_reset_works_while_logins_are_locked(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(rate_limits=True, password_reset_send_fn=outbox) as client:
        await register(client)
        for _ in range(10):
            await client.post(
                "/auth/login", json={"email": "ann@example.com", "password": "wrong guess"}
            )
        locked = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert locked.status_code == 429
        assert int(locked.headers["retry-after"]) >= 1
        response = await client.post("/auth/password-reset", json={"email": "ann@example.com"})
        assert response.status_code == 200
        (_, token), *_ = await outbox.wait_for(1)
        response = await client.post(
            "/auth/password-reset/confirm", json={"token": token, "new_password": "new secret 123"}
        )
        assert response.status_code == 200


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


# --- response hygiene ------------------------------------------------------------------


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


async def test_json_bodies_only(client: httpx.AsyncClient) -> None:
    body = b'{"email": "ann@example.com", "password": "correct horse battery"}'
    for content_type in (None, "text/plain", "application/x-www-form-urlencoded"):
        headers = {"Content-Type": content_type} if content_type else {}
        response = await client.post("/auth/register", content=body, headers=headers)
        assert response.status_code == 422, content_type
    await register(client)  # none of them created the account


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


# --- hostile input ---------------------------------------------------------------------


async def _user_count(backend: Backend) -> int:
    db = Database(make_config(backend))
    try:
        async with db.read() as s:
            return int(await s.scalar(select(func.count()).select_from(User)) or 0)
    finally:
        await db.dispose()


async def test_duplicate_json_keys_are_refused(client: httpx.AsyncClient, backend: Backend) -> None:
    body = (
        b'{"email": "ann@example.com", "email": "bob@example.com", '
        b'"password": "correct horse battery"}'
    )
    response = await client.post(
        "/auth/register", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert await _user_count(backend) == 0


async def test_duplicated_auth_cookies_are_not_trusted(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    access = tokens["access_token"]
    both = f"svc_access_token={access}; svc_access_token=planted"
    assert (await client.get("/auth/me", headers={"Cookie": both})).status_code == 401
    reversed_ = f"svc_access_token=planted; svc_access_token={access}"
    assert (await client.get("/auth/me", headers={"Cookie": reversed_})).status_code == 401
    assert (
        await client.get("/auth/me", headers={"Cookie": f"svc_access_token={access}"})
    ).status_code == 200
    refresh = tokens["refresh_token"]
    response = await client.post(
        "/auth/refresh",
        headers={"Cookie": f"svc_refresh_token=planted; svc_refresh_token={refresh}"},
    )
    assert response.status_code == 401
    # The real token was not spent by that request.
    response = await client.post("/auth/refresh", json={"refresh_token": refresh})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "separator",
    [b" ", b"\t", b"\xa0", b"\x85", b" \xa0 "],
    ids=["space", "tab", "nbsp", "nel", "mixed"],
)
async def test_a_name_spelled_with_trailing_whitespace_is_a_duplicate(
    client: httpx.AsyncClient, separator: bytes
) -> None:
    """`svc_access_token=V; svc_access_token =A`: the reader strips the name (U+00A0 and U+0085
    too), so the duplicate check must count it as the same name: neither is used."""
    await register(client)
    access = (await login(client))["access_token"].encode()
    client.cookies.clear()
    for cookie in (
        b"svc_access_token=planted; svc_access_token" + separator + b"=" + access,
        b"svc_access_token" + separator + b"=" + access + b"; svc_access_token=planted",
    ):
        me = await client.get("/auth/me", headers=[(b"cookie", cookie)])
        assert me.status_code == 401, cookie
    alone = b"svc_access_token" + separator + b"=" + access
    assert (await client.get("/auth/me", headers=[(b"cookie", alone)])).status_code == 200


async def test_one_cookie_name_in_two_cookie_headers_is_a_duplicate(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    access, refresh = tokens["access_token"], tokens["refresh_token"]
    me = await client.get(
        "/auth/me",
        headers=[("cookie", "svc_access_token=planted"), ("cookie", f"svc_access_token={access}")],
    )
    assert me.status_code == 401
    response = await client.post(
        "/auth/refresh",
        headers=[
            ("cookie", "svc_refresh_token=planted"),
            ("cookie", f"svc_refresh_token ={refresh}"),
        ],
    )
    assert response.status_code == 401
    # The real token was not spent by that request.
    response = await client.post("/auth/refresh", json={"refresh_token": refresh})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer " + "a" * 100_000},
        {"Cookie": "svc_access_token=" + "b" * 100_000},
        {"X-CSRF-Token": "c" * 100_000, "Cookie": "svc_csrf_token=" + "c" * 100_000},
        {"X-Request-ID": "d" * 100_000},
        {"User-Agent": "e" * 100_000},
    ],
)
async def test_huge_headers_are_a_clean_4xx(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    me = await client.get("/auth/me", headers=headers)
    assert me.status_code == 401
    response = await client.post("/auth/email-verification", headers=headers)
    assert response.status_code in (401, 403)
    response = await client.post("/auth/refresh", headers=headers)
    assert response.status_code in (401, 403)


@pytest.mark.parametrize(
    ("email", "status"),
    [
        ("ann@bücher.example", 201),  # IDN domain
        ("用户@例子.广告", 201),  # internationalised local part and domain
        ('"john doe"@example.com', 422),  # quoted local part: refused
        ("ann@example.com\r\nBcc: victim@example.com", 422),
        ("ann@[127.0.0.1]", 422),  # address literal
        ("ann@localhost", 422),  # no dot in the domain
    ],
)
async def test_unusual_addresses(client: httpx.AsyncClient, email: str, status: int) -> None:
    response = await client.post("/auth/register", json={"email": email, "password": PASSWORD})
    assert response.status_code == status, response.text
    if status == 201:
        await login(client, email, PASSWORD)


async def test_look_alike_addresses_are_one_account(client: httpx.AsyncClient) -> None:
    await register(client, "ann@example.com")
    fullwidth = "\uff41\uff4e\uff4e@example.com"  # "ann" in fullwidth letters
    response = await client.post("/auth/register", json={"email": fullwidth, "password": PASSWORD})
    assert response.status_code in (409, 422)
    # A different script is a different mailbox, and so a different account.
    cyrillic = "\u0430nn@example.com"  # a Cyrillic "a"
    response = await client.post("/auth/register", json={"email": cyrillic, "password": PASSWORD})
    assert response.status_code in (201, 422)


async def test_idle_background_queue_after_many_unknown_reset_requests(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client, asyncio.timeout(60):
        for i in range(50):
            response = await client.post(
                "/auth/password-reset", json={"email": f"ghost{i}@example.com"}
            )
            assert response.status_code == 200
    assert outbox.sent == []
