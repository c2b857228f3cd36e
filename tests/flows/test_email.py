"""Password reset and email verification through HTTP (interface.md §4, contract §3-4).

Delivery is exercised three ways: the `outbox` sender function (async), a plain function
(run in a worker thread), and real SMTP into the loopback `smtp_sink`. Mail goes out in the
background; leaving `make_client(...)` runs the lifespan shutdown, which drains background
work, so "nothing was sent" is asserted after that, deterministically.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from email.message import EmailMessage
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from authgate import create_app
from tests.helpers import (
    OTHER_PASSWORD,
    PASSWORD,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    SmtpSink,
    assert_error,
    bearer,
    fresh_session,
    login,
    login_status,
    make_config,
    post_json,
    post_with_cookies,
    register,
    running,
    user_id,
)

ANN = "ann@example.com"
NEW_PASSWORD = "a brand new passphrase"
PUBLIC_URL = "https://app.example.test"
MAIL_FROM = "auth@example.test"


# --- helpers ----------------------------------------------------------------------------


class PlainOutbox:
    """A plain (non-async) sender function: records (email, token) and the calling thread."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.threads: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, email: str, token: str) -> None:
        with self._lock:
            self.threads.append(threading.get_ident())
            self.sent.append((email, token))

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, str]]:
        for _ in range(int(timeout / 0.01)):
            with self._lock:
                if len(self.sent) >= count:
                    return list(self.sent)
            await asyncio.sleep(0.01)
        raise AssertionError(f"expected {count} sends, got {len(self.sent)}")


async def request_reset(client: httpx.AsyncClient, email: str = ANN) -> httpx.Response:
    response = await client.post("/auth/password-reset", json={"email": email})
    assert response.status_code == 200, response.text
    return response


async def confirm_reset(
    client: httpx.AsyncClient, token: str, new_password: str = NEW_PASSWORD
) -> httpx.Response:
    return await client.post(
        "/auth/password-reset/confirm", json={"token": token, "new_password": new_password}
    )


async def confirm_verification(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post("/auth/email-verification/confirm", json={"token": token})


async def bearer_session(
    client: httpx.AsyncClient, email: str = ANN, password: str = PASSWORD
) -> dict[str, Any]:
    """Log in and keep only the tokens: later requests carry them explicitly."""
    tokens = await login(client, email, password)
    client.cookies.clear()
    return tokens


def assert_message(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body.get("message"), str)
    assert body["message"]


def links_in(msg: EmailMessage) -> tuple[str, str]:
    """The link of the text/plain part and the link of the text/html part."""
    plain = msg.get_body(preferencelist=("plain",))
    html = msg.get_body(preferencelist=("html",))
    assert plain is not None
    assert html is not None
    assert isinstance(plain, EmailMessage)
    assert isinstance(html, EmailMessage)
    text_links = re.findall(r"https?://\S+", plain.get_content())
    html_links = re.findall(r'href="([^"]+)"', html.get_content())
    assert len(text_links) == 1, text_links
    assert len(html_links) == 1, html_links
    # The HTML attribute is escaped: `&` becomes `&amp;`.
    return text_links[0], html_links[0].replace("&amp;", "&")


def token_of(link: str) -> str:
    parts = urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}" == PUBLIC_URL
    assert parts.path.startswith("/")
    tokens = parse_qs(parts.query)["token"]
    assert len(tokens) == 1
    return tokens[0]


def check_mail(msg: EmailMessage, to: str) -> str:
    """Headers, the two parts, and the one token both links carry."""
    assert msg["From"] == MAIL_FROM
    assert msg["To"] == to
    assert msg["Subject"]
    assert msg.is_multipart()
    types = {part.get_content_type() for part in msg.walk() if not part.is_multipart()}
    assert {"text/plain", "text/html"} <= types
    text_link, html_link = links_in(msg)
    token = token_of(text_link)
    assert token_of(html_link) == token
    return token


# --- password reset: configuration --------------------------------------------------------


async def test_reset_without_sender_is_501(client: httpx.AsyncClient) -> None:
    await register(client)
    response = await client.post("/auth/password-reset", json={"email": ANN})
    assert_error(response, 501, "not_configured")
    unknown = await client.post("/auth/password-reset", json={"email": "nobody@example.com"})
    assert_error(unknown, 501, "not_configured")


