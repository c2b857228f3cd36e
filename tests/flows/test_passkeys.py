"""Passkeys through HTTP (contract §9), on both backends, with a software authenticator
(tests/helpers.py): real P-256 keys and signatures, verified by the real py_webauthn.

Registration and the account's list, sign-in with no email (`aal2`), the second step of a
password login, and every refusal: a replayed assertion, a stale challenge, a challenge
without its browser's cookie or with another browser's, a counter going backwards, no user
verification, a wrong origin or RP id, another user's pending session; first-factor and
removal revocations; malformed credentials (400, never 500); and no credential material in
the events.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from tests.helpers import (
    PASSWORD,
    Backend,
    FakeClock,
    SmtpSink,
    SoftAuthenticator,
    add_passkey,
    assert_error,
    b64url,
    bearer,
    claims_of,
    cookie_value,
    gate_and_app,
    login,
    refresh,
    register,
    running,
    set_cookies,
)

ANN = "ann@example.com"
BOB = "bob@example.com"
OPTIONS = "/auth/passkeys/login/options"
SIGN_IN = "/auth/passkeys/login"


def token_answer(response: httpx.Response) -> dict[str, Any]:
    """A sign-in answer: TokenResponse, the auth cookies set and the ceremony's cookie gone."""
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body: dict[str, Any] = response.json()
    assert set(body) == {"access_token", "refresh_token", "token_type"}
    cookies = set_cookies(response)
    assert set(cookies) == {
        "svc_access_token",
        "svc_refresh_token",
        "svc_csrf_token",
        "svc_webauthn",
    }
    assert cookie_value(cookies["svc_access_token"]) == body["access_token"]
    assert "max-age=0" in cookies["svc_webauthn"].lower()
    return body


async def signed_in(client: httpx.AsyncClient, email: str = ANN) -> dict[str, Any]:
    """Register `email` and log in with the password (no factor yet: not pending)."""
    await register(client, email)
    tokens = await login(client, email)
    client.cookies.clear()
    return tokens


