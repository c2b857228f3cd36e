"""The admin API through HTTP (contract §10), on both backends: who may call it (no
credentials, a normal user, a superuser with and without a second factor, the admin token
right and wrong), every endpoint and its errors, keyset pages that visit every user once
while users are added, tampered cursors, deactivation and deletion reaching access tokens at
once, and the events naming the actor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from authgate import AuthGate, create_app
from authgate.store.audit import AuditStore, row_values
from authgate.store.models import TotpFactor
from tests.helpers import (
    ADMIN_TOKEN,
    PASSWORD,
    Backend,
    FakeClock,
    admin_headers,
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

ANN = "ann@example.com"
BOSS = "boss@example.com"


@asynccontextmanager
async def admin_app(
    backend: Backend, clock: FakeClock, **overrides: Any
) -> AsyncIterator[tuple[AuthGate, httpx.AsyncClient, list[Mapping[str, Any]]]]:
    """An app with the admin token set; (its gate, a client, the events its requests emit)."""
    app = create_app(make_config(backend, admin_token=ADMIN_TOKEN, **overrides), clock=clock)
    gate: AuthGate = app.state.authgate
    seen: list[Mapping[str, Any]] = []
    gate.event_sinks.append(seen.append)
    async with running(app) as client:
        yield gate, client, seen


async def create(
    client: httpx.AsyncClient, email: str, *, superuser: bool = False, **extra: Any
) -> dict[str, Any]:
    response = await client.post(
        "/auth/admin/users",
        json={"email": email, "password": PASSWORD, "is_superuser": superuser, **extra},
        headers=admin_headers(),
    )
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    body: dict[str, Any] = response.json()
    return body


async def access(client: httpx.AsyncClient, email: str) -> str:
    tokens = await login(client, email)
    client.cookies.clear()
    token: str = tokens["access_token"]
    return token


def emitted(seen: list[Mapping[str, Any]], event: str) -> list[Mapping[str, Any]]:
    return [r for r in seen if r["event"] == event]


# --- who may call it ----------------------------------------------------------------------


async def test_who_may_call_the_admin_api(backend: Backend, clock: FakeClock) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        await register(client, ANN)
        await create(client, BOSS, superuser=True)
        path = "/auth/admin/users"
        assert_error(await client.get(path), 401, "not_authenticated")
        assert_error(await client.get(path, headers=bearer(await access(client, ANN))), 403)
        wrong = ADMIN_TOKEN[:-1] + ("x" if ADMIN_TOKEN[-1] != "x" else "y")
        assert_error(await client.get(path, headers=admin_headers(wrong)), 403, "forbidden")
        assert_error(await client.get(path, headers=admin_headers(ADMIN_TOKEN + "x")), 403)
        # A JWT-shaped value that does not verify is an access token that failed: 401.
        assert_error(await client.get(path, headers=bearer("a.b.c")), 401)
        ok = await client.get(path, headers=admin_headers())
        assert ok.status_code == 200, ok.text
        assert ok.headers["cache-control"] == "no-store"
        boss = await client.get(path, headers=bearer(await access(client, BOSS)))
        assert boss.status_code == 200, boss.text
        assert {u["email"] for u in boss.json()["users"]} == {ANN, BOSS}


async def test_without_an_admin_token_only_superusers_get_in(
    backend: Backend, clock: FakeClock
) -> None:
    app = create_app(make_config(backend), clock=clock)
    async with running(app) as client:
        await register(client, ANN)
        assert_error(await client.get("/auth/admin/users", headers=admin_headers()), 401)
        token = await access(client, ANN)
        assert_error(await client.get("/auth/admin/users", headers=bearer(token)), 403)


def test_an_admin_token_shorter_than_32_characters_is_refused(backend: Backend) -> None:
    short = "s3cr3t-" + "k" * 24  # 31 characters
    with pytest.raises(ValidationError) as refused:
        make_config(backend, admin_token=short)
    assert short not in str(refused.value)
    assert "at least 32 characters" in str(refused.value)


async def test_a_superuser_with_a_second_factor_acts_only_at_aal2(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (gate, client, _seen):
        boss = await create(client, BOSS, superuser=True)
        aal1 = await access(client, BOSS)
        assert (await client.get("/auth/admin/users", headers=bearer(aal1))).status_code == 200
        # A factor confirmed after that login (written to the store: enrolling through HTTP
        # would also revoke the session): the aal1 token no longer reaches the admin API.
        async with gate.services.db.write() as s:
            s.add(
                TotpFactor(
                    user_id=boss["id"],
                    secret_sealed=b"\x00" * 32,
                    created_at=clock(),
                    confirmed_at=clock(),
                )
            )
        assert_error(await client.get("/auth/admin/users", headers=bearer(aal1)), 403, "forbidden")
        assert (await client.get("/auth/me", headers=bearer(aal1))).status_code == 200

    async with admin_app(backend, clock) as (_, client, _seen):
        # A superuser who enrolled through HTTP: a new login waits for the second step (401
        # mfa_required, as everywhere), and the session raised to aal2 gets in.
        await create(client, "chief@example.com", superuser=True)
        tokens = await login(client, "chief@example.com")
        client.cookies.clear()
        secret, _ = await enrol_totp(client, tokens["access_token"], clock)
        pending = await access(client, "chief@example.com")
        assert claims_of(pending)["mfa"] == "pending"
        assert_error(
            await client.get("/auth/admin/users", headers=bearer(pending)), 401, "mfa_required"
        )
        clock.advance(30)
        raised = await client.post(
            "/auth/mfa/verify", json={"code": totp_code(secret, clock())}, headers=bearer(pending)
        )
        aal2 = assert_token_response(raised)["access_token"]
        client.cookies.clear()
        assert claims_of(aal2)["aal"] == "aal2"
        listed = await client.get("/auth/admin/users", headers=bearer(aal2))
        assert listed.status_code == 200, listed.text
        me = next(u for u in listed.json()["users"] if u["email"] == "chief@example.com")
        assert me["has_second_factor"] is True


async def test_cookie_authenticated_changes_need_the_csrf_header(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        await create(client, BOSS, superuser=True)
        ann = await create(client, ANN)
        await login(client, BOSS)  # the jar keeps the cookies
        path = f"/auth/admin/users/{ann['id']}"
        assert (await client.get(path)).status_code == 200  # a GET needs no header
        assert_error(await client.patch(path, json={"is_active": False}), 403, "csrf_failed")
        csrf = {"X-CSRF-Token": client.cookies["svc_csrf_token"]}
        changed = await client.patch(path, json={"email_verified": True}, headers=csrf)
        assert changed.status_code == 200, changed.text
        # The admin token travels in the Authorization header only, never as a cookie.
        client.cookies.clear()
        client.cookies.set("svc_access_token", ADMIN_TOKEN)
        assert_error(await client.get(path), 401)
        client.cookies.clear()


# --- listing ------------------------------------------------------------------------------


async def page_of(
    client: httpx.AsyncClient, cursor: str | None, limit: int, **params: str
) -> tuple[list[int], str | None]:
    query: dict[str, str | int] = {"limit": limit, **params}
    if cursor is not None:
        query["cursor"] = cursor
    response = await client.get("/auth/admin/users", params=query, headers=admin_headers())
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"users", "next_cursor"}
    return [u["id"] for u in body["users"]], body["next_cursor"]


async def test_pages_visit_every_user_once_while_users_are_added(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        for n in range(7):
            await create(client, f"user{n}@example.com")
        seen: list[int] = []
        cursor: str | None = None
        added = 0
        for _ in range(20):  # bounded: 7 users + 2 per page, 3 a page, ends well before
            ids, cursor = await page_of(client, cursor, 3)
            assert len(ids) <= 3
            seen += ids
            if cursor is None:
                break
            if added < 6:  # users arrive between pages, on every page but the last ones
                for _ in range(2):
                    await create(client, f"late{added}@example.com")
                    added += 1
        assert cursor is None
        assert len(seen) == len(set(seen)) == 13
        assert seen == sorted(seen)
        everyone, _ = await page_of(client, None, 100)
        assert seen == everyone


async def test_the_query_matches_part_of_the_email_literally(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        for email in ("Ann.Lee@example.com", "a_b@example.com", "axb@example.com", "bob@x.org"):
            await create(client, email)

        async def emails(query: str) -> set[str]:
            response = await client.get(
                "/auth/admin/users", params={"query": query}, headers=admin_headers()
            )
            assert response.status_code == 200, response.text
            return {u["email"] for u in response.json()["users"]}

        assert await emails("ann.LEE") == {"Ann.Lee@example.com"}
        assert await emails("a_b") == {"a_b@example.com"}  # `_` is no wildcard
        assert await emails("%") == set()
        assert await emails("\\") == set()
        assert await emails("example.com") == {
            "Ann.Lee@example.com",
            "a_b@example.com",
            "axb@example.com",
        }
        ids, cursor = await page_of(client, None, 1, query="example")
        assert cursor is not None
        more, _ = await page_of(client, cursor, 1, query="example")
        assert more[0] > ids[0]
        # The cursor belongs to its query.
        response = await client.get(
            "/auth/admin/users",
            params={"query": "bob", "cursor": cursor, "limit": 1},
            headers=admin_headers(),
        )
        assert_error(response, 400, "bad_request")


async def test_tampered_cursors_and_bad_limits_are_refused(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        for n in range(3):
            await create(client, f"user{n}@example.com")
        _, cursor = await page_of(client, None, 1)
        assert cursor is not None
        flipped = cursor[:5] + ("A" if cursor[5] != "A" else "B") + cursor[6:]
        forged = [flipped, cursor + "A", cursor[:-2], "", "!!!!", "é" * 10, "A" * 32, "0"]
        for bad in forged:
            response = await client.get(
                "/auth/admin/users", params={"cursor": bad}, headers=admin_headers()
            )
            if bad == "":
                assert response.status_code == 200  # no cursor: the first page
                continue
            assert_error(response, 400, "bad_request")
        for limit in ("0", "101", "-1", "x"):
            response = await client.get(
                "/auth/admin/users", params={"limit": limit}, headers=admin_headers()
            )
            assert response.status_code == 422, response.text


# --- one user -----------------------------------------------------------------------------


async def test_a_user_with_its_live_sessions(backend: Backend, clock: FakeClock) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        ann = await create(client, ANN, email_verified=True)
        first = claims_of(await access(client, ANN))["sid"]
        clock.advance(1)
        second = claims_of(await access(client, ANN))["sid"]
        response = await client.get(f"/auth/admin/users/{ann['id']}", headers=admin_headers())
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "no-store"
        body = response.json()
        assert body["email"] == ANN
        assert (body["is_active"], body["is_superuser"], body["email_verified"]) == (
            True,
            False,
            True,
        )
        assert body["has_second_factor"] is False
        assert {"created_at", "updated_at"} <= set(body)
        assert "password_hash" not in response.text
        assert [s["id"] for s in body["sessions"]] == [second, first]
        assert all("current" not in s for s in body["sessions"])
        for missing in ("999999", str(2**63 - 1)):
            answer = await client.get(f"/auth/admin/users/{missing}", headers=admin_headers())
            assert_error(answer, 404, "not_found")
        for bad in ("0", "-1", str(2**63), "x"):
            answer = await client.get(f"/auth/admin/users/{bad}", headers=admin_headers())
            assert answer.status_code == 422, answer.text


async def test_create_applies_the_password_rules_and_the_unique_email(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (_, client, seen):
        boss = await create(client, BOSS, superuser=True)
        assert boss["is_superuser"] is True
        token = await access(client, BOSS)
        made = await client.post(
            "/auth/admin/users", json={"email": ANN, "password": PASSWORD}, headers=bearer(token)
        )
        assert made.status_code == 201, made.text
        assert await login(client, ANN)
        client.cookies.clear()
        again = await client.post(
            "/auth/admin/users",
            json={"email": ANN.upper(), "password": PASSWORD},
            headers=admin_headers(),
        )
        assert_error(again, 409, "email_taken")
        for body in (
            {"email": "carl@example.com", "password": "short"},
            {"email": "carl@example.com", "password": "password123"},
            {"email": "not an email", "password": PASSWORD},
            {"email": "carl@example.com", "password": PASSWORD, "is_superuser": "yes"},
            {"email": "carl@example.com", "password": PASSWORD, "is_admin": True},
        ):
            refused = await client.post("/auth/admin/users", json=body, headers=admin_headers())
            assert refused.status_code == 422, refused.text
            assert PASSWORD not in refused.text
        created = emitted(seen, "admin_user_created")
        assert [(r["actor"], r["user_id"]) for r in created] == [
            ("admin_token", boss["id"]),
            (f"user:{boss['id']}", made.json()["id"]),
        ]


# --- changes ------------------------------------------------------------------------------


async def test_deactivation_reaches_access_tokens_at_once(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (_, client, seen):
        boss = await create(client, BOSS, superuser=True)
        ann = await create(client, ANN)
        tokens = await login(client, ANN)
        client.cookies.clear()
        other = await access(client, ANN)
        for token in (tokens["access_token"], other):
            assert (await client.get("/auth/me", headers=bearer(token))).status_code == 200
        path = f"/auth/admin/users/{ann['id']}"
        changed = await client.patch(
            path, json={"is_active": False}, headers=bearer(await access(client, BOSS))
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["is_active"] is False
        assert changed.headers["cache-control"] == "no-store"
        for token in (tokens["access_token"], other):
            assert_error(await client.get("/auth/me", headers=bearer(token)), 401)
        assert_error(await refresh(client, tokens["refresh_token"]), 401)
        client.cookies.clear()
        assert (await client.get(path, headers=admin_headers())).json()["sessions"] == []
        refused = await client.post("/auth/login", json={"email": ANN, "password": PASSWORD})
        assert refused.status_code == 401
        updated = emitted(seen, "admin_user_updated")
        assert [(r["actor"], r["user_id"], r["reason"]) for r in updated] == [
            (f"user:{boss['id']}", ann["id"], "is_active")
        ]
        assert len(emitted(seen, "session_revoked")) == 2

        back = await client.patch(path, json={"is_active": True}, headers=admin_headers())
        assert back.status_code == 200, back.text
        assert await login(client, ANN)
        client.cookies.clear()


async def test_flags_change_and_admins_keep_their_own(backend: Backend, clock: FakeClock) -> None:
    async with admin_app(backend, clock) as (_, client, _seen):
        boss = await create(client, BOSS, superuser=True)
        ann = await create(client, ANN)
        token = await access(client, BOSS)
        path = f"/auth/admin/users/{ann['id']}"
        promoted = await client.patch(
            path, json={"is_superuser": True, "email_verified": True}, headers=bearer(token)
        )
        assert promoted.status_code == 200, promoted.text
        assert (promoted.json()["is_superuser"], promoted.json()["email_verified"]) == (True, True)
        # Ann's existing token is now a superuser's.
        ann_token = await access(client, ANN)
        assert (await client.get("/auth/admin/users", headers=bearer(ann_token))).status_code == 200
        demoted = await client.patch(path, json={"is_superuser": False}, headers=bearer(token))
        assert demoted.status_code == 200
        assert_error(await client.get("/auth/admin/users", headers=bearer(ann_token)), 403)

        own = f"/auth/admin/users/{boss['id']}"
        for body in ({"is_superuser": False}, {"is_active": False}):
            assert_error(await client.patch(own, json=body, headers=bearer(token)), 409, "conflict")
        assert_error(await client.delete(own, headers=bearer(token)), 409, "conflict")
        # The admin token has no user of its own: it may change anyone.
        ok = await client.patch(own, json={"email_verified": True}, headers=bearer(token))
        assert ok.status_code == 200
        bodies: list[dict[str, Any]] = [{}, {"is_active": None}, {"is_active": "false"}, {"x": 1}]
        for body in bodies:
            refused = await client.patch(path, json=body, headers=admin_headers())
            assert refused.status_code == 422, refused.text
        missing = await client.patch(
            "/auth/admin/users/999999", json={"is_active": False}, headers=admin_headers()
        )
        assert_error(missing, 404, "not_found")


async def test_deletion_reaches_access_tokens_at_once(backend: Backend, clock: FakeClock) -> None:
    async with admin_app(backend, clock) as (_, client, seen):
        ann = await create(client, ANN)
        tokens = await login(client, ANN)
        client.cookies.clear()
        path = f"/auth/admin/users/{ann['id']}"
        deleted = await client.delete(path, headers=admin_headers())
        assert deleted.status_code == 204
        assert deleted.headers["cache-control"] == "no-store"
        assert_error(await client.get("/auth/me", headers=bearer(tokens["access_token"])), 401)
        assert_error(await refresh(client, tokens["refresh_token"]), 401)
        client.cookies.clear()
        assert_error(await client.get(path, headers=admin_headers()), 404, "not_found")
        assert_error(await client.delete(path, headers=admin_headers()), 404, "not_found")
        assert [(r["actor"], r["user_id"]) for r in emitted(seen, "admin_user_deleted")] == [
            ("admin_token", ann["id"])
        ]
        # The address is free again.
        await create(client, ANN)


async def test_revoking_every_session_of_a_user(backend: Backend, clock: FakeClock) -> None:
    async with admin_app(backend, clock) as (_, client, seen):
        ann = await create(client, ANN)
        tokens = [await access(client, ANN) for _ in range(2)]
        path = f"/auth/admin/users/{ann['id']}/sessions"
        revoked = await client.delete(path, headers=admin_headers())
        assert revoked.status_code == 200, revoked.text
        assert revoked.json() == {"revoked": 2}
        assert revoked.headers["cache-control"] == "no-store"
        for token in tokens:
            assert_error(await client.get("/auth/me", headers=bearer(token)), 401)
        again = await client.delete(path, headers=admin_headers())
        assert again.json() == {"revoked": 0}
        # The account itself goes on: a new login works.
        assert await login(client, ANN)
        client.cookies.clear()
        assert_error(
            await client.delete("/auth/admin/users/999999/sessions", headers=admin_headers()),
            404,
            "not_found",
        )
        records = emitted(seen, "admin_sessions_revoked")
        assert [(r["actor"], r["user_id"]) for r in records] == [("admin_token", ann["id"])] * 2
        assert {r["reason"] for r in emitted(seen, "session_revoked")} == {"admin"}


async def test_no_event_or_answer_quotes_a_secret(backend: Backend, clock: FakeClock) -> None:
    async with admin_app(backend, clock) as (_, client, seen):
        ann = await create(client, ANN)
        await client.patch(
            f"/auth/admin/users/{ann['id']}", json={"is_active": False}, headers=admin_headers()
        )
        await client.get("/auth/admin/users", headers=admin_headers(ADMIN_TOKEN[:-1] + "!"))
        text = repr(seen)
        assert ADMIN_TOKEN not in text
        assert ADMIN_TOKEN[:-1] not in text
        assert PASSWORD not in text


async def test_the_openapi_document_lists_the_admin_api_with_its_scheme(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock, docs=True) as (_, client, _seen):
        document = (await client.get("/openapi.json")).json()
        admin_paths = {p: ops for p, ops in document["paths"].items() if "/admin/" in p}
        assert set(admin_paths) == {
            "/auth/admin/users",
            "/auth/admin/users/{user_id}",
            "/auth/admin/users/{user_id}/sessions",
            "/auth/admin/audit",
        }
        for operations in admin_paths.values():
            for operation in operations.values():
                assert operation["tags"] == ["admin"]
                assert operation["security"] == [{"bearer": []}]
        schemes = document["components"]["securitySchemes"]
        assert schemes["bearer"] == {"type": "http", "scheme": "bearer"}


# --- the audit log ------------------------------------------------------------------------


async def add_audit_rows(gate: AuthGate, *records: tuple[datetime, dict[str, Any]]) -> None:
    """Rows written straight into the audit table (what the audit writer stores)."""
    async with gate.services.db.write() as s:
        await AuditStore(s).add_many([row_values(at, record) for at, record in records])


async def audit_page(
    client: httpx.AsyncClient, **params: str | int
) -> tuple[list[dict[str, Any]], str | None]:
    response = await client.get("/auth/admin/audit", params=params, headers=admin_headers())
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"events", "next_cursor"}
    events: list[dict[str, Any]] = body["events"]
    return events, body["next_cursor"]


async def test_the_audit_log_in_pages_newest_first_with_its_filters(
    backend: Backend, clock: FakeClock
) -> None:
    # No writer (retention 0): the table holds exactly the rows this test puts there.
    async with admin_app(backend, clock, audit_retention_days=0) as (gate, client, _seen):
        start = clock()
        login_ok = {"event": "login_succeeded", "outcome": "success", "user_id": 1}
        failed = {"event": "login_failed", "outcome": "failure", "reason": "wrong_password"}
        made = {
            "event": "admin_user_created",
            "outcome": "success",
            "user_id": 2,
            "actor": "user:1",
        }
        await add_audit_rows(
            gate,
            *[(start + timedelta(seconds=n), login_ok) for n in range(3)],
            *[(start + timedelta(seconds=3 + n), {**failed, "user_id": 2}) for n in range(2)],
            (start + timedelta(seconds=5), {**made, "request_id": "r-1", "client_ip": "::1"}),
        )
        events, cursor = await audit_page(client)
        assert cursor is None
        assert [e["event"] for e in events] == ["admin_user_created"] + ["login_failed"] * 2 + [
            "login_succeeded"
        ] * 3
        assert [e["id"] for e in events] == sorted((e["id"] for e in events), reverse=True)
        newest = events[0]
        assert (newest["actor"], newest["user_id"], newest["request_id"]) == ("user:1", 2, "r-1")
        assert set(newest) == {
            "id",
            "time",
            "event",
            "outcome",
            "user_id",
            "session_id",
            "reason",
            "factor",
            "actor",
            "client_ip",
            "user_agent",
            "request_id",
        }

        assert [e["event"] for e in (await audit_page(client, user_id=1))[0]] == [
            "login_succeeded"
        ] * 3
        assert len((await audit_page(client, event="login_failed"))[0]) == 2
        assert len((await audit_page(client, user_id=2, event="login_failed"))[0]) == 2
        later = (start + timedelta(seconds=4)).isoformat()
        assert [e["event"] for e in (await audit_page(client, since=later))[0]] == [
            "admin_user_created",
            "login_failed",
        ]

        # Pages of 2 visit every row once while newer rows are written between pages.
        seen: list[int] = []
        cursor = None
        for n in range(10):  # bounded: 6 rows, 2 a page
            params: dict[str, str | int] = {"limit": 2}
            if cursor is not None:
                params["cursor"] = cursor
            page, cursor = await audit_page(client, **params)
            seen += [e["id"] for e in page]
            await add_audit_rows(gate, (start + timedelta(seconds=10 + n), login_ok))
            if cursor is None:
                break
        assert cursor is None
        assert seen == [e["id"] for e in events]

        _, cursor = await audit_page(client, limit=1)
        assert cursor is not None
        tampered = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")
        bad_cursors: list[dict[str, str | int]] = [
            {"cursor": cursor, "user_id": 1},  # another filter than the cursor's
            {"cursor": tampered},
        ]
        for bad in bad_cursors:
            answer = await client.get("/auth/admin/audit", params=bad, headers=admin_headers())
            assert_error(answer, 400, "bad_request")
        unknown = await client.get(
            "/auth/admin/audit", params={"event": "no_such_event"}, headers=admin_headers()
        )
        assert_error(unknown, 400, "bad_request")
        invalid: list[dict[str, str | int]] = [
            {"since": "2026-01-01T00:00:00"},  # no offset: which zone is meant?
            {"user_id": 0},
            {"limit": 101},
        ]
        for wrong in invalid:
            answer = await client.get("/auth/admin/audit", params=wrong, headers=admin_headers())
            assert answer.status_code == 422, answer.text
        assert_error(await client.get("/auth/admin/audit"), 401)
        await register(client, ANN)
        user = await access(client, ANN)
        assert_error(await client.get("/auth/admin/audit", headers=bearer(user)), 403)


async def test_every_admin_action_is_in_the_audit_log_with_its_actor(
    backend: Backend, clock: FakeClock
) -> None:
    async with admin_app(backend, clock) as (gate, client, _seen):
        boss = await create(client, BOSS, superuser=True)
        ann = await create(client, ANN)
        token = await access(client, BOSS)
        path = f"/auth/admin/users/{ann['id']}"
        changed = await client.patch(
            path, json={"is_active": False}, headers={**bearer(token), "X-Request-ID": "req-42"}
        )
        assert changed.status_code == 200, changed.text
        assert (await client.delete(f"{path}/sessions", headers=bearer(token))).status_code == 200
        assert (await client.delete(path, headers=admin_headers())).status_code == 204
        assert gate.audit is not None
        await gate.audit.flush()  # the worker's buffer, written now rather than within 0.5 s

        events, _ = await audit_page(client, user_id=ann["id"])
        admin = [(e["event"], e["actor"]) for e in events if e["event"].startswith("admin_")]
        assert admin == [
            ("admin_user_deleted", "admin_token"),
            ("admin_sessions_revoked", f"user:{boss['id']}"),
            ("admin_user_updated", f"user:{boss['id']}"),
            ("admin_user_created", "admin_token"),
        ]
        updated = next(e for e in events if e["event"] == "admin_user_updated")
        assert (updated["request_id"], updated["reason"]) == ("req-42", "is_active")
        assert any(e["event"] == "deactivated" for e in events)
        # The trail outlives the account, and names no secret.
        rows = repr(events)
        assert ADMIN_TOKEN not in rows
        assert PASSWORD not in rows
        assert token not in rows
