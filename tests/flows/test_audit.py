"""The audit log through HTTP, on both backends: every event a flow emits is stored as one row
with the same fields (register, login ok and failed, refresh, reuse, logout, reset request and
confirm, verification, session revoke, password change, email change, deletion), no column of
any row holds a secret (the checks of tests/properties/test_events.py), the rows of a deleted
account stay, shutdown writes what was buffered, a full buffer drops the oldest and counts
them, a failed INSERT keeps its rows for the next flush, and `AUTHGATE_AUDIT_RETENTION_DAYS=0`
writes nothing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from authgate import AuthGate, create_app
from authgate.services.audit import AuditWriter
from authgate.store.audit import AuditRow, AuditStore
from authgate.store.db import Database, upgrade_schema
from authgate.store.models import AuditEvent, User
from tests.helpers import (
    PASSWORD,
    Backend,
    FakeClock,
    Outbox,
    bearer,
    empty_backend,
    make_config,
    running,
)
from tests.properties.test_events import secret_forms

EMAIL = "ann@example.com"
WRONG_PASSWORD = "not the right one"
NEW_PASSWORD = "a brand new passphrase"
FIELDS = ("event", "outcome", "user_id", "session_id", "reason", "factor", "actor", "request_id")


async def rows_of(db: Database, **kw: Any) -> list[AuditRow]:
    """Every stored event (or those of `kw`'s filters), oldest first."""
    args: dict[str, Any] = {"user_id": None, "event": None, "since": None, "before_id": None}
    args.update(kw)
    async with db.read() as s:
        return list(reversed(await AuditStore(s).page(**args, limit=10_000)))


async def flushed(gate: AuthGate) -> list[AuditRow]:
    assert gate.audit is not None
    await gate.audit.flush()
    return await rows_of(gate.services.db)


async def test_every_event_of_every_flow_is_a_row_without_a_secret(
    backend: Backend, clock: FakeClock, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    secrets: list[str] = [PASSWORD, WRONG_PASSWORD, NEW_PASSWORD]
    config = make_config(
        backend,
        password_reset_send_fn=outbox,
        email_verify_send_fn=outbox,
        email_change_send_fn=outbox,
    )
    app = create_app(config, clock=clock)
    gate: AuthGate = app.state.authgate
    async with running(app) as client:

        async def step(expected: str, response: Any, status: int) -> None:
            assert response.status_code == status, response.text
            client.cookies.clear()
            await gate.services.background.drain()  # mail-sending steps emit after the answer
            assert expected in [r.event for r in await flushed(gate)]

        def keep(tokens: dict[str, Any]) -> dict[str, Any]:
            secrets.extend([tokens["access_token"], tokens["refresh_token"]])
            return tokens

        ann = {"email": EMAIL, "password": PASSWORD}
        headers = {"X-Request-ID": "req-register", "User-Agent": "audit-test/1"}
        await step(
            "registered", await client.post("/auth/register", json=ann, headers=headers), 201
        )
        r = await client.post("/auth/login", json=ann)
        first = keep(r.json())
        await step("login_succeeded", r, 200)
        bad = {"email": EMAIL, "password": WRONG_PASSWORD}
        await step("login_failed", await client.post("/auth/login", json=bad), 401)
        nobody = {"email": "nobody@example.com", "password": WRONG_PASSWORD}
        await step("login_failed", await client.post("/auth/login", json=nobody), 401)
        r = await client.post("/auth/refresh", json={"refresh_token": first["refresh_token"]})
        keep(r.json())
        await step("refreshed", r, 200)
        r = await client.post("/auth/refresh", json={"refresh_token": first["refresh_token"]})
        await step("refresh_reused", r, 401)
        third = keep((await client.post("/auth/login", json=ann)).json())
        r = await client.post("/auth/logout", json={"refresh_token": third["refresh_token"]})
        await step("logged_out", r, 200)
        r = await client.post("/auth/password-reset", json={"email": EMAIL})
        await step("password_reset_requested", r, 200)
        [(_, reset_token)] = await outbox.wait_for(1)
        secrets.append(reset_token)
        r = await client.post(
            "/auth/password-reset/confirm",
            json={"token": reset_token, "new_password": NEW_PASSWORD},
        )
        await step("password_reset_completed", r, 200)
        mine = keep(
            (await client.post("/auth/login", json={**ann, "password": NEW_PASSWORD})).json()
        )
        auth = bearer(mine["access_token"])
        await step(
            "verification_requested",
            await client.post("/auth/email-verification", headers=auth),
            200,
        )
        verify_token = (await outbox.wait_for(2))[1][1]
        secrets.append(verify_token)
        r = await client.post("/auth/email-verification/confirm", json={"token": verify_token})
        await step("verification_completed", r, 200)
        other = keep(
            (await client.post("/auth/login", json={**ann, "password": NEW_PASSWORD})).json()
        )
        r = await client.get("/auth/sessions", headers=auth)
        [other_sid] = [s["id"] for s in r.json()["sessions"] if not s.get("current")]
        await step(
            "session_revoked", await client.delete(f"/auth/sessions/{other_sid}", headers=auth), 204
        )
        assert other["refresh_token"]
        change = {"current_password": NEW_PASSWORD, "new_password": PASSWORD}
        await step(
            "password_changed",
            await client.post("/auth/password-change", json=change, headers=auth),
            200,
        )
        move = {"new_email": "moved@example.com", "password": PASSWORD}
        await step(
            "email_change_requested",
            await client.post("/auth/email-change", json=move, headers=auth),
            202,
        )
        change_token = (await outbox.wait_for(3))[2][1]
        secrets.append(change_token)
        r = await client.post("/auth/email-change/confirm", json={"token": change_token})
        await step("email_change_completed", r, 200)
        async with gate.services.db.read() as s:
            secrets += list((await s.execute(select(User.password_hash))).scalars())
        r = await client.request("DELETE", "/auth/me", json={"password": PASSWORD}, headers=auth)
        await step("account_deleted", r, 204)
        rows = await flushed(gate)
        # The account is gone; its trail is not (read while the app's database is open).
        trail = [r.event for r in await rows_of(gate.services.db, user_id=rows[0].user_id)]

    records = [r.authgate for r in caplog.records if r.name == "authgate.events"]  # type: ignore[attr-defined]
    # Every event emitted is one row, in order, with the record's own fields.
    assert len(rows) == len(records) >= 19
    for row, record in zip(rows, records, strict=True):
        for name in FIELDS:
            assert getattr(row, name) == record.get(name), (name, row, record)
        assert row.client_ip == "127.0.0.1"
        assert row.time == clock()
    register_row = rows[0]
    assert register_row.request_id == "req-register"
    assert register_row.user_agent == "audit-test/1"
    user_id = register_row.user_id
    assert user_id is not None
    assert trail[-1] == "account_deleted"
    failed = [r for r in rows if r.event == "login_failed"]
    assert [(r.user_id, r.outcome) for r in failed] == [(user_id, "failure"), (None, "failure")]
    assert all(r.reason for r in failed)
    # No column of any row holds a secret, in any of the forms a digest could take.
    assert len(secrets) >= 15
    for row in rows:
        text = repr(row)
        for secret in secrets:
            for form in secret_forms(secret):
                assert form not in text, (row.event, form[:4])


async def test_shutdown_writes_what_was_buffered(backend: Backend, clock: FakeClock) -> None:
    config = make_config(backend)
    app = create_app(config, clock=clock)
    gate: AuthGate = app.state.authgate
    assert gate.audit is not None
    gate.audit.interval = 3600  # no timed flush: only the shutdown can write these
    async with running(app) as client:
        r = await client.post("/auth/register", json={"email": EMAIL, "password": PASSWORD})
        assert r.status_code == 201
        await client.post("/auth/login", json={"email": EMAIL, "password": WRONG_PASSWORD})
    db = Database(config)
    try:
        assert [r.event for r in await rows_of(db)] == ["registered", "login_failed"]
    finally:
        await db.dispose()


async def test_a_full_buffer_drops_the_oldest_and_counts_them(
    backend: Backend, clock: FakeClock
) -> None:
    config = make_config(backend)
    app = create_app(config, clock=clock)
    async with running(app):
        db = app.state.authgate.services.db
        writer = AuditWriter(db, clock, capacity=3, batch=2)
        for user_id in range(5):  # no await in between: the buffer only fills
            writer({"event": "refreshed", "outcome": "success", "user_id": user_id})
        assert writer.pending == 3
        assert writer.dropped == 2
        assert await writer.flush() == 3
        await writer.close()
        assert [r.user_id for r in await rows_of(db)] == [2, 3, 4]


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
async def test_a_failed_write_keeps_the_rows_for_the_next_flush(
    name: str, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with empty_backend(name, tmp_path / "data") as backend:
        db = Database(make_config(backend))
        try:
            writer = AuditWriter(db, clock, capacity=10)
            for user_id in range(3):
                writer({"event": "login_failed", "outcome": "failure", "user_id": user_id})
            # No table yet: the INSERT fails, the rows stay, the warning names no value.
            assert await writer.flush() == 0
            assert writer.pending == 3
            assert writer.dropped == 0
            [warning] = [r for r in caplog.records if "audit log" in r.getMessage()]
            assert "writing failed" in warning.getMessage()
            assert "login_failed" not in warning.getMessage()
            await upgrade_schema(db)
            assert await writer.flush() == 3
            await writer.close()
            assert [r.user_id for r in await rows_of(db)] == [0, 1, 2]
        finally:
            await db.dispose()


async def test_retention_zero_writes_no_row(backend: Backend, clock: FakeClock) -> None:
    config = make_config(backend, audit_retention_days=0)
    app = create_app(config, clock=clock)
    gate: AuthGate = app.state.authgate
    assert gate.audit is None
    assert not any(isinstance(sink, AuditWriter) for sink in gate.event_sinks)
    async with running(app) as client:
        r = await client.post("/auth/register", json={"email": EMAIL, "password": PASSWORD})
        assert r.status_code == 201
        async with gate.services.db.read() as s:
            assert await s.scalar(select(func.count()).select_from(AuditEvent)) == 0