async def login_options(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.post(OPTIONS)
    assert response.status_code == 200, response.text
    options: dict[str, Any] = response.json()
    return options


async def passkey_sign_in(
    client: httpx.AsyncClient, authenticator: SoftAuthenticator, **get: Any
) -> httpx.Response:
    """The whole sign-in ceremony of a browser: options (its cookie in the jar), assertion."""
    options = await login_options(client)
    return await client.post(SIGN_IN, json={"credential": authenticator.get(options, **get)})


async def with_passkey(
    client: httpx.AsyncClient, email: str = ANN, synced: bool = False
) -> tuple[SoftAuthenticator, dict[str, Any]]:
    """A user with one passkey: (its authenticator, the password session that added it)."""
    tokens = await signed_in(client, email)
    authenticator = SoftAuthenticator(synced=synced)
    await add_passkey(client, authenticator, tokens["access_token"])
    client.cookies.clear()
    return authenticator, tokens


async def passkeys_of(client: httpx.AsyncClient, access: str) -> list[dict[str, Any]]:
    response = await client.get("/auth/passkeys", headers=bearer(access))
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    listed: list[dict[str, Any]] = response.json()["passkeys"]
    return listed


# --- registration and sign-in ----------------------------------------------------------------


async def test_register_then_sign_in_with_no_email(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    tokens = await signed_in(client)
    access = tokens["access_token"]
    options = await client.post("/auth/passkeys/register/options", headers=bearer(access))
    assert options.status_code == 200, options.text
    assert options.headers["cache-control"] == "no-store"
    binding = set_cookies(options)["svc_webauthn"]
    attributes = {a.strip().lower() for a in binding.split(";")[1:]}
    assert {"httponly", "secure", "samesite=strict", "path=/auth/passkeys", "max-age=300"} <= (
        attributes
    )
    created_options = options.json()
    assert created_options["authenticatorSelection"]["residentKey"] == "required"
    assert created_options["authenticatorSelection"]["userVerification"] == "required"
    assert created_options["attestation"] == "none"
    assert created_options["timeout"] == 300000
    assert created_options["rp"]["id"] == "127.0.0.1"
    assert created_options["user"]["name"] == ANN
    assert ANN.encode() not in json.dumps(created_options["user"]["id"]).encode()
    assert created_options["excludeCredentials"] == []

    authenticator = SoftAuthenticator()
    created = await client.post(
        "/auth/passkeys/register",
        json={"credential": authenticator.create(created_options), "name": "Laptop"},
        headers=bearer(access),
    )
    assert created.status_code == 201, created.text
    assert "max-age=0" in set_cookies(created)["svc_webauthn"].lower()
    body = created.json()
    assert set(body) == {"id", "name", "created_at", "last_used_at"}
    assert body["name"] == "Laptop"
    assert body["last_used_at"] is None
    assert await passkeys_of(client, access) == [body]
    # The next registration excludes the credential the user has.
    again = await client.post("/auth/passkeys/register/options", headers=bearer(access))
    held = authenticator.credentials[0].id
    assert again.json()["excludeCredentials"][0]["id"] == b64url(held)

    client.cookies.clear()
    clock.advance(10)
    request_options = await login_options(client)
    assert "allowCredentials" not in request_options or not request_options["allowCredentials"]
    assert request_options["userVerification"] == "required"
    answer = await client.post(SIGN_IN, json={"credential": authenticator.get(request_options)})
    signed = token_answer(answer)
    claims = claims_of(signed["access_token"])
    assert claims["aal"] == "aal2"
    assert claims["amr"] == ["hwk", "user"]
    assert "mfa" not in claims
    assert claims["sid"] != claims_of(access)["sid"]
    me = await client.get("/auth/me", headers=bearer(signed["access_token"]))
    assert me.status_code == 200
    assert me.json()["email"] == ANN
    [listed] = await passkeys_of(client, signed["access_token"])
    assert listed["last_used_at"] is not None


async def test_a_synced_passkey_signs_in_as_software_key(client: httpx.AsyncClient) -> None:
    authenticator, _ = await with_passkey(client, synced=True)
    for _ in range(2):  # a synced passkey's counter stays 0: accepted every time
        signed = token_answer(await passkey_sign_in(client, authenticator))
        assert claims_of(signed["access_token"])["amr"] == ["swk", "user"]
        client.cookies.clear()


async def test_a_passkey_is_the_second_step_of_a_password_login(
    client: httpx.AsyncClient,
) -> None:
    authenticator, _ = await with_passkey(client)
    pending = await login(client)
    client.cookies.clear()
    claims = claims_of(pending["access_token"])
    assert claims["mfa"] == "pending"
    assert_error(
        await client.get("/auth/me", headers=bearer(pending["access_token"])), 401, "mfa_required"
    )
    assert_error(
        await client.get("/auth/passkeys", headers=bearer(pending["access_token"])),
        401,
        "mfa_required",
    )
    assert_error(
        await client.post(
            "/auth/passkeys/register/options", headers=bearer(pending["access_token"])
        ),
        401,
        "mfa_required",
    )
    options = await login_options(client)
    answer = await client.post(
        SIGN_IN,
        json={"credential": authenticator.get(options)},
        headers=bearer(pending["access_token"]),
    )
    stepped = token_answer(answer)
    raised = claims_of(stepped["access_token"])
    assert raised["sid"] == claims["sid"]  # the same session, stepped up
    assert raised["aal"] == "aal2"
    assert raised["amr"] == ["pwd", "hwk", "user"]
    assert "mfa" not in raised
    client.cookies.clear()
    assert (
        await client.get("/auth/me", headers=bearer(stepped["access_token"]))
    ).status_code == 200
    # Refresh keeps the level.
    refreshed = await refresh(client, stepped["refresh_token"])
    assert claims_of(refreshed.json()["access_token"])["aal"] == "aal2"


async def test_another_users_pending_session_and_my_passkey_are_refused(
    client: httpx.AsyncClient,
) -> None:
    ann_key, _ = await with_passkey(client, ANN)
    bob_key, _ = await with_passkey(client, BOB)
    bob_pending = await login(client, BOB)
    client.cookies.clear()
    options = await login_options(client)
    answer = await client.post(
        SIGN_IN,
        json={"credential": ann_key.get(options)},
        headers=bearer(bob_pending["access_token"]),
    )
    assert_error(answer, 401, "invalid_credentials")
    client.cookies.clear()
    # Nothing changed: Bob's session still waits, and his own passkey completes it.
    assert_error(
        await client.get("/auth/me", headers=bearer(bob_pending["access_token"])),
        401,
        "mfa_required",
    )
    options = await login_options(client)
    stepped = await client.post(
        SIGN_IN,
        json={"credential": bob_key.get(options)},
        headers=bearer(bob_pending["access_token"]),
    )
    assert claims_of(token_answer(stepped)["access_token"])["aal"] == "aal2"


# --- the ceremony's rules ----------------------------------------------------------------------


async def test_a_replayed_assertion_is_refused(client: httpx.AsyncClient) -> None:
    authenticator, _ = await with_passkey(client)
    options = await client.post(OPTIONS)
    binding = cookie_value(set_cookies(options)["svc_webauthn"])
    assertion = authenticator.get(options.json())
    token_answer(await client.post(SIGN_IN, json={"credential": assertion}))
    # The same assertion with the same browser's cookie: its challenge is gone.
    client.cookies.clear()
    client.cookies.set("svc_webauthn", binding, path="/auth/passkeys")
    assert_error(await client.post(SIGN_IN, json={"credential": assertion}), 401)
    # And against a fresh challenge it signs the wrong one.
    client.cookies.clear()
    await login_options(client)
    assert_error(
        await client.post(SIGN_IN, json={"credential": assertion}), 401, "invalid_credentials"
    )


async def test_a_stale_challenge_is_refused(client: httpx.AsyncClient, clock: FakeClock) -> None:
    authenticator, _ = await with_passkey(client)
    options = await login_options(client)
    clock.advance(301)
    answer = await client.post(SIGN_IN, json={"credential": authenticator.get(options)})
    assert_error(answer, 401, "invalid_credentials")
    client.cookies.clear()
    # Within the 5 minutes, the same authenticator signs in.
    options = await login_options(client)
    clock.advance(299)
    token_answer(await client.post(SIGN_IN, json={"credential": authenticator.get(options)}))


async def test_a_challenge_works_only_in_the_browser_that_asked_for_it(
    client: httpx.AsyncClient,
) -> None:
    authenticator, _ = await with_passkey(client)
    first = await client.post(OPTIONS)
    first_binding = cookie_value(set_cookies(first)["svc_webauthn"])
    client.cookies.clear()
    # No cookie at all.
    assertion = authenticator.get(first.json())
    assert_error(await client.post(SIGN_IN, json={"credential": assertion}), 401)
    # Another browser's cookie (its own ceremony): refused, and that one is spent too.
    other = await client.post(OPTIONS)
    assert other.status_code == 200
    assertion = authenticator.get(first.json())
    assert_error(await client.post(SIGN_IN, json={"credential": assertion}), 401)
    # The browser that asked still can.
    client.cookies.clear()
    client.cookies.set("svc_webauthn", first_binding, path="/auth/passkeys")
    assertion = authenticator.get(first.json())
    token_answer(await client.post(SIGN_IN, json={"credential": assertion}))


async def test_registration_needs_its_own_challenge(client: httpx.AsyncClient) -> None:
    ann = await signed_in(client, ANN)
    bob = await signed_in(client, BOB)
    authenticator = SoftAuthenticator()
    ann_options = await client.post(
        "/auth/passkeys/register/options", headers=bearer(ann["access_token"])
    )
    # Bob's session with Ann's ceremony cookie.
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": authenticator.create(ann_options.json()), "name": "x"},
        headers=bearer(bob["access_token"]),
    )
    assert_error(answer, 400, "passkey_rejected")
    # Ann, with that ceremony spent: refused too; a sign-in challenge is not a registration's.
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": authenticator.create(ann_options.json()), "name": "x"},
        headers=bearer(ann["access_token"]),
    )
    assert_error(answer, 400, "passkey_rejected")
    client.cookies.clear()
    fresh = await client.post(
        "/auth/passkeys/register/options", headers=bearer(ann["access_token"])
    )
    sign_in_options = await login_options(client)  # its cookie replaces the registration's
    forged = {**fresh.json(), "challenge": sign_in_options["challenge"]}
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": authenticator.create(forged), "name": "x"},
        headers=bearer(ann["access_token"]),
    )
    assert_error(answer, 400, "passkey_rejected")
    assert await passkeys_of(client, ann["access_token"]) == []


