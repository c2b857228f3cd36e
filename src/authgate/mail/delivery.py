"""Delivering mail: one-time tokens (reset, verification, email change) through the configured
callables or over SMTP, and notices over SMTP.

A sender function given in `AuthConfig` wins over SMTP; with neither, the feature is off and
its request endpoint answers 501. Notices (contract §5) go out over SMTP only, and never carry
a token: without `AUTHGATE_SMTP_URL` there are none.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlencode, urlsplit

from authgate.config import AuthConfig, SenderFn
from authgate.mail.render import MailName, NoticeKind, Purpose, check_templates, render

__all__ = [
    "CallableSender",
    "MailSender",
    "NoticeKind",
    "Notices",
    "Purpose",
    "SmtpSender",
    "make_notices",
    "make_senders",
]


class MailSender(Protocol):
    async def send(self, email: str, token: str) -> None: ...


def _ignore(purpose: str, outcome: str) -> None:
    return None


async def _counted(
    on_sent: Callable[[str, str], None], purpose: str, sent: Awaitable[None]
) -> None:
    """Await a delivery, telling `on_sent` (the metrics) its purpose and outcome."""
    try:
        await sent
    except BaseException:
        on_sent(purpose, "failed")
        raise
    on_sent(purpose, "sent")


@dataclass
class CallableSender:
    fn: SenderFn
    purpose: str = "other"
    #: Told (purpose, "sent" | "failed") after each delivery: the metrics (`metrics.py`).
    on_sent: Callable[[str, str], None] = field(default=_ignore, repr=False)

    async def send(self, email: str, token: str) -> None:
        await _counted(self.on_sent, self.purpose, self._send(email, token))

    async def _send(self, email: str, token: str) -> None:
        if inspect.iscoroutinefunction(self.fn):
            await self.fn(email, token)
            return
        # A plain function may block (an HTTP call to a mail API): keep it off the loop.
        result = await asyncio.to_thread(self.fn, email, token)
        if inspect.isawaitable(result):
            await result


@dataclass(frozen=True)
class SmtpSettings:
    hostname: str
    port: int
    username: str | None
    password: str | None = field(repr=False)  # never in a repr that may reach a log
    use_tls: bool
    start_tls: bool | None
    timeout: float

    @classmethod
    def from_url(cls, url: str, timeout: float) -> SmtpSettings:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError("AUTHGATE_SMTP_URL must start with smtp:// or smtps://")
        if not parts.hostname:
            raise ValueError("AUTHGATE_SMTP_URL has no host")
        use_tls = parts.scheme == "smtps"
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        starttls = query.get("starttls", "").lower() in ("1", "true", "yes", "on")
        return cls(
            hostname=parts.hostname,
            port=parts.port or (465 if use_tls else 25),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            use_tls=use_tls,
            # False, not None: never upgrade opportunistically unless asked to.
            start_tls=starttls,
            timeout=timeout,
        )

    async def deliver(self, message: EmailMessage) -> None:
        # Imported on the first mail: a worker that sends none does not carry the client.
        import aiosmtplib

        await aiosmtplib.send(
            message,
            hostname=self.hostname,
            port=self.port,
            username=self.username,
            password=self.password,
            use_tls=self.use_tls,
            start_tls=self.start_tls,
            timeout=self.timeout,
        )


@dataclass(frozen=True)
class Mailer:
    """What every mail over SMTP shares: the server, the sender address, the templates and
    the values each template is given besides its own (`product_name`, `public_url`)."""

    smtp: SmtpSettings
    mail_from: str
    product_name: str
    public_url: str
    templates_dir: Path | None

    @classmethod
    def from_config(cls, config: AuthConfig) -> Mailer | None:
        """None without `AUTHGATE_SMTP_URL`; the templates are checked once here, at start."""
        if config.smtp_url is None:
            return None
        check_templates(config.templates_dir)
        return cls(
            smtp=SmtpSettings.from_url(config.smtp_url.get_secret_value(), config.smtp_timeout),
            mail_from=config.mail_from,
            product_name=config.product_name,
            public_url=config.public_url,
            templates_dir=config.templates_dir,
        )

    def message(self, name: MailName, email: str, **context: str) -> EmailMessage:
        """Mail `name` to `email`: a text part and its HTML alternative."""
        values = {
            **context,
            "email": email,
            "product_name": self.product_name,
            "public_url": self.public_url,
        }
        mail = render(name, templates_dir=self.templates_dir, **values)
        msg = EmailMessage()
        msg["From"] = self.mail_from
        msg["To"] = email
        msg["Subject"] = mail.subject
        # ASCII copy goes as it is (lines stay far under SMTP's 998): a link is never cut by
        # quoted-printable soft breaks, for mail tools that show the raw message.
        msg.set_content(mail.text, cte=_cte(mail.text))
        msg.add_alternative(mail.html, subtype="html", cte=_cte(mail.html))
        return msg


class SmtpSender:
    """Mails a link carrying the token (`<public_url><path>?token=…`)."""

    def __init__(self, mailer: Mailer, *, purpose: Purpose, link_base: str) -> None:
        self._mailer = mailer
        self._purpose = purpose
        self._link_base = link_base
        self.on_sent: Callable[[str, str], None] = _ignore

    def link(self, token: str) -> str:
        return f"{self._link_base}?{urlencode({'token': token})}"

    def message(self, email: str, token: str) -> EmailMessage:
        return self._mailer.message(self._purpose, email, link=self.link(token))

    async def send(self, email: str, token: str) -> None:
        sent = self._mailer.smtp.deliver(self.message(email, token))
        await _counted(self.on_sent, self._purpose, sent)


class Notices:
    """Mails telling an account's owner that something happened to it; never a token."""

    def __init__(self, mailer: Mailer) -> None:
        self._mailer = mailer
        self.on_sent: Callable[[str, str], None] = _ignore

    def message(self, kind: NoticeKind, email: str, **context: str) -> EmailMessage:
        if "token" in context or "link" in context:
            # The names only: a notice never carries a token, and no value is ever quoted.
            raise TypeError("a notice carries no token and no link with one")
        return self._mailer.message(kind, email, **context)

    async def send(self, kind: NoticeKind, email: str, **context: str) -> None:
        sent = self._mailer.smtp.deliver(self.message(kind, email, **context))
        await _counted(self.on_sent, kind, sent)


def make_senders(config: AuthConfig) -> dict[Purpose, MailSender | None]:
    mailer = Mailer.from_config(config)
    plan: tuple[tuple[Purpose, SenderFn | None, str], ...] = (
        ("reset", config.password_reset_send_fn, config.reset_path),
        ("verify", config.email_verify_send_fn, config.verify_path),
        ("email_change", config.email_change_send_fn, config.email_change_path),
    )
    out: dict[Purpose, MailSender | None] = {}
    for purpose, fn, path in plan:
        if fn is not None:
            out[purpose] = CallableSender(fn, purpose)
        elif mailer is not None:
            out[purpose] = SmtpSender(mailer, purpose=purpose, link_base=config.public_url + path)
        else:
            out[purpose] = None
    return out


def make_notices(config: AuthConfig) -> Notices | None:
    """Notices over SMTP, or None when `AUTHGATE_SMTP_URL` is unset (there are no others)."""
    mailer = Mailer.from_config(config)
    return None if mailer is None else Notices(mailer)


def _cte(text: str) -> str | None:
    """7bit for ASCII text whose lines fit SMTP's limit; otherwise the library's choice."""
    if text.isascii() and all(len(line) < 990 for line in text.splitlines()):
        return "7bit"
    return None
