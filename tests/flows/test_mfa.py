"""TOTP, recovery codes and the second step through HTTP (contract §9), on both backends.

Codes are computed by the test from the secret the enrolment returned (pyotp) at the
FakeClock's time; a step is used once, so the tests move the clock between codes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from authgate import AuthGate, CurrentUser, create_app
from tests.helpers import (
    PASSWORD,
    TEST_SECRET,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    SmtpSink,
    assert_error,
    assert_token_response,
    bearer,
    claims_of,
    enrol_totp,
    login,
    make_config,
    refresh,
    register,
    running,
    totp_code,
)

STEP = 30
ANN = "ann@example.com"


def wrong_code(secret: str, at: datetime) -> str:
    """Six digits that are none of the codes within one step of `at`."""
    valid = {totp_code(secret, at + timedelta(seconds=d)) for d in (-STEP, 0, STEP)}
    return next(c for c in ("000000", "111111", "222222", "333333") if c not in valid)


async def signed_up(client: httpx.AsyncClient, clock: FakeClock) -> tuple[str, list[str], str]:
    """Ann with an enabled authenticator app; (secret, recovery codes, aal2 access token)."""
    await register(client)
    tokens = await login(client)
    secret, codes = await enrol_totp(client, tokens["access_token"], clock)
    raised = await refresh(client, tokens["refresh_token"])
    client.cookies.clear()
    return secret, codes, assert_token_response(raised)["access_token"]


async def pending_login(client: httpx.AsyncClient) -> dict[str, Any]:
    tokens = await login(client)
    client.cookies.clear()
    assert claims_of(tokens["access_token"])["mfa"] == "pending"
    return tokens


async def verify(client: httpx.AsyncClient, access: str, **body: str) -> httpx.Response:
    return await client.post("/auth/mfa/verify", json=body, headers=bearer(access))


# --- enrolment ----------------------------------------------------------------------------


async def test_enrolment_is_pending_until_a_right_code_confirms_it(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await register(client)
    access = (await login(client))["access_token"]
    client.cookies.clear()
    status = await client.get("/auth/mfa", headers=bearer(access))
    assert status.json() == {"totp": "none", "recovery_codes_remaining": 0, "passkeys": 0}
    assert status.headers["cache-control"] == "no-store"

    started = await client.post("/auth/mfa/totp", headers=bearer(access))
    assert started.status_code == 200, started.text
    assert started.headers["cache-control"] == "no-store"
    body = started.json()
    secret = body["secret"]
    assert re.fullmatch(r"[A-Z2-7]{32}", secret)
    assert body["otpauth_uri"].startswith("otpauth://totp/authgate:ann%40example.com?")
    assert f"secret={secret}" in body["otpauth_uri"]
    svg = body["qr_svg"]
    assert svg.startswith("<svg")
    assert svg.endswith("</svg>")
    # Inserted as it is under a CSP without 'unsafe-inline': no script, no style attribute,
    # nothing fetched from anywhere.
    assert "<script" not in svg
    assert "style=" not in svg
    assert "href" not in svg
    assert (await client.get("/auth/mfa", headers=bearer(access))).json()["totp"] == "pending"

    # A pending factor does not make a login pending.
    again = await login(client)
    client.cookies.clear()
    assert "mfa" not in claims_of(again["access_token"])
    assert (await client.get("/auth/me", headers=bearer(again["access_token"]))).status_code == 200

    # A new enrolment replaces the pending one: the first secret's codes no longer confirm.
    second = (await client.post("/auth/mfa/totp", headers=bearer(access))).json()["secret"]
    assert second != secret
    stale = await client.post(
        "/auth/mfa/totp/confirm", json={"code": totp_code(secret, clock())}, headers=bearer(access)
    )
    assert_error(stale, 400, "invalid_code")
    malformed = await client.post(
        "/auth/mfa/totp/confirm", json={"code": "12 34"}, headers=bearer(access)
    )
    assert_error(malformed, 400, "invalid_code")

    typed = totp_code(second, clock())
    confirmed = await client.post(
        "/auth/mfa/totp/confirm",
        json={"code": f"{typed[:3]} {typed[3:]}"},
        headers=bearer(access),
    )
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.headers["cache-control"] == "no-store"
    codes = confirmed.json()["recovery_codes"]
    assert len(codes) == len(set(codes)) == 10
    assert all(re.fullmatch(r"[a-z2-7]{4}(-[a-z2-7]{4}){3}", c) for c in codes)
    status = await client.get("/auth/mfa", headers=bearer(access))
    assert status.json() == {"totp": "enabled", "recovery_codes_remaining": 10, "passkeys": 0}

    assert_error(await client.post("/auth/mfa/totp", headers=bearer(access)), 409, "conflict")
    again_confirm = await client.post(
        "/auth/mfa/totp/confirm", json={"code": typed}, headers=bearer(access)
    )
    assert_error(again_confirm, 409, "conflict")


async def test_first_factor_revokes_other_sessions_and_raises_the_enrolling_one(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await register(client)
    other = await login(client)
    mine = await login(client)
    client.cookies.clear()
    await enrol_totp(client, mine["access_token"], clock)

    assert_error(await client.get("/auth/me", headers=bearer(other["access_token"])), 401)
    assert (await refresh(client, other["refresh_token"])).status_code == 401
    client.cookies.clear()
    assert (await client.get("/auth/me", headers=bearer(mine["access_token"]))).status_code == 200
    raised = assert_token_response(await refresh(client, mine["refresh_token"]))
    claims = claims_of(raised["access_token"])
    assert (claims["aal"], claims["amr"], "mfa" in claims) == ("aal2", ["pwd", "otp"], False)
    assert claims["sid"] == claims_of(mine["access_token"])["sid"]


# --- the second step ----------------------------------------------------------------------


async def test_a_pending_session_is_refused_everywhere_but_the_second_step(
    backend: Backend, clock: FakeClock
) -> None:
    gate = AuthGate(make_config(backend), clock=clock)
    host = FastAPI(lifespan=gate.lifespan)
    gate.install(host)

    @host.get("/hello")
    async def hello(user: CurrentUser) -> dict[str, str]:
        return {"hello": user.email}

    app = create_app(make_config(backend), clock=clock)
    async with running(app) as client:
        await signed_up(client, clock)
        pending = await pending_login(client)
        claims = claims_of(pending["access_token"])
        assert (claims["aal"], claims["amr"]) == ("aal1", ["pwd"])
        auth = bearer(pending["access_token"])
        refused = [
            await client.get("/auth/me", headers=auth),
            await client.get("/auth/sessions", headers=auth),
            await client.get("/auth/mfa", headers=auth),
            await client.post("/auth/mfa/totp", headers=auth),
            await client.post(
                "/auth/password-change",
                json={"current_password": PASSWORD, "new_password": "a brand new passphrase"},
                headers=auth,
            ),
            await client.request("DELETE", "/auth/me", json={"password": PASSWORD}, headers=auth),
            await client.request(
                "DELETE", "/auth/mfa/totp", json={"password": PASSWORD}, headers=auth
            ),
        ]
        if any(getattr(route, "path", None) == "/auth/passkeys" for route in app.routes):
            refused.append(await client.get("/auth/passkeys", headers=auth))
        for response in refused:
            assert_error(response, 401, "mfa_required")
    async with running(host) as hosted:
        assert_error(await hosted.get("/hello", headers=auth), 401, "mfa_required")
        # Logout takes a pending session.
        out = await hosted.post("/auth/logout", json={"refresh_token": pending["refresh_token"]})
        assert out.status_code == 200
        assert_error(await hosted.get("/hello", headers=auth), 401, "not_authenticated")


async def test_verify_steps_the_same_session_up_and_reissues_its_tokens(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    secret, _, _ = await signed_up(client, clock)
    pending = await login(client)  # the jar holds its cookies: verify by cookie, with CSRF
    clock.advance(STEP)
    response = await client.post(
        "/auth/mfa/verify",
        json={"code": totp_code(secret, clock())},
        headers={"X-CSRF-Token": client.cookies["svc_csrf_token"]},
    )
    tokens = assert_token_response(response)  # the cookies are set again
    assert response.headers["cache-control"] == "no-store"
    claims = claims_of(tokens["access_token"])
    assert (claims["aal"], claims["amr"], "mfa" in claims) == ("aal2", ["pwd", "otp"], False)
    assert claims["sid"] == claims_of(pending["access_token"])["sid"]
    client.cookies.clear()
    me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
    assert me.status_code == 200
    assert me.json()["email"] == ANN

    # The pending refresh token was spent by the step-up: presenting it is reuse.
    assert_error(await refresh(client, pending["refresh_token"]), 401, "refresh_token_reused")
    assert_error(await client.get("/auth/me", headers=bearer(tokens["access_token"])), 401)


async def test_verify_by_cookie_needs_the_csrf_header(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    secret, _, _ = await signed_up(client, clock)
    await login(client)
    clock.advance(STEP)
    response = await client.post("/auth/mfa/verify", json={"code": totp_code(secret, clock())})
    assert_error(response, 403, "csrf_failed")


async def test_refresh_keeps_the_level(client: httpx.AsyncClient, clock: FakeClock) -> None:
    secret, _, _ = await signed_up(client, clock)
    pending = await pending_login(client)
    still = assert_token_response(await refresh(client, pending["refresh_token"]))
    client.cookies.clear()
    assert claims_of(still["access_token"])["mfa"] == "pending"
    assert_error(await client.get("/auth/me", headers=bearer(still["access_token"])), 401)

    clock.advance(STEP)
    raised = assert_token_response(
        await verify(client, still["access_token"], code=totp_code(secret, clock()))
    )
    again = assert_token_response(await refresh(client, raised["refresh_token"]))
    client.cookies.clear()
    claims = claims_of(again["access_token"])
    assert (claims["aal"], claims["amr"], "mfa" in claims) == ("aal2", ["pwd", "otp"], False)


async def test_verify_refuses_bad_bodies(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await signed_up(client, clock)
    access = (await pending_login(client))["access_token"]
    assert (await verify(client, access)).status_code == 422
    assert (await verify(client, access, code="123456", recovery_code="x")).status_code == 422
    assert_error(await verify(client, access, code="abcdef"), 400, "invalid_code")
    assert_error(await verify(client, access, recovery_code="nope"), 400, "invalid_code")
    assert_error(await client.post("/auth/mfa/verify", json={"code": "123456"}), 401)


# --- abuse: replay, drift, lock-out -------------------------------------------------------


async def test_a_code_is_accepted_once(client: httpx.AsyncClient, clock: FakeClock) -> None:
    secret, _, _ = await signed_up(client, clock)
    clock.advance(STEP)
    code = totp_code(secret, clock())
    first = await pending_login(client)
    assert_token_response(await verify(client, first["access_token"], code=code))
    second = await pending_login(client)
    assert_error(await verify(client, second["access_token"], code=code), 400, "invalid_code")
    # Nor the code of the step before, still within the drift window.
    earlier = totp_code(secret, clock() - timedelta(seconds=STEP))
    assert_error(await verify(client, second["access_token"], code=earlier), 400, "invalid_code")
    clock.advance(STEP)
    assert_token_response(
        await verify(client, second["access_token"], code=totp_code(secret, clock()))
    )


async def test_two_concurrent_requests_with_one_code_one_wins(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    secret, _, _ = await signed_up(client, clock)
    sessions = [await pending_login(client) for _ in range(2)]
    clock.advance(STEP)
    code = totp_code(secret, clock())
    answers = await asyncio.gather(
        *(verify(client, s["access_token"], code=code) for s in sessions)
    )
    assert sorted(a.status_code for a in answers) == [200, 400]
    assert_error(next(a for a in answers if a.status_code == 400), 400, "invalid_code")


async def test_one_step_of_drift_is_accepted_two_are_not(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    secret, _, _ = await signed_up(client, clock)
    clock.advance(10 * STEP)
    now = clock()
    access = (await pending_login(client))["access_token"]
    for steps in (-2, 2):
        far = totp_code(secret, now + timedelta(seconds=steps * STEP))
        assert_error(await verify(client, access, code=far), 400, "invalid_code")
    behind = totp_code(secret, now - timedelta(seconds=STEP))
    assert_token_response(await verify(client, access, code=behind))
    other = (await pending_login(client))["access_token"]
    ahead = totp_code(secret, now + timedelta(seconds=STEP))
    assert_token_response(await verify(client, other, code=ahead))


async def test_five_wrong_codes_lock_the_second_step(
    make_client: AppFactory, clock: FakeClock
) -> None:
    async with make_client(rate_limits=True) as client:
        secret, _, _ = await signed_up(client, clock)
        clock.advance(STEP)
        access = (await pending_login(client))["access_token"]
        for _ in range(5):
            wrong = wrong_code(secret, clock())
            assert_error(await verify(client, access, code=wrong), 400, "invalid_code")
        right = totp_code(secret, clock())
        locked = await verify(client, access, code=right)
        assert_error(locked, 429, "rate_limited")
        assert int(locked.headers["retry-after"]) >= 1
        assert_error(await verify(client, access, recovery_code="x" * 16), 429, "rate_limited")
        # The window ends, and the second step opens again.
        clock.advance(16 * 60)
        access = (await pending_login(client))["access_token"]
        later = totp_code(secret, clock())
        assert_token_response(await verify(client, access, code=later))


async def test_wrong_codes_at_enrolment_count_toward_the_lock_out(
    make_client: AppFactory, clock: FakeClock
) -> None:
    async with make_client(rate_limits=True) as client:
        await register(client)
        auth = bearer((await login(client))["access_token"])
        client.cookies.clear()
        secret = (await client.post("/auth/mfa/totp", headers=auth)).json()["secret"]
        for _ in range(5):
            wrong = {"code": wrong_code(secret, clock())}
            answer = await client.post("/auth/mfa/totp/confirm", json=wrong, headers=auth)
            assert_error(answer, 400, "invalid_code")
        right = {"code": totp_code(secret, clock())}
        locked = await client.post("/auth/mfa/totp/confirm", json=right, headers=auth)
        assert_error(locked, 429, "rate_limited")
        assert (await client.get("/auth/mfa", headers=auth)).json()["totp"] == "pending"


# --- recovery codes -----------------------------------------------------------------------


async def test_recovery_codes_work_once_and_their_use_is_mailed(
    make_client: AppFactory, clock: FakeClock, smtp_sink: SmtpSink
) -> None:
    async with make_client(smtp_url=smtp_sink.url) as client:
        _, codes, access = await signed_up(client, clock)
        added = (await smtp_sink.wait_for(1))[0]
        assert "second factor was added" in str(added["Subject"])

        pending = await pending_login(client)
        typed = codes[3].replace("-", " ").upper()
        tokens = assert_token_response(
            await verify(client, pending["access_token"], recovery_code=typed)
        )
        claims = claims_of(tokens["access_token"])
        assert (claims["aal"], claims["amr"]) == ("aal2", ["pwd", "otp"])

        other = await pending_login(client)
        again = await verify(client, other["access_token"], recovery_code=codes[3])
        assert_error(again, 400, "invalid_code")
        status = await client.get("/auth/mfa", headers=bearer(access))
        assert status.json()["recovery_codes_remaining"] == 9

        used = (await smtp_sink.wait_for(2))[1]
        assert "recovery code was used" in str(used["Subject"])
        text = used.get_body(("plain",))
        assert text is not None
        assert "9 of your codes are left" in text.get_content()
        assert all(code not in used.as_string() for code in codes)


async def test_a_recovery_code_is_single_use_under_concurrency(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    _, codes, access = await signed_up(client, clock)
    sessions = [await pending_login(client) for _ in range(2)]
    answers = await asyncio.gather(
        *(verify(client, s["access_token"], recovery_code=codes[0]) for s in sessions)
    )
    assert sorted(a.status_code for a in answers) == [200, 400]
    status = await client.get("/auth/mfa", headers=bearer(access))
    assert status.json()["recovery_codes_remaining"] == 9


async def test_new_recovery_codes_need_the_password_and_replace_the_old_set(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    _, old, access = await signed_up(client, clock)
    wrong = await client.post(
        "/auth/mfa/recovery-codes", json={"password": "not the password"}, headers=bearer(access)
    )
    assert_error(wrong, 403, "wrong_password")
    made = await client.post(
        "/auth/mfa/recovery-codes", json={"password": PASSWORD}, headers=bearer(access)
    )
    assert made.status_code == 200, made.text
    assert made.headers["cache-control"] == "no-store"
    new = made.json()["recovery_codes"]
    assert len(set(new)) == 10
    assert not set(new) & set(old)

    pending = (await pending_login(client))["access_token"]
    assert_error(await verify(client, pending, recovery_code=old[0]), 400, "invalid_code")
    assert_token_response(await verify(client, pending, recovery_code=new[0]))


async def test_recovery_codes_need_an_enabled_factor(client: httpx.AsyncClient) -> None:
    await register(client)
    access = (await login(client))["access_token"]
    client.cookies.clear()
    made = await client.post(
        "/auth/mfa/recovery-codes", json={"password": PASSWORD}, headers=bearer(access)
    )
    assert_error(made, 409, "conflict")
    assert_error(await verify(client, access, code="123456"), 400, "invalid_code")


# --- removal, reset, key rotation ---------------------------------------------------------


async def test_removal_needs_the_password_and_revokes_the_other_sessions(
    make_client: AppFactory, clock: FakeClock, smtp_sink: SmtpSink
) -> None:
    async with make_client(smtp_url=smtp_sink.url) as client:
        secret, _, access = await signed_up(client, clock)
        other = await pending_login(client)
        clock.advance(STEP)
        other_tokens = assert_token_response(
            await verify(client, other["access_token"], code=totp_code(secret, clock()))
        )
        client.cookies.clear()

        wrong = await client.request(
            "DELETE", "/auth/mfa/totp", json={"password": "not it at all"}, headers=bearer(access)
        )
        assert_error(wrong, 403, "wrong_password")
        assert (await client.get("/auth/mfa", headers=bearer(access))).json()["totp"] == "enabled"

        removed = await client.request(
            "DELETE", "/auth/mfa/totp", json={"password": PASSWORD}, headers=bearer(access)
        )
        assert removed.status_code == 204, removed.text
        status = await client.get("/auth/mfa", headers=bearer(access))
        assert status.json() == {"totp": "none", "recovery_codes_remaining": 0, "passkeys": 0}
        assert_error(
            await client.get("/auth/me", headers=bearer(other_tokens["access_token"])), 401
        )
        fresh = await login(client)
        client.cookies.clear()
        assert "mfa" not in claims_of(fresh["access_token"])
        gone = await client.request(
            "DELETE", "/auth/mfa/totp", json={"password": PASSWORD}, headers=bearer(access)
        )
        assert_error(gone, 404, "not_found")
        notice = (await smtp_sink.wait_for(2))[1]
        assert "removed" in str(notice["Subject"])


async def test_password_reset_keeps_the_factor(
    make_client: AppFactory, clock: FakeClock, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await signed_up(client, clock)
        asked = await client.post("/auth/password-reset", json={"email": ANN})
        assert asked.status_code == 200, asked.text
        (_, token), *_ = await outbox.wait_for(1)
        done = await client.post(
            "/auth/password-reset/confirm",
            json={"token": token, "new_password": "a brand new passphrase"},
        )
        assert done.status_code == 200, done.text
        tokens = await login(client, password="a brand new passphrase")
        assert claims_of(tokens["access_token"])["mfa"] == "pending"


async def test_a_rotated_secret_key_still_opens_the_factor(
    make_client: AppFactory, clock: FakeClock
) -> None:
    new_key = "another-secret-key-that-is-long-enough-9876543210"
    async with make_client() as client:
        secret, _, _ = await signed_up(client, clock)
    async with make_client(secret_key=new_key, secret_key_previous=TEST_SECRET) as client:
        clock.advance(STEP)
        access = (await pending_login(client))["access_token"]
        assert_token_response(await verify(client, access, code=totp_code(secret, clock())))
    # That verification sealed the secret again under the new key: the old one can go.
    async with make_client(secret_key=new_key) as client:
        clock.advance(STEP)
        access = (await pending_login(client))["access_token"]
        assert_token_response(await verify(client, access, code=totp_code(secret, clock())))


# --- events -------------------------------------------------------------------------------


async def test_the_events_of_a_whole_flow_carry_no_secret(
    client: httpx.AsyncClient, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await register(client)
    first = await login(client)
    client.cookies.clear()
    started = (await client.post("/auth/mfa/totp", headers=bearer(first["access_token"]))).json()
    secret = started["secret"]
    wrong = wrong_code(secret, clock())
    bad = await client.post(
        "/auth/mfa/totp/confirm", json={"code": wrong}, headers=bearer(first["access_token"])
    )
    assert_error(bad, 400, "invalid_code")
    confirm_code = totp_code(secret, clock())
    codes = (
        await client.post(
            "/auth/mfa/totp/confirm",
            json={"code": confirm_code},
            headers=bearer(first["access_token"]),
        )
    ).json()["recovery_codes"]
    pending = (await pending_login(client))["access_token"]
    assert_error(await verify(client, pending, code=wrong), 400, "invalid_code")
    clock.advance(STEP)
    verify_code = totp_code(secret, clock())
    raised = assert_token_response(await verify(client, pending, code=verify_code))
    other = (await pending_login(client))["access_token"]
    assert_token_response(await verify(client, other, recovery_code=codes[0]))
    client.cookies.clear()
    auth = bearer(raised["access_token"])
    new = (
        await client.post("/auth/mfa/recovery-codes", json={"password": PASSWORD}, headers=auth)
    ).json()["recovery_codes"]
    removed = await client.request(
        "DELETE", "/auth/mfa/totp", json={"password": PASSWORD}, headers=auth
    )
    assert removed.status_code == 204

    events = [r.__dict__.get("authgate", {}) for r in caplog.records if r.name == "authgate.events"]
    seen = {(e["event"], e["outcome"], e.get("factor")) for e in events}
    assert {
        ("factor_enrolled", "failure", "totp"),
        ("factor_enrolled", "success", "totp"),
        ("mfa_failed", "failure", "totp"),
        ("mfa_verified", "success", "totp"),
        ("mfa_verified", "success", "recovery_code"),
        ("recovery_code_used", "success", "recovery_code"),
        ("recovery_codes_regenerated", "success", "recovery_code"),
        ("factor_removed", "success", "totp"),
    } <= seen
    # Logging's own bookkeeping (times in ms, thread and process ids, line numbers) is numbers
    # a six-digit code matches by chance (CI once met `relativeCreated` 541866.x); every other
    # attribute, the message and its arguments included, is searched.
    own = set(vars(logging.makeLogRecord({}))) - {"msg", "args", "exc_text", "stack_info"}
    logged = "\n".join(
        f"{r.getMessage()} { {k: v for k, v in vars(r).items() if k not in own} }"
        for r in caplog.records
    )
    secrets_shown = [secret, started["otpauth_uri"], *codes, *new]
    secrets_shown += [c.replace("-", "") for c in (*codes, *new)]
    assert not [s for s in secrets_shown if s in logged]
    for code in (wrong, confirm_code, verify_code):
        assert not re.search(rf"(?<![0-9A-Za-z]){code}(?![0-9A-Za-z])", logged), code