async def test_a_counter_going_backwards_is_refused(client: httpx.AsyncClient) -> None:
    authenticator, _ = await with_passkey(client)
    token_answer(await passkey_sign_in(client, authenticator, counter=5))
    client.cookies.clear()
    assert_error(await passkey_sign_in(client, authenticator, counter=3), 401)
    client.cookies.clear()
    assert_error(await passkey_sign_in(client, authenticator, counter=5), 401)
    client.cookies.clear()
    token_answer(await passkey_sign_in(client, authenticator, counter=6))


async def test_user_verification_is_required(client: httpx.AsyncClient) -> None:
    authenticator, tokens = await with_passkey(client)
    answer = await passkey_sign_in(client, authenticator, uv=False)
    assert_error(answer, 401, "invalid_credentials")
    client.cookies.clear()
    options = await client.post(
        "/auth/passkeys/register/options", headers=bearer(tokens["access_token"])
    )
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": SoftAuthenticator().create(options.json(), uv=False), "name": "x"},
        headers=bearer(tokens["access_token"]),
    )
    assert_error(answer, 400, "passkey_rejected")


@pytest.mark.parametrize(
    ("origin", "rp_id"),
    [("https://evil.example", None), (None, "evil.example")],
    ids=["origin", "rp_id"],
)
async def test_a_wrong_origin_or_rp_id_is_refused(
    client: httpx.AsyncClient, origin: str | None, rp_id: str | None
) -> None:
    authenticator, tokens = await with_passkey(client)
    answer = await passkey_sign_in(client, authenticator, origin=origin, rp_id=rp_id)
    assert_error(answer, 401, "invalid_credentials")
    client.cookies.clear()
    options = await client.post(
        "/auth/passkeys/register/options", headers=bearer(tokens["access_token"])
    )
    credential = SoftAuthenticator().create(options.json(), origin=origin, rp_id=rp_id)
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": credential, "name": "x"},
        headers=bearer(tokens["access_token"]),
    )
    assert_error(answer, 400, "passkey_rejected")
    assert len(await passkeys_of(client, tokens["access_token"])) == 1


