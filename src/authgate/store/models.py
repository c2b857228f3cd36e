"""Tables. Every name carries the `authgate_` prefix so the tables can live in a database
that the host application shares (its own Alembic history included)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    TypeDecorator,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AuditEvent",
    "Base",
    "OneTimeToken",
    "Passkey",
    "RateLimitCounter",
    "RecoveryCode",
    "RefreshToken",
    "Session",
    "TotpFactor",
    "User",
    "WebAuthnChallenge",
]

# BigInteger primary keys, but SQLite only auto-increments a column declared INTEGER.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in Python on every backend.

    PostgreSQL stores `timestamptz`; SQLite has no time zones, so naive UTC is stored and
    comparisons in SQL stay correct because every value is written in the same zone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class User(Base):
    __tablename__ = "authgate_users"
    #: SQLite would otherwise give the highest deleted id to the next account (migration 0004).
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012 - SQLAlchemy's own attribute

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    #: The address as the user wrote it (domain normalised by email-validator).
    email: Mapped[str] = mapped_column(String(320))
    #: Lower-cased address: emails are unique and matched without regard to case.
    email_key: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    is_superuser: Mapped[bool] = mapped_column(Boolean, default=False)
    email_verified: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Bumped by everything that must end the sessions of whoever knew the old credentials
    #: (password reset, deactivation): a login that verified an older version opens no session,
    #: and a session opened under an older version cannot refresh.
    credentials_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: Set by every change to the row; indexed for the workers' invalidation sweep.
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class Session(Base):
    """A token family: every refresh token rotated from one login, and its access tokens."""

    __tablename__ = "authgate_sessions"

    #: Random 128-bit id, the `sid` claim of the access tokens.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("authgate_users.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: Absolute end of the family (AUTHGATE_SESSION_MAX_AGE); NULL when unlimited.
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Indexed for the workers' invalidation sweep (revocations since the last one).
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, index=True)
    revoke_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: The user's `credentials_version` when the session opened.
    credentials_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The per-session refresh limit: rotations in the window that began at
    #: `refresh_window_start` (a fixed window, AUTHGATE_REFRESH_LIMIT_PER_SESSION).
    refresh_window_start: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    refresh_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: When, from where and with what the session was last used: written at login and at
    #: each refresh only (an authenticated request writes nothing). NULL on sessions older
    #: than migration 0004: `created_at` stands in.
    last_active_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    user_agent: Mapped[str | None] = mapped_column(String(256), nullable=True)
    #: The session's assurance (`principal.Level`, contract §9): 1 or 2, the methods
    #: (RFC 8176 `amr` values, space-separated), and whether the second step is still due.
    aal: Mapped[int] = mapped_column(SmallInteger, default=1, server_default="1")
    amr: Mapped[str] = mapped_column(String(64), default="pwd", server_default="pwd")
    mfa_pending: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class RefreshToken(Base):
    __tablename__ = "authgate_refresh_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("authgate_sessions.id", ondelete="CASCADE"), index=True
    )
    #: SHA-256 of the token; the token itself is never stored.
    digest: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    #: Set when the token is rotated; a second use is reuse.
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class OneTimeToken(Base):
    """Password-reset, email-verification and email-change tokens."""

    __tablename__ = "authgate_one_time_tokens"
    __table_args__ = (Index("ix_authgate_one_time_tokens_user_purpose", "user_id", "purpose"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("authgate_users.id", ondelete="CASCADE"))
    purpose: Mapped[str] = mapped_column(String(16))
    digest: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: The address an email-change token confirms (NULL for the other purposes).
    new_email: Mapped[str | None] = mapped_column(String(320), nullable=True)


class RateLimitCounter(Base):
    """Fixed-window rate-limit counters, when there is no CACHE_URL: every worker and host on
    the database counts together. `key` is a digest (no email or address in it)."""

    __tablename__ = "authgate_rate_limits"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    hits: Mapped[int] = mapped_column(Integer)
    window_end: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class TotpFactor(Base):
    """A user's authenticator app (RFC 6238): at most one per user."""

    __tablename__ = "authgate_totp_factors"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("authgate_users.id", ondelete="CASCADE"), primary_key=True
    )
    #: The secret sealed with AES-GCM under a key derived from the secret key
    #: (`factors/sealing.py`); never stored in the clear.
    secret_sealed: Mapped[bytes] = mapped_column(LargeBinary(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: NULL while the enrolment waits for its first correct code.
    confirmed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: The last time step (Unix time // 30) a code was accepted for: a code is accepted once,
    #: and never one of an earlier step (a conditional UPDATE decides between racing requests).
    last_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class RecoveryCode(Base):
    """One of a user's single-use recovery codes (only its digest)."""

    __tablename__ = "authgate_recovery_codes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("authgate_users.id", ondelete="CASCADE"), index=True
    )
    digest: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Passkey(Base):
    """A WebAuthn credential (passkey) of a user."""

    __tablename__ = "authgate_passkeys"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("authgate_users.id", ondelete="CASCADE"), index=True
    )
    #: The authenticator's credential id (raw bytes; at most 1023 by WebAuthn Level 2).
    credential_id: Mapped[bytes] = mapped_column(LargeBinary(1023), unique=True)
    #: COSE public key: public, but only the authenticator that holds its private half can
    #: produce a signature it verifies.
    public_key: Mapped[bytes] = mapped_column(LargeBinary(1024))
    #: The signature counter last seen; an assertion whose counter does not grow is refused.
    sign_count: Mapped[int] = mapped_column(BigInteger, default=0)
    #: "single_device" (a hardware-bound key: amr "hwk") or "multi_device" (synced: "swk").
    device_type: Mapped[str] = mapped_column(String(16))
    backed_up: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Comma-separated transports the browser reported ("internal,hybrid"), a hint only.
    transports: Mapped[str | None] = mapped_column(String(128), nullable=True)
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class WebAuthnChallenge(Base):
    """An outstanding WebAuthn ceremony: single use, 5 minutes, bound to the browser that
    asked for it by the digest of a random value kept in that browser's cookie."""

    __tablename__ = "authgate_webauthn_challenges"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    #: SHA-256 of the binding cookie's value.
    binding: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    #: "register" or "login".
    purpose: Mapped[str] = mapped_column(String(16))
    #: The registering user (NULL for a login: discoverable credentials name their user).
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("authgate_users.id", ondelete="CASCADE"), nullable=True
    )
    challenge: Mapped[bytes] = mapped_column(LargeBinary(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class AuditEvent(Base):
    """One security event (`events.emit`), kept `audit_retention_days` (contract §10).

    `user_id` has no foreign key: the trail of a deleted account outlives it. Only the event
    record's fixed keys are stored, none of which is ever a secret."""

    __tablename__ = "authgate_audit_events"
    __table_args__ = (
        Index("ix_authgate_audit_events_user_id_id", "user_id", "id"),
        Index("ix_authgate_audit_events_event_id", "event", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    event: Mapped[str] = mapped_column(String(40))
    outcome: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    factor: Mapped[str | None] = mapped_column(String(16), nullable=True)
    actor: Mapped[str | None] = mapped_column(String(64), nullable=True)
    client_ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    user_agent: Mapped[str | None] = mapped_column(String(256), nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
