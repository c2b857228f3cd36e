"""Delivering reset and verification tokens: through the configured callables or over SMTP.

A sender function given in `AuthConfig` wins over SMTP; with neither, the feature is off and
its request endpoint answers 501.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Protocol
from urllib.parse import unquote, urlencode, urlsplit

import aiosmtplib

from authgate.config import AuthConfig, SenderFn
from authgate.mail.render import Purpose, render

__all__ = ["CallableSender", "MailSender", "Purpose", "SmtpSender", "make_senders"]


class MailSender(Protocol):
    async def send(self, email: str, token: str) -> None: ...


@dataclass(frozen=True)
class CallableSender:
    fn: SenderFn

    async def send(self, email: str, token: str) -> None:
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
    password: str | None
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


class SmtpSender:
    """Mails a link carrying the token, its copy rendered from the templates (`render.py`)."""

    def __init__(
        self, settings: SmtpSettings, *, purpose: Purpose, mail_from: str, link_base: str
    ) -> None:
        self._settings = settings
        self._purpose = purpose
        self._mail_from = mail_from
        self._link_base = link_base

    def link(self, token: str) -> str:
        return f"{self._link_base}?{urlencode({'token': token})}"

    def message(self, email: str, token: str) -> EmailMessage:
        mail = render(self._purpose, link=self.link(token))
        msg = EmailMessage()
        msg["From"] = self._mail_from
        msg["To"] = email
        msg["Subject"] = mail.subject
        msg.set_content(mail.text)
        msg.add_alternative(mail.html, subtype="html")
        return msg

    async def send(self, email: str, token: str) -> None:
        s = self._settings
        await aiosmtplib.send(
            self.message(email, token),
            hostname=s.hostname,
            port=s.port,
            username=s.username,
            password=s.password,
            use_tls=s.use_tls,
            start_tls=s.start_tls,
            timeout=s.timeout,
        )


def make_senders(config: AuthConfig) -> dict[Purpose, MailSender | None]:
    smtp = (
        SmtpSettings.from_url(config.smtp_url.get_secret_value(), config.smtp_timeout)
        if config.smtp_url is not None
        else None
    )
    out: dict[Purpose, MailSender | None] = {}
    plan: tuple[tuple[Purpose, SenderFn | None, str], ...] = (
        ("reset", config.password_reset_send_fn, config.reset_path),
        ("verify", config.email_verify_send_fn, config.verify_path),
    )
    for purpose, fn, path in plan:
        if fn is not None:
            out[purpose] = CallableSender(fn)
        elif smtp is not None:
            out[purpose] = SmtpSender(
                smtp,
                purpose=purpose,
                mail_from=config.mail_from,
                link_base=config.public_url + path,
            )
        else:
            out[purpose] = None
    return out
