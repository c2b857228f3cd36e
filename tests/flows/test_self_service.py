"""Self-service accounts through HTTP (contract §5), on both backends: sessions, password
change, email change with double opt-in, account deletion; CSRF on the cookie path, no-store
on every answer, the notices in a real SMTP sink, and the events."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from authgate import AuthGate, create_app
from tests.helpers import (
    PASSWORD,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    SmtpSink,
    assert_error,
    bearer,
    login,
    make_config,
    register,
    running,
)

ANN = "ann@example.com"
BOB = "bob@example.com"
NEW_PASSWORD = "a brand new passphrase"


def no_store(response: httpx.Response) -> bool:
    return bool(response.headers.get("cache-control") == "no-store")


@asynccontextmanager
async def gate_and_client(
    backend: Backend, clock: FakeClock, **overrides: Any
) -> AsyncIterator[tuple[AuthGate, httpx.AsyncClient]]:
    app = create_app(make_config(backend, **overrides), clock=clock)
    async with running(app) as client:
        yield app.state.authgate, client


async def sessions_of(client: httpx.AsyncClient, access: str) -> list[dict[str, Any]]:
    response = await client.get("/auth/sessions", headers=bearer(access))
    assert response.status_code == 200, response.text
    assert no_store(response)
    sessions: list[dict[str, Any]] = response.json()["sessions"]
    return sessions


def session_id(access: str) -> str:
    import jwt

    claims = jwt.decode(access, options={"verify_signature": False})
    sid: str = claims["sid"]
    return sid


# --- sessions -----------------------------------------------------------------------------


async def test_sessions_lists_the_live_sessions_newest_first(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await register(client)
    first = (
        await client.post(
            "/auth/login",
            json={"email": ANN, "password": PASSWORD},
            headers={"User-Agent": "Phone/1.0 " + "x" * 400},
        )
    ).json()
    clock.advance(5)
    second = (
        await client.post(
            "/auth/login",
            json={"email": ANN, "password": PASSWORD},
            headers={"User-Agent": "Laptop/2.0"},
        )
    ).json()
    listed = await sessions_of(client, second["access_token"])
    assert [s["id"] for s in listed] == [
        session_id(second["access_token"]),
        session_id(first["access_token"]),
    ]
    newest, oldest = listed
    assert newest["current"] is True
    assert oldest["current"] is False
    assert set(newest) == {
        "id",
        "created_at",
        "last_active_at",
        "expires_at",
        "ip",
        "user_agent",
        "current",
    }
    assert newest["ip"] == "127.0.0.1"
    assert newest["user_agent"] == "Laptop/2.0"
    assert oldest["user_agent"] == "Phone/1.0 " + "x" * 246  # cut at 256 characters
    assert datetime.fromisoformat(newest["created_at"]) == clock.now
    assert datetime.fromisoformat(newest["last_active_at"]) == clock.now
    assert datetime.fromisoformat(newest["expires_at"]) > clock.now
    # Another user sees only their own.
    await register(client, BOB)
    bob = await login(client, BOB)
    assert [s["id"] for s in await sessions_of(client, bob["access_token"])] == [
        session_id(bob["access_token"])
    ]


async def test_sessions_needs_authentication(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/auth/sessions"), 401, "not_authenticated")
    assert_error(
        await client.get("/auth/sessions", headers=bearer("not-a-token")), 401, "not_authenticated"
    )


async def test_last_active_moves_at_refresh_never_at_an_authenticated_request(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await register(client)
    tokens = await login(client)
    login_time = clock.now
    clock.advance(60)
    assert (await client.get("/auth/me", headers=bearer(tokens["access_token"]))).status_code == 200
    [listed] = await sessions_of(client, tokens["access_token"])
    assert datetime.fromisoformat(listed["last_active_at"]) == login_time
    refreshed = await client.post(
        "/auth/refresh",
        json={"refresh_token": tokens["refresh_token"]},
        headers={"User-Agent": "Refresher/3"},
    )
    assert refreshed.status_code == 200
    [listed] = await sessions_of(client, refreshed.json()["access_token"])
    assert datetime.fromisoformat(listed["last_active_at"]) == clock.now
    assert datetime.fromisoformat(listed["created_at"]) == login_time
    assert listed["user_agent"] == "Refresher/3"


async def test_spent_or_expired_sessions_are_not_listed(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await register(client)
    old = await login(client)
    await client.post("/auth/logout", json={"refresh_token": old["refresh_token"]})
    current = await login(client)
    listed = await sessions_of(client, current["access_token"])
    assert [s["id"] for s in listed] == [session_id(current["access_token"])]


async def test_revoking_a_session_reaches_its_access_tokens_at_once(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    phone = await login(client)
    laptop = await login(client)
    # Warm the state cache with the phone's session before it is revoked.
    assert (await client.get("/auth/me", headers=bearer(phone["access_token"]))).status_code == 200
    phone_sid = session_id(phone["access_token"])
    response = await client.delete(
        f"/auth/sessions/{phone_sid}", headers=bearer(laptop["access_token"])
    )
    assert response.status_code == 204
    assert no_store(response)
    assert_error(
        await client.get("/auth/me", headers=bearer(phone["access_token"])),
        401,
        "not_authenticated",
    )
    assert (
        await client.post("/auth/refresh", json={"refresh_token": phone["refresh_token"]})
    ).status_code == 401
    assert (await client.get("/auth/me", headers=bearer(laptop["access_token"]))).status_code == 200
    assert [s["id"] for s in await sessions_of(client, laptop["access_token"])] == [
        session_id(laptop["access_token"])
    ]
    # Revoked already: the same 404 as an unknown id.
    again = await client.delete(
        f"/auth/sessions/{phone_sid}", headers=bearer(laptop["access_token"])
    )
    assert_error(again, 404, "not_found")


async def test_someone_elses_session_and_an_unknown_one_get_the_same_404(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    await register(client, BOB)
    ann = await login(client)
    bob = await login(client, BOB)
    answers = []
    for target in (session_id(bob["access_token"]), "0" * 32, "no such id", "x" * 500):
        response = await client.delete(
            f"/auth/sessions/{target}", headers=bearer(ann["access_token"])
        )
        assert_error(response, 404, "not_found")
        answers.append(response.json())
    assert all(answer == answers[0] for answer in answers)
    # Bob's session is untouched.
    assert (await client.get("/auth/me", headers=bearer(bob["access_token"]))).status_code == 200


async def test_revoking_the_current_session_signs_the_caller_out(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    tokens = await login(client)
    sid = session_id(tokens["access_token"])
    response = await client.delete(f"/auth/sessions/{sid}", headers=bearer(tokens["access_token"]))
    assert response.status_code == 204
    cleared = response.headers.get_list("set-cookie")
    assert any(c.startswith("svc_access_token=") and "Max-Age=0" in c for c in cleared)
    assert (await client.get("/auth/me", headers=bearer(tokens["access_token"]))).status_code == 401


async def test_revoke_every_other_session(client: httpx.AsyncClient) -> None:
    await register(client)
    others = [await login(client) for _ in range(3)]
    current = await login(client)
    await register(client, BOB)
    bob = await login(client, BOB)
    response = await client.delete("/auth/sessions", headers=bearer(current["access_token"]))
    assert response.status_code == 200
    assert response.json() == {"revoked": 3}
    assert no_store(response)
    for tokens in others:
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 401
    assert (
        await client.get("/auth/me", headers=bearer(current["access_token"]))
    ).status_code == 200
    assert (await client.get("/auth/me", headers=bearer(bob["access_token"]))).status_code == 200
    again = await client.delete("/auth/sessions", headers=bearer(current["access_token"]))
    assert again.json() == {"revoked": 0}
    client.cookies.clear()
    assert_error(await client.delete("/auth/sessions"), 401, "not_authenticated")


# --- CSRF on the cookie path ------------------------------------------------------------------


UNSAFE = [
    ("DELETE", "/auth/sessions", None),
    ("DELETE", "/auth/sessions/{sid}", None),
    ("POST", "/auth/password-change", {"current_password": PASSWORD, "new_password": NEW_PASSWORD}),
    ("POST", "/auth/email-change", {"new_email": "new@example.com", "password": PASSWORD}),
    ("DELETE", "/auth/me", {"password": PASSWORD}),
]


@pytest.mark.parametrize(("method", "path", "body"), UNSAFE)
async def test_cookie_authenticated_unsafe_requests_need_the_bound_csrf_header(
    make_client: AppFactory,
    outbox: Outbox,
    method: str,
    path: str,
    body: dict[str, str] | None,
) -> None:
    async with make_client(email_change_send_fn=outbox) as client:
        await register(client)
        other = await login(client)  # a second session: its CSRF value is valid, not bound here
        other_csrf = client.cookies["svc_csrf_token"]
        client.cookies.clear()
        await login(client)  # the cookies now carry this session
        csrf = client.cookies["svc_csrf_token"]
        url = path.format(sid=session_id(other["access_token"]))
        for headers, expected in (
            ({}, 403),
            ({"X-CSRF-Token": "wrong"}, 403),
            ({"X-CSRF-Token": other_csrf}, 403),
        ):
            response = await client.request(method, url, json=body, headers=headers)
            assert_error(response, expected, "csrf_failed")
        # Nothing changed: the other session is alive, the password and email are the same.
        assert (
            await client.get("/auth/me", headers=bearer(other["access_token"]))
        ).status_code == 200
        assert outbox.sent == []
        response = await client.request(method, url, json=body, headers={"X-CSRF-Token": csrf})
        assert response.status_code in (200, 202, 204), response.text


async def test_safe_requests_need_no_csrf_header(client: httpx.AsyncClient) -> None:
    await register(client)
    await login(client)
    assert (await client.get("/auth/sessions")).status_code == 200


# --- password change ------------------------------------------------------------------------


async def test_password_change_keeps_this_session_and_shuts_out_the_old_password(
    backend: Backend, clock: FakeClock, outbox: Outbox, smtp_sink: SmtpSink
) -> None:
    async with gate_and_client(
        backend,
        clock,
        password_reset_send_fn=outbox,
        email_change_send_fn=outbox,
        smtp_url=smtp_sink.url,
    ) as (_, client):
        await register(client)
        mine = await login(client)
        other = await login(client)
        # A reset link and an email-change link mailed before the change must die with it.
        await client.post("/auth/password-reset", json={"email": ANN})
        [(_, reset_token)] = await outbox.wait_for(1)
        change_request = await client.post(
            "/auth/email-change",
            json={"new_email": "elsewhere@example.com", "password": PASSWORD},
            headers=bearer(mine["access_token"]),
        )
        assert change_request.status_code == 202, change_request.text
        [_, (_, change_token)] = await outbox.wait_for(2)
        response = await client.post(
            "/auth/password-change",
            json={"current_password": PASSWORD, "new_password": NEW_PASSWORD},
            headers=bearer(mine["access_token"]),
        )
        assert response.status_code == 200, response.text
        assert no_store(response)
        # This session goes on, and can still refresh.
        assert (
            await client.get("/auth/me", headers=bearer(mine["access_token"]))
        ).status_code == 200
        refreshed = await client.post(
            "/auth/refresh", json={"refresh_token": mine["refresh_token"]}
        )
        assert refreshed.status_code == 200, refreshed.text
        # Every other session is revoked, at once.
        assert (
            await client.get("/auth/me", headers=bearer(other["access_token"]))
        ).status_code == 401
        assert (
            await client.post("/auth/refresh", json={"refresh_token": other["refresh_token"]})
        ).status_code == 401
        # The old password is gone, the new one works.
        old = await client.post("/auth/login", json={"email": ANN, "password": PASSWORD})
        assert_error(old, 401, "invalid_credentials")
        await login(client, ANN, NEW_PASSWORD)
        confirm = await client.post(
            "/auth/password-reset/confirm",
            json={"token": reset_token, "new_password": "yet another passphrase"},
        )
        assert_error(confirm, 400, "invalid_token")
        moved = await client.post("/auth/email-change/confirm", json={"token": change_token})
        assert_error(moved, 400, "invalid_token")
        # The email-change request's notice and the password change's, in either order.
        notices = await smtp_sink.wait_for(2)
        [notice] = [m for m in notices if "password" in m["Subject"].lower()]
    assert notice["To"] == ANN
    assert "password" in notice["Subject"].lower()
    text = notice.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = notice.get_body(("html",)).get_content()  # type: ignore[union-attr]
    for part in (text, html, str(notice)):
        assert "token=" not in part
        assert reset_token not in part
        assert NEW_PASSWORD not in part


async def test_password_change_errors_change_nothing(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    other = await login(client)
    wrong = await client.post(
        "/auth/password-change",
        json={"current_password": "not my password", "new_password": NEW_PASSWORD},
        headers=bearer(tokens["access_token"]),
    )
    assert_error(wrong, 403, "wrong_password")
    short = await client.post(
        "/auth/password-change",
        json={"current_password": PASSWORD, "new_password": "short"},
        headers=bearer(tokens["access_token"]),
    )
    assert short.status_code == 422
    assert short.json()["detail"][0]["loc"] == ["body", "new_password"]
    missing = await client.post(
        "/auth/password-change",
        json={"new_password": NEW_PASSWORD},
        headers=bearer(tokens["access_token"]),
    )
    assert missing.status_code == 422
    client.cookies.clear()  # no cookie: the access cookie would authenticate (and need CSRF)
    unauthenticated = await client.post(
        "/auth/password-change", json={"current_password": PASSWORD, "new_password": NEW_PASSWORD}
    )
    assert_error(unauthenticated, 401, "not_authenticated")
    assert (await client.get("/auth/me", headers=bearer(other["access_token"]))).status_code == 200
    await login(client, ANN, PASSWORD)


async def test_wrong_current_passwords_count_toward_the_login_lock_out(
    make_client: AppFactory,
) -> None:
    async with make_client(
        rate_limits=True,
        login_failure_limit_per_address="3/minute",
        login_limit_per_ip="1000/minute",
    ) as client:
        await register(client)
        tokens = await login(client)
        body = {"current_password": "not my password", "new_password": NEW_PASSWORD}
        for _ in range(2):
            wrong = await client.post(
                "/auth/password-change", json=body, headers=bearer(tokens["access_token"])
            )
            assert_error(wrong, 403, "wrong_password")
        # The third failure is a failed login of the same account: login is counted too.
        bad_login = await client.post("/auth/login", json={"email": ANN, "password": "nope nope"})
        assert_error(bad_login, 401, "invalid_credentials")
        locked = await client.post(
            "/auth/password-change", json=body, headers=bearer(tokens["access_token"])
        )
        assert_error(locked, 429, "rate_limited")
        assert int(locked.headers["retry-after"]) >= 1
        # The right password is refused too while the lock-out lasts, at login as here.
        right = {"current_password": PASSWORD, "new_password": NEW_PASSWORD}
        assert_error(
            await client.post(
                "/auth/password-change", json=right, headers=bearer(tokens["access_token"])
            ),
            429,
            "rate_limited",
        )
        assert_error(
            await client.post("/auth/login", json={"email": ANN, "password": PASSWORD}),
            429,
            "rate_limited",
        )


# --- email change ---------------------------------------------------------------------------


async def test_email_change_without_mail_is_not_configured(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    response = await client.post(
        "/auth/email-change",
        json={"new_email": "new@example.com", "password": PASSWORD},
        headers=bearer(tokens["access_token"]),
    )
    assert_error(response, 501, "not_configured")


async def test_email_change_double_opt_in(
    backend: Backend, clock: FakeClock, smtp_sink: SmtpSink
) -> None:
    async with gate_and_client(
        backend, clock, smtp_url=smtp_sink.url, public_url="https://app.example.test"
    ) as (_, client):
        await register(client)
        tokens = await login(client)
        auth = bearer(tokens["access_token"])
        response = await client.post(
            "/auth/email-change",
            json={"new_email": "Ann.New@Example.com", "password": PASSWORD},
            headers=auth,
        )
        assert response.status_code == 202, response.text
        assert no_store(response)
        messages = await smtp_sink.wait_for(2)
        by_recipient = {m["To"]: m for m in messages}
        link_mail = by_recipient["Ann.New@example.com"]
        notice = by_recipient[ANN]
        # Nothing changes until the new address confirms.
        me = (await client.get("/auth/me", headers=auth)).json()
        assert me["email"] == ANN
        link_text = link_mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
        link = next(
            word for word in link_text.split() if word.startswith("https://app.example.test/")
        )
        assert urlsplit(link).path == "/confirm-email-change"
        [token] = parse_qs(urlsplit(link).query)["token"]
        for part in (str(notice),):
            assert token not in part
            assert "token=" not in part
        assert "Ann.New@example.com" in notice.get_body(("plain",)).get_content()  # type: ignore[union-attr]

        confirmed = await client.post("/auth/email-change/confirm", json={"token": token})
        assert confirmed.status_code == 200, confirmed.text
        assert no_store(confirmed)
        me = (await client.get("/auth/me", headers=auth)).json()
        assert me["email"] == "Ann.New@example.com"
        assert me["email_verified"] is True
        await login(client, "ann.new@example.com")
        old = await client.post("/auth/login", json={"email": ANN, "password": PASSWORD})
        assert_error(old, 401, "invalid_credentials")
        # The old address is free again.
        await register(client, ANN)
        again = await client.post("/auth/email-change/confirm", json={"token": token})
        assert_error(again, 400, "invalid_token")


async def test_email_change_errors(
    make_client: AppFactory, outbox: Outbox, clock: FakeClock
) -> None:
    async with make_client(email_change_send_fn=outbox) as client:
        await register(client)
        await register(client, BOB)
        auth = bearer((await login(client))["access_token"])

        async def change(new_email: str, password: str = PASSWORD) -> httpx.Response:
            return await client.post(
                "/auth/email-change",
                json={"new_email": new_email, "password": password},
                headers=auth,
            )

        assert_error(await change("new@example.com", "wrong password"), 403, "wrong_password")
        assert_error(await change("BOB@example.com"), 409, "email_taken")
        assert_error(await change(ANN.upper()), 409, "email_taken")  # already yours
        assert (await change("not an email")).status_code == 422
        assert (await change("x" * 400 + "@example.com")).status_code == 422
        client.cookies.clear()
        assert_error(
            await client.post(
                "/auth/email-change", json={"new_email": "new@example.com", "password": PASSWORD}
            ),
            401,
            "not_authenticated",
        )
        assert outbox.sent == []
        # Only the newest link works; an expired one is refused.
        assert (await change("first@example.com")).status_code == 202
        assert (await change("second@example.com")).status_code == 202
        (_, first), (_, second) = await outbox.wait_for(2)
        assert outbox.sent[0][0] == "first@example.com"
        confirm = "/auth/email-change/confirm"
        assert_error(await client.post(confirm, json={"token": first}), 400, "invalid_token")
        clock.advance(3601)
        assert_error(await client.post(confirm, json={"token": second}), 400, "invalid_token")
        assert_error(await client.post(confirm, json={"token": "nonsense"}), 400, "invalid_token")
        assert (await client.post(confirm, json={})).status_code == 422
        fresh = bearer((await login(client))["access_token"])
        assert (await client.get("/auth/me", headers=fresh)).json()["email"] == ANN


async def test_an_address_taken_between_request_and_confirm_is_refused(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(email_change_send_fn=outbox) as client:
        await register(client)
        auth = bearer((await login(client))["access_token"])
        response = await client.post(
            "/auth/email-change",
            json={"new_email": "wanted@example.com", "password": PASSWORD},
            headers=auth,
        )
        assert response.status_code == 202
        [(_, token)] = await outbox.wait_for(1)
        await register(client, "WANTED@example.com")
        taken = await client.post("/auth/email-change/confirm", json={"token": token})
        assert_error(taken, 409, "email_taken")
        assert (await client.get("/auth/me", headers=auth)).json()["email"] == ANN


async def test_two_accounts_confirming_one_address_at_once(
    backend: Backend, clock: FakeClock, outbox: Outbox
) -> None:
    async with gate_and_client(backend, clock, email_change_send_fn=outbox) as (gate, client):
        accounts = [f"user{i}@example.com" for i in range(4)]
        for email in accounts:
            await register(client, email)
            auth = bearer((await login(client, email))["access_token"])
            response = await client.post(
                "/auth/email-change",
                json={"new_email": "Contested@example.com", "password": PASSWORD},
                headers=auth,
            )
            assert response.status_code == 202
        sent = await outbox.wait_for(len(accounts))
        answers = await asyncio.gather(
            *(client.post("/auth/email-change/confirm", json={"token": token}) for _, token in sent)
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200, 409, 409, 409], [a.text for a in answers]
        users = await gate.accounts.list_users()
        assert sum(u.email.lower() == "contested@example.com" for u in users) == 1
        assert len(users) == len(accounts)


# --- account deletion -----------------------------------------------------------------------


async def _rows_of(gate: AuthGate, user_id: int) -> dict[str, int]:
    from sqlalchemy import text

    counts = {}
    async with gate.services.db.read() as s:
        counts["users"] = (
            await s.execute(
                text("SELECT count(*) FROM authgate_users WHERE id = :u"), {"u": user_id}
            )
        ).scalar_one()
        for table in ("authgate_sessions", "authgate_one_time_tokens"):
            counts[table] = (
                await s.execute(
                    text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": user_id}
                )
            ).scalar_one()
        counts["refresh_tokens"] = (
            await s.execute(text("SELECT count(*) FROM authgate_refresh_tokens"))
        ).scalar_one()
    return counts


async def test_delete_account_leaves_no_row_behind(
    backend: Backend, clock: FakeClock, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    async with gate_and_client(
        backend, clock, password_reset_send_fn=outbox, email_verify_send_fn=outbox
    ) as (gate, client):
        user = await register(client)
        first = await login(client)
        second = await login(client)
        assert (
            await client.get("/auth/me", headers=bearer(first["access_token"]))
        ).status_code == 200
        await client.post("/auth/password-reset", json={"email": ANN})
        await client.post("/auth/email-verification", headers=bearer(first["access_token"]))
        await outbox.wait_for(2)
        before = await _rows_of(gate, user["id"])
        assert before["authgate_sessions"] == 2
        assert before["authgate_one_time_tokens"] == 2

        wrong = await client.request(
            "DELETE", "/auth/me", json={"password": "not it"}, headers=bearer(first["access_token"])
        )
        assert_error(wrong, 403, "wrong_password")
        assert await _rows_of(gate, user["id"]) == before

        response = await client.request(
            "DELETE", "/auth/me", json={"password": PASSWORD}, headers=bearer(first["access_token"])
        )
        assert response.status_code == 204, response.text
        assert no_store(response)
        assert await _rows_of(gate, user["id"]) == {
            "users": 0,
            "authgate_sessions": 0,
            "authgate_one_time_tokens": 0,
            "refresh_tokens": 0,
        }
        for tokens in (first, second):
            assert (
                await client.get("/auth/me", headers=bearer(tokens["access_token"]))
            ).status_code == 401
            assert (
                await client.post("/auth/refresh", json={"refresh_token": tokens["refresh_token"]})
            ).status_code == 401
        # The email can register again, as a new account.
        again = await register(client)
        assert again["id"] != user["id"]
    deleted = [
        r.authgate  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "authgate.events" and r.getMessage() == "account_deleted"
    ]
    assert [(d["outcome"], d["user_id"]) for d in deleted] == [
        ("failure", user["id"]),
        ("success", user["id"]),
    ]
    assert ANN not in json.dumps(deleted)


async def test_delete_account_needs_authentication_and_a_password(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    assert_error(
        await client.request("DELETE", "/auth/me", json={"password": PASSWORD}),
        401,
        "not_authenticated",
    )
    missing = await client.request(
        "DELETE", "/auth/me", json={}, headers=bearer(tokens["access_token"])
    )
    assert missing.status_code == 422
    assert (await client.get("/auth/me", headers=bearer(tokens["access_token"]))).status_code == 200


# --- events ---------------------------------------------------------------------------------


async def test_every_step_is_an_event_without_a_secret(
    backend: Backend, clock: FakeClock, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    secrets_seen: list[str] = [PASSWORD, NEW_PASSWORD]
    async with gate_and_client(backend, clock, email_change_send_fn=outbox) as (_, client):
        await register(client)
        mine = await login(client)
        other = await login(client)
        secrets_seen += [mine["access_token"], mine["refresh_token"], other["refresh_token"]]
        auth = bearer(mine["access_token"])
        await client.delete(f"/auth/sessions/{session_id(other['access_token'])}", headers=auth)
        await login(client)
        await client.delete("/auth/sessions", headers=auth)
        await client.post(
            "/auth/password-change",
            json={"current_password": PASSWORD, "new_password": NEW_PASSWORD},
            headers=auth,
        )
        await client.post(
            "/auth/email-change",
            json={"new_email": "moved@example.com", "password": NEW_PASSWORD},
            headers=auth,
        )
        [(_, token)] = await outbox.wait_for(1)
        secrets_seen.append(token)
        await client.post("/auth/email-change/confirm", json={"token": token})
        await client.request("DELETE", "/auth/me", json={"password": NEW_PASSWORD}, headers=auth)
    records = [r for r in caplog.records if r.name == "authgate.events"]
    names = [r.getMessage() for r in records]
    for expected in (
        "session_revoked",
        "password_changed",
        "email_change_requested",
        "email_change_completed",
        "account_deleted",
    ):
        assert expected in names
    dumped = json.dumps([r.authgate for r in records])  # type: ignore[attr-defined]
    for secret in secrets_seen:
        assert secret not in dumped