async def test_the_configured_rp_and_origins_are_used(make_client: Any) -> None:
    async with make_client(
        webauthn_rp_id="example.com",
        webauthn_origins="https://example.com,https://login.example.com",
    ) as client:
        tokens = await signed_in(client)
        authenticator = SoftAuthenticator(rp_id="example.com", origin="https://login.example.com")
        await add_passkey(client, authenticator, tokens["access_token"])
        client.cookies.clear()
        token_answer(await passkey_sign_in(client, authenticator))
        client.cookies.clear()
        assert_error(
            await passkey_sign_in(client, authenticator, origin="http://127.0.0.1:8000"), 401
        )


# --- the account page ----------------------------------------------------------------------


async def test_rename_is_scoped_to_the_user(client: httpx.AsyncClient) -> None:
    _, ann = await with_passkey(client, ANN)
    _, bob = await with_passkey(client, BOB)
    [ann_passkey] = await passkeys_of(client, ann["access_token"])
    [bob_passkey] = await passkeys_of(client, bob["access_token"])
    renamed = await client.patch(
        f"/auth/passkeys/{ann_passkey['id']}",
        json={"name": "Work phone"},
        headers=bearer(ann["access_token"]),
    )
    assert renamed.status_code == 200, renamed.text
    assert renamed.json() == {**ann_passkey, "name": "Work phone"}
    assert await passkeys_of(client, ann["access_token"]) == [renamed.json()]
    for other in (bob_passkey["id"], 10**9):
        answer = await client.patch(
            f"/auth/passkeys/{other}", json={"name": "x"}, headers=bearer(ann["access_token"])
        )
        assert_error(answer, 404, "not_found")
    assert (await passkeys_of(client, bob["access_token"]))[0]["name"] == bob_passkey["name"]
    for bad in ("", "x" * 65):
        answer = await client.patch(
            f"/auth/passkeys/{ann_passkey['id']}",
            json={"name": bad},
            headers=bearer(ann["access_token"]),
        )
        assert answer.status_code == 422
    for path in ("0", "-1", "abc", str(2**63), "9" * 40):
        answer = await client.patch(
            f"/auth/passkeys/{path}", json={"name": "x"}, headers=bearer(ann["access_token"])
        )
        assert answer.status_code in (404, 422), answer.text


