"""Delivering reset and verification tokens: through the configured callables or over SMTP.

A sender function given in `AuthConfig` wins over SMTP; with neither, the feature is off and
its request endpoint answers 501.
"""

from __future__ import annotations

import asyncio
import html
import inspect
from dataclasses import dataclass
from email.message import EmailMessage
from typing import ClassVar, Literal, Protocol
from urllib.parse import unquote, urlencode, urlsplit

import aiosmtplib

from authgate.config import AuthConfig, SenderFn

__all__ = ["CallableSender", "MailSender", "Purpose", "SmtpSender", "make_senders"]

Purpose = Literal["reset", "verify"]


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
    SUBJECTS: ClassVar[dict[Purpose, str]] = {
        "reset": "Reset your password",
        "verify": "Verify your email address",
    }
    INTROS: ClassVar[dict[Purpose, str]] = {
        "reset": "Someone asked to reset the password of your account. "
        "If it was you, open this link to choose a new password:",
        "verify": "Please confirm your email address by opening this link:",
    }
    OUTROS: ClassVar[dict[Purpose, str]] = {
        "reset": "If you did not ask for this, ignore this email; your password stays as it is.",
        "verify": "If you did not create an account, ignore this email.",
    }

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
        link = self.link(token)
        msg = EmailMessage()
        msg["From"] = self._mail_from
        msg["To"] = email
        msg["Subject"] = self.SUBJECTS[self._purpose]
        intro, outro = self.INTROS[self._purpose], self.OUTROS[self._purpose]
        msg.set_content(f"{intro}\n\n{link}\n\n{outro}\n")
        safe = html.escape(link, quote=True)
        msg.add_alternative(
            "<!doctype html><html><body>"
            f"<p>{html.escape(intro)}</p>"
            f'<p><a href="{safe}">{safe}</a></p>'
            f"<p>{html.escape(outro)}</p>"
            "</body></html>",
            subtype="html",
        )
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
