"""The mail copy (issue 12, item 5): every mail as text and HTML with the product name in its
subject, HTML autoescaped, no hole left by a missing name, a team's templates folder searched
first, no token in any notice; and real SMTP round trips into the loopback sink."""

from __future__ import annotations

import re
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args
from urllib.parse import parse_qs, urlsplit

import jinja2
import pytest

from authgate.config import AuthConfig, ConfigError
from authgate.mail.delivery import (
    CallableSender,
    NoticeKind,
    Notices,
    Purpose,
    SmtpSender,
    make_notices,
    make_senders,
)
from authgate.mail.render import MailName, check_templates, render

if TYPE_CHECKING:
    from tests.helpers import Outbox, SmtpSink

PRODUCT = "Acme Cloud"
PUBLIC_URL = "https://app.example.com"
MAIL_FROM = "accounts@example.com"
TOKEN = "tok_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"
HOSTILE = '"<script>alert(1)</script>"@example.com'

#: What each mail is given besides product_name and public_url (Mailer adds `email`).
CONTEXT: dict[str, dict[str, str]] = {
    "reset": {"link": f"{PUBLIC_URL}/reset-password?token={TOKEN}"},
    "verify": {"link": f"{PUBLIC_URL}/verify-email?token={TOKEN}"},
    "email_change": {"link": f"{PUBLIC_URL}/confirm-email-change?token={TOKEN}"},
    "password_changed": {"changed_at": "2025-03-04 05:06 UTC"},
    "email_change_requested": {"new_email": "new@example.com"},
    "factor_added": {"factor": "an authenticator app", "changed_at": "2025-03-04 05:06 UTC"},
    "factor_removed": {"factor": "a passkey", "changed_at": "2025-03-04 05:06 UTC"},
    "recovery_code_used": {"changed_at": "2025-03-04 05:06 UTC", "remaining": "9"},
}
NAMES: list[MailName] = [*get_args(Purpose), *get_args(NoticeKind)]


def full(name: str, **extra: str) -> dict[str, str]:
    return {
        "product_name": PRODUCT,
        "public_url": PUBLIC_URL,
        "email": "ann@example.com",
        **CONTEXT[name],
        **extra,
    }


def smtp_config(sink: SmtpSink, **overrides: Any) -> AuthConfig:
    return AuthConfig(
        smtp_url=sink.url,
        public_url=PUBLIC_URL,
        mail_from=MAIL_FROM,
        product_name=PRODUCT,
        **overrides,
    )


def parts(msg: EmailMessage) -> tuple[str, str]:
    """The text/plain and the text/html content of a received message."""
    assert msg.is_multipart()
    plain = msg.get_body(preferencelist=("plain",))
    html = msg.get_body(preferencelist=("html",))
    assert isinstance(plain, EmailMessage)
    assert isinstance(html, EmailMessage)
    return plain.get_content(), html.get_content()


# --- rendering ----------------------------------------------------------------------------


def test_every_mail_has_a_text_and_an_html_part() -> None:
    assert set(NAMES) == set(CONTEXT)
    for name in NAMES:
        mail = render(name, templates_dir=None, **full(name))
        assert PRODUCT in mail.subject, name
        assert "\n" not in mail.subject
        assert PRODUCT in mail.text, name
        assert mail.text.endswith(".\n"), name
        assert mail.html.startswith("<!doctype html>"), name
        assert '<html lang="en">' in mail.html
        assert f"<title>{mail.subject}</title>" in mail.html
        assert "<img" not in mail.html  # nothing fetched from anywhere when opened


def test_subjects_differ() -> None:
    subjects = {render(name, templates_dir=None, **full(name)).subject for name in NAMES}
    assert len(subjects) == len(NAMES)


@pytest.mark.parametrize("name", ["reset", "verify", "email_change"])
def test_token_mails_carry_their_link_once_in_each_part(name: MailName) -> None:
    mail = render(name, templates_dir=None, **full(name))
    link = CONTEXT[name]["link"]
    assert mail.text.count(link) == 1
    assert f"\n\n{link}\n\n" in mail.text
    assert mail.html.count(f'href="{link}"') == 1


def test_the_contexts_show_in_the_copy() -> None:
    change = render(
        "email_change", templates_dir=None, **full("email_change", email="new@example.com")
    )
    assert "new@example.com" in change.text
    assert "new@example.com" in change.html
    changed = render("password_changed", templates_dir=None, **full("password_changed"))
    assert "2025-03-04 05:06 UTC" in changed.text
    assert "2025-03-04 05:06 UTC" in changed.html
    assert PUBLIC_URL in changed.text
    assert f'href="{PUBLIC_URL}"' in changed.html
    requested = render(
        "email_change_requested", templates_dir=None, **full("email_change_requested")
    )
    assert "new@example.com" in requested.text
    assert "ann@example.com" in requested.text


def test_html_escapes_a_hostile_address() -> None:
    hostile_fields: list[tuple[MailName, str]] = [
        ("email_change_requested", "new_email"),
        ("email_change", "email"),
    ]
    for name, key in hostile_fields:
        mail = render(name, templates_dir=None, **full(name, **{key: HOSTILE}))
        assert "<script>" not in mail.html, name
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in mail.html, name
        assert HOSTILE in mail.text, name  # the text part is text: nothing to escape


