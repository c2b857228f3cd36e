"""Configuration: one `AuthConfig`, built once at the edge and passed down.

Environment variables are the contract's (section 3): `DATABASE_URL` and `CACHE_URL` as
they are, everything else prefixed `AUTHGATE_`. Library users pass the same fields as
keyword arguments, plus the two sender callables that have no environment form.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from ipaddress import ip_network
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from authgate.config.limits import RateLimitSettings
from authgate.config.operations import OperationsSettings
from authgate.events import redact_url

__all__ = ["AuthConfig", "ConfigError", "SenderFn"]

logger = logging.getLogger("authgate")

#: `fn(email, token)`, plain or async, that delivers a reset or verification token.
SenderFn = Callable[[str, str], Awaitable[None] | None]

#: Shorter keys are refused: HS256 and the CSRF HMAC want at least 256 bits of key.
MIN_SECRET_KEY_LENGTH = 32
#: "aaaa…" or "changeme-changeme-…" are long but guessable: ask for some variety too.
MIN_SECRET_KEY_DISTINCT = 10


class AuthConfig(RateLimitSettings, OperationsSettings):
    """Every setting of authgate. Unknown environment variables are ignored."""

    model_config = SettingsConfigDict(
        env_prefix="AUTHGATE_",
        extra="ignore",
        populate_by_name=True,
        validate_default=True,
        # Validation errors must not quote what was given: a secret key, a URL's password.
        hide_input_in_errors=True,
    )

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("database_url", "DATABASE_URL")
    )
    cache_url: str | None = Field(
        default=None, validation_alias=AliasChoices("cache_url", "CACHE_URL")
    )
    data_dir: Path = Path(".authgate")
    prefix: str = "/auth"
    secret_key: SecretStr | None = None
    #: Comma-separated keys that used to be AUTHGATE_SECRET_KEY: tokens and CSRF values they
    #: signed are still accepted (never issued) while a rotation completes.
    secret_key_previous: SecretStr | None = None
    #: Comma-separated IPs or CIDR networks of reverse proxies whose X-Forwarded-For is
    #: believed. Empty: the client IP is the socket peer, whatever headers say.
    trusted_proxies: str = ""
    #: Per-IP rate limits count an IPv6 client as its /N network (one host holds a whole /64).
    ipv6_rate_limit_prefix: int = Field(default=64, ge=1, le=128)

    access_ttl: int = Field(default=900, gt=0)
    refresh_ttl: int = Field(default=1_209_600, gt=0)
    session_max_age: int = Field(default=2_592_000, ge=0)
    reset_ttl: int = Field(default=3600, gt=0)
    verify_ttl: int = Field(default=86_400, gt=0)
    email_change_ttl: int = Field(default=3600, gt=0)

    smtp_url: SecretStr | None = None
    smtp_timeout: float = Field(default=10.0, gt=0)
    mail_from: str = "authgate@localhost"
    public_url: str = "http://127.0.0.1:8000"
    reset_path: str = "/reset-password"
    verify_path: str = "/verify-email"
    email_change_path: str = "/confirm-email-change"
    #: The product's name in mail subjects and copy ("Reset your password for <name>").
    product_name: str = Field(default="authgate", min_length=1, max_length=100)
    #: A folder of the team's own mail templates (`<purpose>.txt` / `.html`); a template it
    #: lacks comes from authgate's own.
    templates_dir: Path | None = None

    cookie_secure: bool = True
    cookie_samesite: Literal["lax", "strict", "none"] = "lax"
    cookie_domain: str | None = None

    #: Seconds after a rotation during which the same refresh token, presented again while
    #: its successor is unused, gets that same successor (contract §8). 0: the strict rule.
    refresh_grace: int = Field(default=0, ge=0, le=300)
    #: Serve the HTML pages (sign-in, sign-up, account, and the pages the mailed links open).
    pages: bool = True
    #: Comma-separated exact origins a page's `?next=` may send the browser to after sign-in,
    #: besides the service's own (`public_url`).
    allowed_redirect_origins: str = ""
    #: Comma-separated origins allowed to call the API from a browser with credentials
    #: (CORS). Empty: no CORS headers at all, so no other origin can read an answer.
    cors_origins: str = ""
    cache_prefix: str = "authgate:"

    #: The WebAuthn relying party id; unset: the host of `public_url`.
    webauthn_rp_id: str | None = None
    #: Comma-separated origins passkey ceremonies may come from; unset: `public_url`'s origin.
    webauthn_origins: str = ""

    jwt_issuer: str = "authgate"
    jwt_audience: str = "authgate"
    #: HS256 (key derived from the secret key), or EdDSA / ES256 with a published JWKS.
    jwt_algorithm: Literal["HS256", "EdDSA", "ES256"] = "HS256"
    jwt_private_key_file: Path | None = None
    #: Comma-separated PEM files of former signing keys: they verify (and stay in the JWKS).
    jwt_previous_key_files: str = ""

    #: Longest a password hash may wait for a core before the request gets 503 + Retry-After.
    hash_max_wait: float = Field(default=0.5, gt=0)
    #: Threads hashing at once in this process; unset: the cores (`authgate serve --workers N`
    #: sets cores / N, so the workers of one machine share its cores instead of oversubscribing).
    hash_threads: int | None = Field(default=None, gt=0)
    #: Largest request body accepted, in bytes; larger bodies get 413 before parsing.
    max_body_bytes: int = Field(default=16_384, gt=0)
    #: `/docs` (Swagger UI, its assets pinned with SRI, under a CSP). Unset: on for the
    #: embedded development setup, off when DATABASE_URL is set. `/openapi.json` is always on.
    docs: bool | None = None
    password_reset_send_fn: SenderFn | None = Field(default=None, exclude=True)
    email_verify_send_fn: SenderFn | None = Field(default=None, exclude=True)
    email_change_send_fn: SenderFn | None = Field(default=None, exclude=True)

    @field_validator("prefix")
    @classmethod
    def _normalise_prefix(cls, value: str) -> str:
        value = value.strip()
        if value in ("", "/"):
            return ""
        if not value.startswith("/"):
            value = "/" + value
        return value.rstrip("/")

    @field_validator("public_url")
    @classmethod
    def _strip_public_url(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("secret_key")
    @classmethod
    def _check_secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and _weak(value.get_secret_value()):
            # The message names the rule, never the value.
            raise ValueError(
                f"AUTHGATE_SECRET_KEY must be at least {MIN_SECRET_KEY_LENGTH} characters with "
                f"at least {MIN_SECRET_KEY_DISTINCT} different ones; generate one with: "
                "python -c 'import secrets; print(secrets.token_urlsafe(48))'"
            )
        return value

    @field_validator("cors_origins", "allowed_redirect_origins", "webauthn_origins")
    @classmethod
    def _check_origins(cls, value: str) -> str:
        for origin in value.split(","):
            origin = origin.strip()
            if origin and (origin == "*" or not origin.startswith(("http://", "https://"))):
                raise ValueError(
                    f"origins must be exact http(s) origins, not {origin!r} "
                    "(no wildcard: cookies ride along)"
                )
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_networks(cls, value: str) -> str:
        for part in value.split(","):
            if part.strip():
                try:
                    ip_network(part.strip(), strict=False)
                except ValueError:
                    raise ValueError(f"not an IP address or network: {part.strip()!r}") from None
        return value

    @field_validator("secret_key_previous")
    @classmethod
    def _check_previous(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            for key in value.get_secret_value().split(","):
                if key.strip() and _weak(key.strip()):
                    raise ValueError(
                        f"every AUTHGATE_SECRET_KEY_PREVIOUS key must be at least "
                        f"{MIN_SECRET_KEY_LENGTH} characters with at least "
                        f"{MIN_SECRET_KEY_DISTINCT} different ones"
                    )
        return value

    @field_validator("database_url", "cache_url", "cookie_domain", "webauthn_rp_id")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    @property
    def embedded(self) -> bool:
        """True when no `DATABASE_URL` is set: the SQLite development setup."""
        return self.database_url is None

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "authgate.sqlite3"

    def secret(self) -> bytes:
        """The key material; `ensure_secret_key` must have run when none was configured."""
        if self.secret_key is None:
            raise RuntimeError("secret key not loaded; call ensure_secret_key(config) first")
        return self.secret_key.get_secret_value().encode()

    def previous_secrets(self) -> list[bytes]:
        if self.secret_key_previous is None:
            return []
        keys = [k.strip() for k in self.secret_key_previous.get_secret_value().split(",")]
        return [k.encode() for k in keys if k]

    @property
    def docs_enabled(self) -> bool:
        return self.embedded if self.docs is None else self.docs

    def describe(self) -> dict[str, Any]:
        """Settings safe to log: no secret, no password in a URL."""
        return {
            "database": redact_url(self.database_url) if self.database_url else "embedded sqlite",
            "cache": redact_url(self.cache_url) if self.cache_url else "in-process memory",
            "prefix": self.prefix or "/",
            "smtp": "configured" if self.smtp_url else "not configured",
        }


def _weak(key: str) -> bool:
    return len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < MIN_SECRET_KEY_DISTINCT


class ConfigError(ValueError):
    """A configuration that authgate refuses to start with; the message says what to change."""