# --- password reset: request --------------------------------------------------------------


async def test_reset_request_same_answer_only_known_email_gets_mail(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        unknown = await request_reset(client, "nobody@example.com")
        known = await request_reset(client, ANN)
        assert unknown.status_code == known.status_code == 200
        assert unknown.content == known.content
        assert isinstance(known.json()["message"], str)
        sent = await outbox.wait_for(1)
        assert sent[0][0] == ANN
    # The lifespan drained background work: the unknown email's task has finished too.
    assert len(outbox.sent) == 1
    assert outbox.sent[0][0] == ANN


async def test_reset_request_matches_email_without_regard_to_case(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client, "Ann.Lee@Example.com")
        await request_reset(client, "ann.lee@EXAMPLE.com")
        sent = await outbox.wait_for(1)
        assert sent[0][0] == "Ann.Lee@example.com"
        assert_message(await confirm_reset(client, sent[0][1]))
        assert await login_status(client, NEW_PASSWORD, "ann.lee@example.com") == 200


async def test_plain_sender_function_runs_in_a_thread(make_client: AppFactory) -> None:
    plain = PlainOutbox()
    async with make_client(password_reset_send_fn=plain, email_verify_send_fn=plain) as client:
        await register(client)
        await request_reset(client)
        (email, token), *_ = await plain.wait_for(1)
        assert email == ANN
        assert plain.threads[0] != threading.get_ident()  # not on the event loop's thread
        assert_message(await confirm_reset(client, token))
        assert await login_status(client, NEW_PASSWORD) == 200

        tokens = await bearer_session(client, ANN, NEW_PASSWORD)
        response = await client.post(
            "/auth/email-verification", headers=bearer(tokens["access_token"])
        )
        assert_message(response)
        sent = await plain.wait_for(2)
        assert sent[1][0] == ANN
        assert_message(await confirm_verification(client, sent[1][1]))


async def test_reset_for_deactivated_user_sends_nothing(
    backend: Backend, clock: FakeClock, outbox: Outbox
) -> None:
    app = create_app(make_config(backend, password_reset_send_fn=outbox), clock=clock)
    async with running(app) as client:
        await register(client)
        await register(client, "bob@example.com")
        await app.state.authgate.accounts.set_active(ANN, False)
        off = await request_reset(client, ANN)
        on = await request_reset(client, "bob@example.com")
        assert off.content == on.content
        await outbox.wait_for(1)
    assert outbox.sent[0][0] == "bob@example.com"
    assert len(outbox.sent) == 1


# --- password reset: confirm --------------------------------------------------------------


async def test_reset_confirm_changes_password_and_spends_token(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        await request_reset(client)
        (_, token), *_ = await outbox.wait_for(1)
        assert_message(await confirm_reset(client, token))
        assert await login_status(client, NEW_PASSWORD) == 200
        assert await login_status(client, PASSWORD) == 401
        # Spent: a second confirm fails, even with another password.
        assert_error(await confirm_reset(client, token), 400, "invalid_token")
        assert_error(
            await confirm_reset(client, token, "yet another password"), 400, "invalid_token"
        )
        assert await login_status(client, NEW_PASSWORD) == 200


async def test_reset_confirm_kills_other_reset_tokens(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        await request_reset(client)
        await request_reset(client)
        sent = await outbox.wait_for(2)
        (_, first), (_, second) = sent[:2]
        assert first != second
        assert_message(await confirm_reset(client, second))
        assert_error(
            await confirm_reset(client, first, "yet another password"), 400, "invalid_token"
        )
        assert await login_status(client, NEW_PASSWORD) == 200
        assert await login_status(client, "yet another password") == 401


async def test_reset_tokens_belong_to_their_user(make_client: AppFactory, outbox: Outbox) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        await register(client, "bob@example.com")
        await request_reset(client, ANN)
        await request_reset(client, "bob@example.com")
        sent = dict(await outbox.wait_for(2))
        assert_message(await confirm_reset(client, sent["bob@example.com"]))
        # Bob's reset touches neither Ann's password nor Ann's outstanding token.
        assert await login_status(client, PASSWORD, ANN) == 200
        assert await login_status(client, NEW_PASSWORD, "bob@example.com") == 200
        assert_message(await confirm_reset(client, sent[ANN], "anns new password"))
        assert await login_status(client, "anns new password", ANN) == 200


async def test_reset_confirm_revokes_every_session(make_client: AppFactory, outbox: Outbox) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        await register(client, "bob@example.com")
        sessions = [await bearer_session(client), await bearer_session(client)]
        bob = await bearer_session(client, "bob@example.com")
        for tokens in sessions:
            me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
            assert me.status_code == 200
        await request_reset(client)
        (_, token), *_ = await outbox.wait_for(1)
        assert_message(await confirm_reset(client, token))
        for tokens in sessions:
            me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
            assert me.status_code == 401
            refreshed = await client.post(
                "/auth/refresh", json={"refresh_token": tokens["refresh_token"]}
            )
            assert refreshed.status_code == 401
        # Another user's session is untouched.
        me = await client.get("/auth/me", headers=bearer(bob["access_token"]))
        assert me.status_code == 200
        # A new login works and gives a working session.
        fresh = await bearer_session(client, ANN, NEW_PASSWORD)
        me = await client.get("/auth/me", headers=bearer(fresh["access_token"]))
        assert me.status_code == 200


@pytest.mark.parametrize(
    "token",
    ["not-a-token", "x" * 43, "A" * 512],
)
async def test_reset_confirm_invalid_token_is_400(
    make_client: AppFactory, outbox: Outbox, token: str
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        assert_error(await confirm_reset(client, token), 400, "invalid_token")
        assert await login_status(client, PASSWORD) == 200


async def test_verification_token_is_not_a_reset_token(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(password_reset_send_fn=outbox, email_verify_send_fn=outbox) as client:
        await register(client)
        tokens = await bearer_session(client)
        response = await client.post(
            "/auth/email-verification", headers=bearer(tokens["access_token"])
        )
        assert_message(response)
        (_, verify_token), *_ = await outbox.wait_for(1)
        assert_error(await confirm_reset(client, verify_token), 400, "invalid_token")
        assert await login_status(client, PASSWORD) == 200
        # ...and a reset token is not a verification token.
        await request_reset(client)
        sent = await outbox.wait_for(2)
        reset_token = sent[1][1]
        assert_error(await confirm_verification(client, reset_token), 400, "invalid_token")
        # Both still work for what they are.
        assert_message(await confirm_verification(client, verify_token))
        assert_message(await confirm_reset(client, reset_token))


async def test_reset_token_expires(
    make_client: AppFactory, outbox: Outbox, clock: FakeClock
) -> None:
    async with make_client(password_reset_send_fn=outbox, reset_ttl=60) as client:
        await register(client)
        await request_reset(client)
        (_, early), *_ = await outbox.wait_for(1)
        clock.advance(59)
        # Still valid just before the TTL...
        assert_message(await confirm_reset(client, early))
        await request_reset(client)
        (_, token) = (await outbox.wait_for(2))[1]
        clock.advance(61)
        # ...and refused past it.
        assert_error(
            await confirm_reset(client, token, "yet another password"), 400, "invalid_token"
        )
        assert await login_status(client, NEW_PASSWORD) == 200
        assert await login_status(client, "yet another password") == 401


@pytest.mark.parametrize(
    "bad_password",
    ["short", "1234567", "a" * 73, "é" * 37],  # the last: 37 characters, 74 bytes
)
async def test_reset_confirm_bad_password_is_422_and_keeps_token(
    make_client: AppFactory, outbox: Outbox, bad_password: str
) -> None:
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client)
        await request_reset(client)
        (_, token), *_ = await outbox.wait_for(1)
        response = await confirm_reset(client, token, bad_password)
        assert response.status_code == 422, response.text
        assert isinstance(response.json()["detail"], list)
        assert bad_password not in response.text
        # Nothing changed and the token was not spent.
        assert await login_status(client, PASSWORD) == 200
        assert_message(await confirm_reset(client, token, "é" * 36))  # exactly 72 bytes
        assert await login_status(client, "é" * 36) == 200
        assert await login_status(client, PASSWORD) == 401


# --- email verification -------------------------------------------------------------------


async def test_email_verification_by_cookie_needs_csrf(client: httpx.AsyncClient) -> None:
    await register(client)
    a, a_csrf = await fresh_session(client)
    _, b_csrf = await fresh_session(client)
    access = a["access_token"]

    for cookies, headers in [
        ({"svc_access_token": access, "svc_csrf_token": a_csrf}, {}),
        ({"svc_access_token": access}, {}),
        ({"svc_access_token": access, "svc_csrf_token": a_csrf}, {"X-CSRF-Token": "wrong"}),
        ({"svc_access_token": access, "svc_csrf_token": "other"}, {"X-CSRF-Token": a_csrf}),
        ({"svc_access_token": access, "svc_csrf_token": b_csrf}, {"X-CSRF-Token": b_csrf}),
    ]:
        response = await post_with_cookies(client, "/auth/email-verification", cookies, headers)
        assert_error(response, 403, "csrf_failed")

    # With the right value the request gets through; no sender is configured, hence 501.
    response = await post_with_cookies(
        client,
        "/auth/email-verification",
        {"svc_access_token": access, "svc_csrf_token": a_csrf},
        {"X-CSRF-Token": a_csrf},
    )
    assert_error(response, 501, "not_configured")

    # A bearer header needs no CSRF value.
    client.cookies.clear()
    response = await client.post("/auth/email-verification", headers=bearer(access))
    assert_error(response, 501, "not_configured")

    # No credentials at all: 401, not 403.
    client.cookies.clear()
    assert_error(await client.post("/auth/email-verification"), 401, "not_authenticated")


async def test_verification_request_needs_authentication(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(email_verify_send_fn=outbox) as client:
        await register(client)
        response = await client.post("/auth/email-verification")
        assert_error(response, 401, "not_authenticated")
        response = await client.post("/auth/email-verification", headers=bearer("garbage"))
        assert response.status_code == 401
    assert outbox.sent == []


async def test_verification_flow(make_client: AppFactory, outbox: Outbox) -> None:
    async with make_client(email_verify_send_fn=outbox) as client:
        await register(client)
        tokens = await bearer_session(client)
        auth = bearer(tokens["access_token"])
        assert_message(await client.post("/auth/email-verification", headers=auth))
        (email, token), *_ = await outbox.wait_for(1)
        assert email == ANN
        assert (await client.get("/auth/me", headers=auth)).json()["email_verified"] is False
        assert_message(await confirm_verification(client, token))
        me = await client.get("/auth/me", headers=auth)
        assert me.status_code == 200
        assert me.json()["email_verified"] is True
        # Spent.
        assert_error(await confirm_verification(client, token), 400, "invalid_token")
        # Already verified: 200 and no mail.
        again = await client.post("/auth/email-verification", headers=auth)
        assert_message(again)
    assert len(outbox.sent) == 1


async def test_verification_with_cookie_needs_csrf(make_client: AppFactory, outbox: Outbox) -> None:
    async with make_client(email_verify_send_fn=outbox) as client:
        await register(client)
        await login(client)  # cookies in the jar
        response = await client.post("/auth/email-verification")
        assert_error(response, 403, "csrf_failed")
        csrf = client.cookies["svc_csrf_token"]
        response = await client.post("/auth/email-verification", headers={"X-CSRF-Token": csrf})
        assert_message(response)
        await outbox.wait_for(1)
    assert len(outbox.sent) == 1


async def test_verification_confirm_kills_other_verification_tokens(
    make_client: AppFactory, outbox: Outbox
) -> None:
    async with make_client(email_verify_send_fn=outbox) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        assert_message(await client.post("/auth/email-verification", headers=auth))
        assert_message(await client.post("/auth/email-verification", headers=auth))
        (_, first), (_, second) = (await outbox.wait_for(2))[:2]
        assert first != second
        assert_message(await confirm_verification(client, second))
        # Once verified, the other outstanding token is dead too.
        assert_error(await confirm_verification(client, first), 400, "invalid_token")
        assert (await client.get("/auth/me", headers=auth)).json()["email_verified"] is True


@pytest.mark.parametrize("token", ["not-a-token", "x" * 43])
async def test_verification_invalid_token_is_400(
    make_client: AppFactory, outbox: Outbox, token: str
) -> None:
    async with make_client(email_verify_send_fn=outbox) as client:
        await register(client)
        assert_error(await confirm_verification(client, token), 400, "invalid_token")


async def test_verification_token_expires(
    make_client: AppFactory, outbox: Outbox, clock: FakeClock
) -> None:
    async with make_client(email_verify_send_fn=outbox, verify_ttl=60) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        assert_message(await client.post("/auth/email-verification", headers=auth))
        (_, token), *_ = await outbox.wait_for(1)
        clock.advance(61)
        assert_error(await confirm_verification(client, token), 400, "invalid_token")
        assert (await client.get("/auth/me", headers=auth)).json()["email_verified"] is False


# --- real SMTP ----------------------------------------------------------------------------


def smtp_settings(sink: SmtpSink) -> dict[str, Any]:
    return {"smtp_url": sink.url, "public_url": PUBLIC_URL, "mail_from": MAIL_FROM}


async def test_reset_mail_over_smtp(make_client: AppFactory, smtp_sink: SmtpSink) -> None:
    async with make_client(**smtp_settings(smtp_sink)) as client:
        await register(client)
        unknown = await request_reset(client, "nobody@example.com")
        known = await request_reset(client, ANN)
        assert unknown.content == known.content
        msg = (await smtp_sink.wait_for(1))[0]
        token = check_mail(msg, ANN)
        assert_message(await confirm_reset(client, token))
        assert await login_status(client, NEW_PASSWORD) == 200
    assert len(smtp_sink.messages) == 1


async def test_verification_mail_over_smtp(make_client: AppFactory, smtp_sink: SmtpSink) -> None:
    async with make_client(**smtp_settings(smtp_sink)) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        assert_message(await client.post("/auth/email-verification", headers=auth))
        msg = (await smtp_sink.wait_for(1))[0]
        token = check_mail(msg, ANN)
        assert_message(await confirm_verification(client, token))
        assert (await client.get("/auth/me", headers=auth)).json()["email_verified"] is True


async def test_reset_and_verification_mails_differ(
    make_client: AppFactory, smtp_sink: SmtpSink
) -> None:
    async with make_client(**smtp_settings(smtp_sink)) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        await request_reset(client)
        await smtp_sink.wait_for(1)
        assert_message(await client.post("/auth/email-verification", headers=auth))
        reset, verify = (await smtp_sink.wait_for(2))[:2]
        assert reset["Subject"] != verify["Subject"]
        reset_link, _ = links_in(reset)
        verify_link, _ = links_in(verify)
        assert urlsplit(reset_link).path != urlsplit(verify_link).path


async def test_sender_function_wins_over_smtp(
    make_client: AppFactory, smtp_sink: SmtpSink, outbox: Outbox
) -> None:
    async with make_client(
        **smtp_settings(smtp_sink), password_reset_send_fn=outbox, email_verify_send_fn=outbox
    ) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        await request_reset(client)
        assert_message(await client.post("/auth/email-verification", headers=auth))
        sent = await outbox.wait_for(2)
        assert [email for email, _ in sent] == [ANN, ANN]
    assert smtp_sink.messages == []


async def test_each_purpose_picks_its_own_sender(
    make_client: AppFactory, smtp_sink: SmtpSink, outbox: Outbox
) -> None:
    """A reset function and SMTP: resets go to the function, verification mail over SMTP."""
    async with make_client(**smtp_settings(smtp_sink), password_reset_send_fn=outbox) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        await request_reset(client)
        await outbox.wait_for(1)
        assert_message(await client.post("/auth/email-verification", headers=auth))
        msg = (await smtp_sink.wait_for(1))[0]
        assert_message(await confirm_verification(client, check_mail(msg, ANN)))
    assert len(outbox.sent) == 1
    assert len(smtp_sink.messages) == 1


# --- no secret in the logs ------------------------------------------------------------------


def assert_not_logged(records: list[logging.LogRecord], secrets: list[str]) -> None:
    for record in records:
        texts = [record.getMessage()]
        fields = getattr(record, "authgate", None)
        if fields is not None:
            assert isinstance(fields, dict)
            texts.extend(f"{key}={value}" for key, value in fields.items())
        if record.exc_text:
            texts.append(record.exc_text)
        for text in texts:
            for secret in secrets:
                assert secret not in text, (record.name, text)


async def test_tokens_and_passwords_never_logged(
    make_client: AppFactory, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with make_client(password_reset_send_fn=outbox, email_verify_send_fn=outbox) as client:
        await register(client)
        auth = bearer((await bearer_session(client))["access_token"])
        await request_reset(client, "nobody@example.com")
        await request_reset(client)
        (_, reset_token), *_ = await outbox.wait_for(1)
        assert (await confirm_reset(client, reset_token, "tiny-pw")).status_code == 422
        assert_message(await confirm_reset(client, reset_token))
        assert_error(await confirm_reset(client, reset_token), 400, "invalid_token")
        fresh = await bearer_session(client, ANN, NEW_PASSWORD)
        auth = bearer(fresh["access_token"])
        assert_message(await client.post("/auth/email-verification", headers=auth))
        (_, verify_token) = (await outbox.wait_for(2))[1]
        assert_message(await confirm_verification(client, verify_token))
        assert_error(await confirm_verification(client, verify_token), 400, "invalid_token")
    events = {
        record.authgate["event"]  # type: ignore[attr-defined]
        for record in caplog.records
        if isinstance(getattr(record, "authgate", None), dict)
    }
    # The flow was logged (so the check below is not vacuous)...
    assert {
        "password_reset_requested",
        "password_reset_completed",
        "verification_requested",
        "verification_completed",
    } <= events
    # ...and no secret of it was.
    assert_not_logged(
        caplog.records,
        [reset_token, verify_token, NEW_PASSWORD, PASSWORD, "tiny-pw", fresh["refresh_token"]],
    )


async def test_tokens_never_logged_over_smtp(
    make_client: AppFactory, smtp_sink: SmtpSink, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with make_client(**smtp_settings(smtp_sink)) as client:
        await register(client)
        await request_reset(client)
        token = check_mail((await smtp_sink.wait_for(1))[0], ANN)
        assert_message(await confirm_reset(client, token))
    # The sink (aiosmtpd, logger "mail.log") is the test's mail server, not authgate.
    records = [r for r in caplog.records if not r.name.startswith("mail.log")]
    assert_not_logged(records, [token, NEW_PASSWORD, PASSWORD])


# --- new passwords: the rules on the reset path ------------------------------------------


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


# --- reset mail goes to the account of that address, and nowhere else --------------------


async def test_sharp_s_and_ss_domains_are_two_accounts_and_reset_mail_stays_apart(
    make_client: AppFactory, outbox: Outbox
) -> None:
    squatter, owner = "victim@straße.de", "victim@strasse.de"
    async with make_client(password_reset_send_fn=outbox) as client:
        await register(client, squatter, OTHER_PASSWORD)  # first, as the squatter would
        await register(client, owner)  # the owner can still register
        assert await user_id(client, owner) != await user_id(client, squatter, OTHER_PASSWORD)
        # Each address logs into its own account only.
        response = await post_json(
            client, "/auth/login", {"email": owner, "password": OTHER_PASSWORD}
        )
        assert response.status_code == 401
        response = await post_json(client, "/auth/login", {"email": squatter, "password": PASSWORD})
        assert response.status_code == 401
        # The IDNA (ASCII) spelling of a domain is the same domain.
        await login(client, "victim@xn--strae-oqa.de", OTHER_PASSWORD)
        await login(client, "VICTIM@STRASSE.DE")

        assert (
            await post_json(client, "/auth/password-reset", {"email": owner})
        ).status_code == 200
        (sent,) = await outbox.wait_for(1)
        assert sent[0] == owner
        response = await post_json(client, "/auth/password-reset", {"email": squatter})
        assert response.status_code == 200
        sent = (await outbox.wait_for(2))[1]
        assert sent[0] == squatter
        # The owner's reset changes the owner's password and nobody else's.
        new_password = "the owner's new passphrase"
        response = await post_json(
            client,
            "/auth/password-reset/confirm",
            {"token": outbox.sent[0][1], "new_password": new_password},
        )
        assert response.status_code == 200, response.text
        await login(client, owner, new_password)
        await login(client, squatter, OTHER_PASSWORD)


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
