"""The routes of web/routes/auth.py through HTTP, on both backends: register, login, GET /me,
refresh (rotation, reuse, CSRF, expiry), logout and deactivation (interface.md §4,
contract.md §4)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt
import pytest
from argon2 import PasswordHasher
from sqlalchemy import func, select, update

from authgate import create_app
from authgate.factors.hashing import PasswordHashing
from authgate.store.models import RefreshToken, Session, User
from authgate.store.users import UserStore
from authgate.tokens.keys import Keys, new_session_id
from tests.helpers import (
    ANN,
    COOKIE_NAMES,
    FULLWIDTH_SAM,
    LONG_S_SAM,
    NEW_PASSWORD,
    PASSWORD,
    TEST_SECRET,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    assert_error,
    assert_token_response,
    b64json,
    bearer,
    cookie_value,
    fresh_session,
    login,
    login_status,
    make_app,
    make_config,
    post_json,
    post_with_cookies,
    refresh,
    register,
    running,
    set_cookies,
    sign,
)

#: Far cheaper than today's parameters: a login with it re-hashes the password.
OUTDATED = PasswordHasher(time_cost=1, memory_cost=4096, parallelism=1)
#: NFKC turns each U+FDFA into 18 characters: a 372-character key (issue 10, F11).
OVERFLOWING = "\ufdfa" * 20 + "@example.com"
OLD_SECRET = "old-secret-key-that-is-long-enough-0123456789"
NEW_SECRET = "new-secret-key-that-is-long-enough-9876543210"

# --- helpers ------------------------------------------------------------------------------


async def me_status(client: httpx.AsyncClient, access_token: str) -> int:
    client.cookies.clear()
    response = await client.get("/auth/me", headers=bearer(access_token))
    if response.status_code == 401:
        assert_error(response, 401)
    return response.status_code


# --- register, login, GET /me -----------------------------------------------------------


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
    from tests.helpers import TEST_SECRET  # noqa: F401 - same app, same secret

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
    from tests.helpers import FakeClock

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


# --- registration: passwords and addresses -----------------------------------------------


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


# --- the email key (issue 10, F11 and F12; its properties: unit/factors/test_emails.py) ---


async def test_an_address_that_nfkc_expands_past_the_column_is_a_clean_4xx(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        response = await post_json(
            client, "/auth/register", {"email": OVERFLOWING, "password": PASSWORD}
        )
        assert response.status_code == 422, response.text
        assert "compatibility characters" in response.text
        response = await post_json(
            client, "/auth/login", {"email": OVERFLOWING, "password": PASSWORD}
        )
        assert response.status_code == 401, response.text
        response = await post_json(client, "/auth/password-reset", {"email": OVERFLOWING})
        assert response.status_code == 200, response.text
        # The service is whole afterwards: an ordinary account registers and logs in.
        await register(client, "after@example.com")
        await login(client, "after@example.com")
    assert outbox.sent == []


@pytest.mark.parametrize("look_alike", [FULLWIDTH_SAM, LONG_S_SAM])
async def test_look_alikes_of_an_address_are_refused_at_registration(
    client: httpx.AsyncClient, look_alike: str
) -> None:
    # Before anyone has the address (the squatter's move) and after.
    response = await post_json(
        client, "/auth/register", {"email": look_alike, "password": PASSWORD}
    )
    assert response.status_code == 422, response.text
    assert "compatibility characters" in response.text
    await register(client, "sam@example.com")
    response = await post_json(
        client, "/auth/register", {"email": look_alike, "password": PASSWORD}
    )
    assert response.status_code == 422, response.text
    # ...and a look-alike does not log into the real account either.
    response = await post_json(client, "/auth/login", {"email": look_alike, "password": PASSWORD})
    assert response.status_code == 401, response.text


# --- login: stored hashes ----------------------------------------------------------------


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


# --- logins racing a password reset or a deactivation (security findings F1, F2) ---------


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


# --- access tokens at GET /me ------------------------------------------------------------


async def test_forged_tokens_are_refused_by_me(client: httpx.AsyncClient) -> None:
    await register(client)
    real = (await login(client))["access_token"]
    client.cookies.clear()
    keys = Keys(TEST_SECRET.encode(), issuer="authgate", audience="authgate")
    real_claims = jwt.decode(real, options={"verify_signature": False})
    # Re-signed with the app's own key and nothing changed: accepted (the setup is right).
    resigned = sign(keys, real_claims)
    assert (await client.get("/auth/me", headers=bearer(resigned))).status_code == 200
    payload = b64json(real_claims)
    forged = [
        f"{b64json({'alg': 'none', 'typ': 'at+jwt'})}.{payload}.",
        f"{b64json({'alg': 'None', 'typ': 'at+jwt'})}.{payload}.",
        sign(keys, real_claims, algorithm="HS512"),
        sign(keys, real_claims, headers={"typ": "JWT"}),
        sign(keys, {**real_claims, "exp": real_claims["iat"] - 1}),
        sign(keys, {**real_claims, "aud": "other"}),
        sign(keys, {k: v for k, v in real_claims.items() if k != "jti"}),
        real.rsplit(".", 1)[0] + ".",
    ]
    for token in forged:
        response = await client.get("/auth/me", headers=bearer(token))
        assert response.status_code == 401, token
        assert response.json()["code"] == "not_authenticated"
        # A forged cookie fares no better.
        client.cookies.set("svc_access_token", token)
        assert (await client.get("/auth/me")).status_code == 401
        client.cookies.clear()


async def test_access_token_for_a_session_that_does_not_exist_is_refused(
    client: httpx.AsyncClient,
) -> None:
    user = await register(client)
    keys = Keys(TEST_SECRET.encode(), issuer="authgate", audience="authgate")
    token = keys.issue_access(
        user_id=user["id"], session_id=new_session_id(), now=datetime.now(UTC), ttl=900
    )
    assert (await client.get("/auth/me", headers=bearer(token))).status_code == 401


async def test_rotation_through_http(make_client: AppFactory) -> None:
    async with make_client(secret_key=OLD_SECRET) as client:
        await register(client)
        tokens = await login(client)
    async with make_client(secret_key=NEW_SECRET, secret_key_previous=OLD_SECRET) as client:
        client.cookies.clear()
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 200
        # Refresh tokens are opaque database records: they survive any key change.
        response = await client.post(
            "/auth/refresh", json={"refresh_token": tokens["refresh_token"]}
        )
        assert response.status_code == 200
        tokens = response.json()
    async with make_client(secret_key=NEW_SECRET) as client:
        client.cookies.clear()
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 200


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


# --- purge: what it leaves of sessions and token families (F10) --------------------------


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
