"""Security events (contract §4 Events): one structured record per step on the
`authgate.events` logger, with the request's id and client address, and no secret in any
record of any logger. On both backends."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from typing import Any

import pytest
from sqlalchemy import select

from authgate import create_app
from authgate.events import EVENT_NAMES, JsonFormatter, emit
from authgate.store.db import Database
from authgate.store.models import User
from tests.helpers import PASSWORD, Backend, FakeClock, Outbox, bearer, make_config, running

EMAIL = "ann@example.com"
WRONG_PASSWORD = "not the right one"
NEW_PASSWORD = "a brand new passphrase"
CLIENT_IP = "127.0.0.1"


def secret_forms(secret: str) -> list[str]:
    """The secret and the ways its SHA-256 digest could be written down."""
    raw = hashlib.sha256(secret.encode()).digest()
    forms = [
        secret,
        raw.hex(),
        repr(raw),
        str(raw),
        raw.hex().upper(),
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
    ]
    # The token is also JSON-quoted in some logs; its middle third catches truncations.
    if len(secret) >= 30:
        forms.append(secret[len(secret) // 3 : 2 * len(secret) // 3])
    return forms


def record_texts(record: logging.LogRecord) -> list[str]:
    texts = [record.getMessage(), repr(record.msg), repr(record.args)]
    fields = getattr(record, "authgate", None)
    if fields is not None:
        texts.append(json.dumps(fields, default=str))
        texts.append(repr(fields))
    texts.append(JsonFormatter().format(record))
    return texts


class Recorder:
    """Steps run one after another; each step's `authgate.events` records are checked."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        self.all: list[logging.LogRecord] = []

    def take(self) -> list[logging.LogRecord]:
        records = list(self.caplog.records)
        self.all.extend(records)
        self.caplog.clear()
        return records

    def events(self) -> list[logging.LogRecord]:
        return [r for r in self.take() if r.name == "authgate.events"]

    def expect(
        self,
        event: str,
        *,
        http: bool = True,
        request_id: str | None = None,
        also: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        records = self.events()
        names = [r.authgate["event"] for r in records]  # type: ignore[attr-defined]
        assert names.count(event) == 1, (event, names)
        assert set(names) - {event} <= also, (event, names)
        record = next(r for r in records if r.authgate["event"] == event)  # type: ignore[attr-defined]
        fields: dict[str, Any] = record.authgate  # type: ignore[attr-defined]
        assert record.getMessage() == event
        assert fields["event"] in EVENT_NAMES
        assert fields["outcome"] in ("success", "failure")
        expected_level = logging.INFO if fields["outcome"] == "success" else logging.WARNING
        assert record.levelno == expected_level
        for value in fields.values():
            assert value is None or isinstance(value, str | int | bool | float), fields
        if http:
            assert fields["client_ip"] == CLIENT_IP
            assert isinstance(fields["request_id"], str)
            assert fields["request_id"]
            if request_id is not None:
                assert fields["request_id"] == request_id
        else:
            assert "request_id" not in fields
        return fields


async def test_every_step_writes_one_event_and_no_secret(
    backend: Backend, clock: FakeClock, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rec = Recorder(caplog)
    secrets: list[str] = [PASSWORD, WRONG_PASSWORD, NEW_PASSWORD]
    config = make_config(backend, password_reset_send_fn=outbox, email_verify_send_fn=outbox)
    app = create_app(config, clock=clock)
    async with running(app) as client:
        rec.take()  # startup logs (migrations, the development-setup warning)

        def rid(n: int) -> dict[str, str]:
            return {"X-Request-ID": f"req-{n}"}

        # registered
        r = await client.post(
            "/auth/register", json={"email": EMAIL, "password": PASSWORD}, headers=rid(1)
        )
        assert r.status_code == 201
        user_id = r.json()["id"]
        fields = rec.expect("registered", request_id="req-1")
        assert fields["user_id"] == user_id

        # login_succeeded
        r = await client.post(
            "/auth/login", json={"email": EMAIL, "password": PASSWORD}, headers=rid(2)
        )
        assert r.status_code == 200
        first = r.json()
        secrets += [first["access_token"], first["refresh_token"]]
        secrets += [c.value for c in client.cookies.jar if c.name == "svc_csrf_token" and c.value]
        client.cookies.clear()
        fields = rec.expect("login_succeeded", request_id="req-2")
        assert fields["user_id"] == user_id
        assert fields["outcome"] == "success"
        first_session = fields["session_id"]

        # login_failed, wrong password and unknown email
        r = await client.post("/auth/login", json={"email": EMAIL, "password": WRONG_PASSWORD})
        assert r.status_code == 401
        fields = rec.expect("login_failed")
        assert fields["outcome"] == "failure"
        assert fields["user_id"] == user_id
        r = await client.post(
            "/auth/login", json={"email": "nobody@example.com", "password": WRONG_PASSWORD}
        )
        assert r.status_code == 401
        fields = rec.expect("login_failed")
        assert "user_id" not in fields

        # refreshed
        r = await client.post("/auth/refresh", json={"refresh_token": first["refresh_token"]})
        assert r.status_code == 200
        second = r.json()
        secrets += [second["access_token"], second["refresh_token"]]
        client.cookies.clear()
        fields = rec.expect("refreshed")
        assert fields["session_id"] == first_session
        assert fields["user_id"] == user_id

        # refresh_reused
        r = await client.post("/auth/refresh", json={"refresh_token": first["refresh_token"]})
        assert r.status_code == 401
        fields = rec.expect("refresh_reused")
        assert fields["outcome"] == "failure"
        assert fields["session_id"] == first_session

        # logged_out
        r = await client.post(
            "/auth/login", json={"email": EMAIL, "password": PASSWORD}, headers=rid(3)
        )
        third = r.json()
        secrets += [third["access_token"], third["refresh_token"]]
        client.cookies.clear()
        third_session = rec.expect("login_succeeded", request_id="req-3")["session_id"]
        r = await client.post(
            "/auth/logout", json={"refresh_token": third["refresh_token"]}, headers=rid(4)
        )
        assert r.status_code == 200
        fields = rec.expect("logged_out", request_id="req-4")
        assert fields["session_id"] == third_session

        # password_reset_requested (mailed in the background, after the answer)
        r = await client.post("/auth/password-reset", json={"email": EMAIL}, headers=rid(5))
        assert r.status_code == 200
        (_email, reset_token), *_ = await outbox.wait_for(1)
        secrets.append(reset_token)
        await app.state.authgate.services.background.drain()
        fields = rec.expect("password_reset_requested", request_id="req-5")
        assert fields["user_id"] == user_id

        # a session that the reset will revoke
        r = await client.post("/auth/login", json={"email": EMAIL, "password": PASSWORD})
        fourth = r.json()
        secrets += [fourth["access_token"], fourth["refresh_token"]]
        client.cookies.clear()
        rec.expect("login_succeeded")

        # password_reset_completed (and the sessions it ends)
        r = await client.post(
            "/auth/password-reset/confirm",
            json={"token": reset_token, "new_password": NEW_PASSWORD},
            headers=rid(6),
        )
        assert r.status_code == 200, r.text
        fields = rec.expect(
            "password_reset_completed", request_id="req-6", also=frozenset({"logged_out"})
        )
        assert fields["user_id"] == user_id

        # verification_requested, verification_completed
        r = await client.post("/auth/login", json={"email": EMAIL, "password": NEW_PASSWORD})
        fifth = r.json()
        secrets += [fifth["access_token"], fifth["refresh_token"]]
        client.cookies.clear()
        rec.expect("login_succeeded")
        r = await client.post(
            "/auth/email-verification", headers={**bearer(fifth["access_token"]), **rid(7)}
        )
        assert r.status_code == 200, r.text
        (_email, verify_token), *_ = (await outbox.wait_for(2))[1:]
        secrets.append(verify_token)
        await app.state.authgate.services.background.drain()
        fields = rec.expect("verification_requested", request_id="req-7")
        assert fields["user_id"] == user_id
        r = await client.post(
            "/auth/email-verification/confirm", json={"token": verify_token}, headers=rid(8)
        )
        assert r.status_code == 200, r.text
        fields = rec.expect("verification_completed", request_id="req-8")
        assert fields["user_id"] == user_id

        # deactivated: an operator's step, outside any request
        user = await app.state.authgate.accounts.set_active(EMAIL, False)
        assert user is not None
        assert user.is_active is False
        fields = rec.expect("deactivated", http=False)
        assert fields["user_id"] == user_id

        # Failures that carry secrets in the request write no secret either.
        r = await client.post("/auth/login", json={"email": EMAIL, "password": NEW_PASSWORD})
        assert r.status_code == 401
        rec.expect("login_failed")
        r = await client.post("/auth/refresh", json={"refresh_token": fifth["refresh_token"]})
        assert r.status_code == 401
        rec.events()
        r = await client.post(
            "/auth/password-reset/confirm", json={"token": reset_token, "new_password": "x" * 9}
        )
        assert r.status_code == 400
        r = await client.get("/auth/me", headers=bearer(fifth["access_token"]))
        assert r.status_code == 401
        rec.take()

    rec.take()
    # The stored password hashes are secrets too.
    db = Database(config)
    try:
        async with db.read() as s:
            secrets += list((await s.execute(select(User.password_hash))).scalars())
    finally:
        await db.dispose()
    assert rec.all, "nothing was logged at all"
    assert len(secrets) >= 15
    assert len(rec.all) > 20
    for record in rec.all:
        for text in record_texts(record):
            for secret in secrets:
                for form in secret_forms(secret):
                    assert form not in text, (record.name, record.getMessage()[:200])


async def test_events_formatted_as_json_lines(
    backend: Backend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="authgate.events")
    app = create_app(make_config(backend), clock=clock)
    async with running(app) as client:
        await client.post("/auth/register", json={"email": EMAIL, "password": PASSWORD})
        await client.post("/auth/login", json={"email": EMAIL, "password": WRONG_PASSWORD})
    records = [r for r in caplog.records if r.name == "authgate.events"]
    lines = [JsonFormatter().format(r) for r in records]
    assert [json.loads(line)["event"] for line in lines] == ["registered", "login_failed"]
    for line in lines:
        assert "\n" not in line
        assert PASSWORD not in line
        assert WRONG_PASSWORD not in line


async def test_user_agent_is_bounded_in_events(
    backend: Backend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    app = create_app(make_config(backend), clock=clock)
    async with running(app) as client:
        r = await client.post(
            "/auth/register",
            json={"email": EMAIL, "password": PASSWORD},
            headers={"User-Agent": "x" * 5000, "X-Request-ID": "bad id with spaces"},
        )
        assert r.status_code == 201
    (record,) = [r for r in caplog.records if r.name == "authgate.events"]
    fields = record.authgate  # type: ignore[attr-defined]
    assert len(fields["user_agent"]) <= 256
    # A request id that does not fit the pattern is replaced, not logged as given.
    assert fields["request_id"] != "bad id with spaces"
    assert r.headers["x-request-id"] == fields["request_id"]


def test_an_unknown_event_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event"):
        emit("loggedin")