async def test_removal_needs_the_password_and_revokes_the_other_sessions(
    client: httpx.AsyncClient,
) -> None:
    authenticator, first = await with_passkey(client)
    other = token_answer(await passkey_sign_in(client, authenticator))
    client.cookies.clear()
    [passkey] = await passkeys_of(client, first["access_token"])
    path = f"/auth/passkeys/{passkey['id']}"
    headers = bearer(first["access_token"])
    assert_error(await client.delete(path, headers=headers), 400, "password_required")
    wrong = await client.request(
        "DELETE", path, json={"password": "not it at all"}, headers=headers
    )
    assert_error(wrong, 403, "wrong_password")
    # Bob's passkey is not Ann's to remove: as unknown as one that never was.
    _, bob = await with_passkey(client, BOB)
    [bob_passkey] = await passkeys_of(client, bob["access_token"])
    answer = await client.request(
        "DELETE",
        f"/auth/passkeys/{bob_passkey['id']}",
        json={"password": PASSWORD},
        headers=headers,
    )
    assert_error(answer, 404, "not_found")
    assert len(await passkeys_of(client, bob["access_token"])) == 1

    removed = await client.request("DELETE", path, json={"password": PASSWORD}, headers=headers)
    assert removed.status_code == 204, removed.text
    assert removed.content == b""
    assert await passkeys_of(client, first["access_token"]) == []  # this session goes on
    assert_error(
        await client.get("/auth/me", headers=bearer(other["access_token"])),
        401,
        "not_authenticated",
    )
    assert_error(await refresh(client, other["refresh_token"]), 401)
    # The passkey no longer signs in, and with no factor left a password login is not pending.
    assert_error(await passkey_sign_in(client, authenticator), 401, "invalid_credentials")
    client.cookies.clear()
    assert "mfa" not in claims_of((await login(client))["access_token"])