def test_html_escapes_the_product_name_and_the_link() -> None:
    mail = render(
        "reset",
        templates_dir=None,
        **full("reset", product_name="A<b>&Co", link='https://x/?a=1&b="<x>'),
    )
    assert "A<b>&Co" in mail.subject
    assert "A&lt;b&gt;&amp;Co" in mail.html
    assert "<b>" not in mail.html
    assert 'href="https://x/?a=1&amp;b=&#34;&lt;x&gt;"' in mail.html


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_name_fails_the_render(name: MailName) -> None:
    for missing in CONTEXT[name]:
        context = full(name)
        del context[missing]
        with pytest.raises(jinja2.UndefinedError):
            render(name, templates_dir=None, **context)


# --- a team's templates -------------------------------------------------------------------


def test_a_templates_folder_wins_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "reset.txt").write_text(
        '{% set subject = "Password help for " ~ product_name %}\nOurs: {{ link }}\n'
    )
    (tmp_path / "reset.html").write_text("<p>Ours: <a href='{{ link }}'>{{ link }}</a></p>")
    check_templates(tmp_path)
    hostile_link = 'https://x/?token=abc&b="<x>'
    mail = render("reset", templates_dir=tmp_path, **full("reset", link=hostile_link))
    assert mail.subject == f"Password help for {PRODUCT}"
    assert mail.text == f"Ours: {hostile_link}\n"
    # The same autoescape in the team's HTML.
    assert mail.html == (
        "<p>Ours: <a href='https://x/?token=abc&amp;b=&#34;&lt;x&gt;'>"
        "https://x/?token=abc&amp;b=&#34;&lt;x&gt;</a></p>"
    )
    # A mail the folder lacks comes from authgate's templates.
    verify = render("verify", templates_dir=tmp_path, **full("verify"))
    assert verify == render("verify", templates_dir=None, **full("verify"))
    # ... and the same StrictUndefined.
    with pytest.raises(jinja2.UndefinedError):
        render("reset", templates_dir=tmp_path, product_name=PRODUCT)


def test_a_broken_or_missing_templates_folder_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        check_templates(tmp_path / "nowhere")
    (tmp_path / "verify.html").write_text("<p>{% if %}</p>")
    with pytest.raises(ConfigError, match=r"verify\.html, line 1"):
        check_templates(tmp_path)
    with pytest.raises(ConfigError, match="verify"):
        make_notices(AuthConfig(smtp_url="smtp://127.0.0.1:25", templates_dir=tmp_path))


# --- senders and notices --------------------------------------------------------------------


def test_without_smtp_there_are_no_notices_and_no_email_change_sender() -> None:
    assert make_notices(AuthConfig()) is None
    senders = make_senders(AuthConfig())
    assert senders == {"reset": None, "verify": None, "email_change": None}


def test_the_email_change_function_wins_over_smtp(outbox: Outbox) -> None:
    config = AuthConfig(smtp_url="smtp://127.0.0.1:25", email_change_send_fn=outbox)
    senders = make_senders(config)
    assert isinstance(senders["email_change"], CallableSender)
    assert isinstance(senders["reset"], SmtpSender)
    assert isinstance(senders["verify"], SmtpSender)


def test_notices_never_carry_a_token() -> None:
    notices = make_notices(AuthConfig(smtp_url="smtp://127.0.0.1:25", public_url=PUBLIC_URL))
    assert isinstance(notices, Notices)
    for kind in get_args(NoticeKind):
        msg = notices.message(kind, "ann@example.com", **CONTEXT[kind])
        text, html = (part.get_content() for part in msg.iter_parts())
        for content in (text, html, str(msg)):
            assert "token" not in content.lower(), kind
        with pytest.raises(TypeError, match="no token"):
            notices.message(kind, "ann@example.com", token=TOKEN, **CONTEXT[kind])
        with pytest.raises(TypeError):
            notices.message(kind, "ann@example.com", link=f"{PUBLIC_URL}/?token={TOKEN}")


async def test_a_notice_over_smtp(smtp_sink: SmtpSink) -> None:
    notices = make_notices(smtp_config(smtp_sink))
    assert notices is not None
    await notices.send("email_change_requested", "ann@example.com", new_email=HOSTILE)
    (msg,) = await smtp_sink.wait_for(1)
    assert msg["From"] == MAIL_FROM
    assert msg["To"] == "ann@example.com"
    assert msg["Subject"] == f"Email change requested for your {PRODUCT} account"
    types = [part.get_content_type() for part in msg.walk()]
    assert types == ["multipart/alternative", "text/plain", "text/html"]
    text, html = parts(msg)
    assert HOSTILE in text
    assert "&lt;script&gt;" in html
    assert "<script>" not in html
    assert "token" not in msg.as_string().lower()


async def test_an_email_change_link_over_smtp(smtp_sink: SmtpSink) -> None:
    config = smtp_config(smtp_sink, email_change_path="/account/confirm-email")
    sender = make_senders(config)["email_change"]
    assert isinstance(sender, SmtpSender)
    await sender.send("new@example.com", TOKEN)
    (msg,) = await smtp_sink.wait_for(1)
    assert msg["From"] == MAIL_FROM
    assert msg["To"] == "new@example.com"
    assert msg["Subject"] == f"Confirm your new email address for {PRODUCT}"
    text, html = parts(msg)
    assert "new@example.com" in text
    assert "new@example.com" in html
    (link,) = re.findall(r"https?://\S+", text)
    assert f'href="{link}"' in html
    parsed = urlsplit(link)
    assert f"{parsed.scheme}://{parsed.netloc}" == PUBLIC_URL
    assert parsed.path == "/account/confirm-email"
    assert parse_qs(parsed.query) == {"token": [TOKEN]}