async def test_the_first_passkey_revokes_the_other_sessions_and_raises_this_one(
    client: httpx.AsyncClient,
) -> None:
    first = await signed_in(client)
    second = await login(client)
    client.cookies.clear()
    authenticator = SoftAuthenticator()
    await add_passkey(client, authenticator, first["access_token"])
    client.cookies.clear()
    assert_error(
        await client.get("/auth/me", headers=bearer(second["access_token"])),
        401,
        "not_authenticated",
    )
    assert_error(await refresh(client, second["refresh_token"]), 401)
    # The session that added it goes on, at aal2 from its next refresh.
    assert (await client.get("/auth/me", headers=bearer(first["access_token"]))).status_code == 200
    refreshed = await refresh(client, first["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    raised = claims_of(refreshed.json()["access_token"])
    assert raised["aal"] == "aal2"
    assert raised["amr"] == ["pwd", "hwk", "user"]
    client.cookies.clear()
    # A later passkey changes no session.
    third = token_answer(await passkey_sign_in(client, authenticator))
    client.cookies.clear()
    await add_passkey(client, SoftAuthenticator(), refreshed.json()["access_token"], "Phone")
    client.cookies.clear()
    assert (await client.get("/auth/me", headers=bearer(third["access_token"]))).status_code == 200
    assert len(await passkeys_of(client, third["access_token"])) == 2


async def test_a_credential_is_registered_once(client: httpx.AsyncClient) -> None:
    authenticator, ann = await with_passkey(client, ANN)
    bob = await signed_in(client, BOB)
    held = authenticator.credentials[0]
    # An authenticator that ignores excludeCredentials, answering with the credential again:
    # for its own user, and for another.
    for tokens in (ann, bob):
        options = await client.post(
            "/auth/passkeys/register/options", headers=bearer(tokens["access_token"])
        )
        answer = await client.post(
            "/auth/passkeys/register",
            json={"credential": authenticator.create(options.json(), reuse=held), "name": "x"},
            headers=bearer(tokens["access_token"]),
        )
        assert_error(answer, 400, "passkey_rejected")
        client.cookies.clear()
    assert len(await passkeys_of(client, ann["access_token"])) == 1
    assert await passkeys_of(client, bob["access_token"]) == []


# --- malformed input -----------------------------------------------------------------------

MALFORMED: list[Any] = [
    {},
    {"id": 1},
    {"id": "AAAA", "rawId": "AAAA", "type": "public-key", "response": {}},
    {
        "id": "AAAA",
        "rawId": "AAAA",
        "type": "public-key",
        "response": {
            "clientDataJSON": "!!not base64!!",
            "attestationObject": "@@",
            "authenticatorData": "@@",
            "signature": "@@",
        },
    },
    {
        "id": "AAAA",
        "rawId": "AAAA",
        "type": "public-key",
        "response": {
            "clientDataJSON": b64url(b"{not json"),
            "attestationObject": b64url(b"\xff\x00garbage"),
            "authenticatorData": b64url(b"\x00" * 10),
            "signature": b64url(b"\x00"),
            "userHandle": 5,
        },
    },
    {"id": "AAAA", "rawId": "AAAA", "type": "something-else", "response": {"x": 1}},
    {
        "id": "AAAA",
        "rawId": "AAAA",
        "type": "public-key",
        "authenticatorAttachment": "nowhere",
        "response": {
            "clientDataJSON": b64url(b"{}"),
            "attestationObject": b64url(b"\xa0"),
            "authenticatorData": b64url(b"\x00" * 37),
            "signature": b64url(b"\x30\x00"),
        },
    },
]


@pytest.mark.parametrize("credential", MALFORMED, ids=range(len(MALFORMED)))
async def test_malformed_credentials_are_client_errors(
    client: httpx.AsyncClient, credential: Any
) -> None:
    tokens = await signed_in(client)
    await client.post("/auth/passkeys/register/options", headers=bearer(tokens["access_token"]))
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": credential, "name": "x"},
        headers=bearer(tokens["access_token"]),
    )
    assert_error(answer, 400)
    client.cookies.clear()
    await login_options(client)
    answer = await client.post(SIGN_IN, json={"credential": credential})
    assert answer.status_code in (400, 401), answer.text
    assert_error(answer, answer.status_code)
    assert await passkeys_of(client, tokens["access_token"]) == []


async def test_bodies_that_are_not_credentials_are_refused(client: httpx.AsyncClient) -> None:
    for body in ({"credential": "a string"}, {"credential": [1, 2]}, {}, {"credential": None}):
        answer = await client.post(SIGN_IN, json=body)
        assert answer.status_code == 422, answer.text
    answer = await client.post(
        SIGN_IN,
        content=b'{"credential": {}, "credential": {}}',
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422


# --- events --------------------------------------------------------------------------------


async def test_events_carry_no_credential_material(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    tokens = await signed_in(client)
    authenticator = SoftAuthenticator()
    options = await client.post(
        "/auth/passkeys/register/options", headers=bearer(tokens["access_token"])
    )
    binding = cookie_value(set_cookies(options)["svc_webauthn"])
    created = authenticator.create(options.json())
    answer = await client.post(
        "/auth/passkeys/register",
        json={"credential": created, "name": "Laptop"},
        headers=bearer(tokens["access_token"]),
    )
    assert answer.status_code == 201
    client.cookies.clear()
    request_options = await login_options(client)
    assertion = authenticator.get(request_options)
    token_answer(await client.post(SIGN_IN, json={"credential": assertion}))
    client.cookies.clear()
    assert_error(await passkey_sign_in(client, authenticator, uv=False), 401)

    records = [r for r in caplog.records if r.name == "authgate.events"]
    fields = [r.authgate for r in records]  # type: ignore[attr-defined]
    names = [f["event"] for f in fields]
    for expected in ("passkey_registered", "factor_enrolled", "passkey_used", "login_succeeded"):
        assert expected in names
    [failed] = [f for f in fields if f["event"] == "login_failed"]
    assert failed["reason"] == "not_verified"
    assert failed["factor"] == "passkey"
    text = json.dumps(fields) + " ".join(r.getMessage() for r in records)
    secrets_seen = {
        binding,
        created["id"],
        created["response"]["attestationObject"][:40],
        created["response"]["clientDataJSON"][:40],
        options.json()["challenge"],
        request_options["challenge"],
        assertion["response"]["signature"][:40],
        assertion["response"]["authenticatorData"][:40],
        assertion["response"]["userHandle"],
        tokens["access_token"],
    }
    for secret in secrets_seen:
        assert secret not in text


# --- races, inactive users, cookies, notices ------------------------------------------------


async def test_one_assertion_sent_twice_at_once_signs_in_once(client: httpx.AsyncClient) -> None:
    authenticator, _ = await with_passkey(client)
    options = await login_options(client)
    assertion = authenticator.get(options)
    answers = await asyncio.gather(
        *(client.post(SIGN_IN, json={"credential": assertion}) for _ in range(4))
    )
    assert sorted(a.status_code for a in answers) == [200, 401, 401, 401]


async def test_an_inactive_user_cannot_sign_in_with_a_passkey(
    backend: Backend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    gate, app = gate_and_app(backend, clock)
    async with running(app) as client:
        authenticator, _ = await with_passkey(client)
        assert await gate.accounts.set_active(ANN, False) is not None
        assert_error(await passkey_sign_in(client, authenticator), 401, "invalid_credentials")
        client.cookies.clear()
        assert await gate.accounts.set_active(ANN, True) is not None
        token_answer(await passkey_sign_in(client, authenticator))
    reasons = [
        r.authgate.get("reason")  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "authgate.events" and r.getMessage() == "login_failed"
    ]
    assert reasons == ["inactive"]


async def test_the_cookie_session_needs_the_csrf_header(client: httpx.AsyncClient) -> None:
    """A browser: the access token in its cookie. Registration and the second step act on
    that session, so they need X-CSRF-Token; a passkey sign-in beside a session that does not
    wait acts on none."""
    authenticator, _ = await with_passkey(client)
    pending = await client.post("/auth/login", json={"email": ANN, "password": PASSWORD})
    csrf = cookie_value(set_cookies(pending)["svc_csrf_token"])
    options = await login_options(client)
    answer = await client.post(SIGN_IN, json={"credential": authenticator.get(options)})
    assert_error(answer, 403, "csrf_failed")
    options = await login_options(client)
    answer = await client.post(
        SIGN_IN, json={"credential": authenticator.get(options)}, headers={"X-CSRF-Token": csrf}
    )
    stepped = token_answer(answer)
    assert (
        claims_of(stepped["access_token"])["sid"]
        == claims_of(pending.json()["access_token"])["sid"]
    )
    # The jar now holds the aal2 session's cookies.
    assert_error(await client.post("/auth/passkeys/register/options"), 403, "csrf_failed")
    csrf = client.cookies["svc_csrf_token"]
    creation = await client.post("/auth/passkeys/register/options", headers={"X-CSRF-Token": csrf})
    assert creation.status_code == 200, creation.text
    assert (await client.get("/auth/passkeys")).status_code == 200
    # A new passkey sign-in from this browser opens a new session, no header needed.
    signed = token_answer(await passkey_sign_in(client, authenticator))
    assert claims_of(signed["access_token"])["sid"] != claims_of(stepped["access_token"])["sid"]


async def test_notices_for_a_passkey_added_and_removed(
    backend: Backend, clock: FakeClock, smtp_sink: SmtpSink
) -> None:
    _, app = gate_and_app(backend, clock, smtp_url=smtp_sink.url)
    async with running(app) as client:
        _, tokens = await with_passkey(client)
        [added] = await smtp_sink.wait_for(1)
        [passkey] = await passkeys_of(client, tokens["access_token"])
        removed = await client.request(
            "DELETE",
            f"/auth/passkeys/{passkey['id']}",
            json={"password": PASSWORD},
            headers=bearer(tokens["access_token"]),
        )
        assert removed.status_code == 204, removed.text
        [_, gone] = await smtp_sink.wait_for(2)
    for notice, verb in ((added, "added"), (gone, "removed")):
        assert notice["To"] == ANN
        assert verb in notice["Subject"].lower()
        text = notice.get_body(("plain",)).get_content()  # type: ignore[union-attr]
        assert "passkey" in text.lower()


async def test_the_user_handle_must_name_the_passkeys_owner(client: httpx.AsyncClient) -> None:
    """The user handle is not signed; the credential id decides, and a handle naming anyone
    else is refused (WebAuthn §7.2 step 6)."""
    ann_key, _ = await with_passkey(client, ANN)
    bob_key, _ = await with_passkey(client, BOB)
    handle = ann_key.credentials[0].user_handle
    assert handle != bob_key.credentials[0].user_handle
    assert ANN.encode() not in handle
    ann_key.credentials[0].user_handle = bob_key.credentials[0].user_handle
    assert_error(await passkey_sign_in(client, ann_key), 401, "invalid_credentials")
    client.cookies.clear()
    ann_key.credentials[0].user_handle = handle
    signed = token_answer(await passkey_sign_in(client, ann_key))
    me = await client.get("/auth/me", headers=bearer(signed["access_token"]))
    assert me.json()["email"] == ANN


async def test_a_pending_session_that_ended_is_not_stepped_up(client: httpx.AsyncClient) -> None:
    authenticator, _ = await with_passkey(client)
    pending = await login(client)
    client.cookies.clear()
    out = await client.post(
        "/auth/logout",
        json={"refresh_token": pending["refresh_token"]},
        headers=bearer(pending["access_token"]),
    )
    assert out.status_code == 200
    client.cookies.clear()
    options = await login_options(client)
    answer = await client.post(
        SIGN_IN,
        json={"credential": authenticator.get(options)},
        headers=bearer(pending["access_token"]),
    )
    # The token no longer names a live session: this is a plain passkey sign-in, a new session.
    signed = token_answer(answer)
    assert claims_of(signed["access_token"])["sid"] != claims_of(pending["access_token"])["sid"]
    assert claims_of(signed["access_token"])["amr"] == ["hwk", "user"]
