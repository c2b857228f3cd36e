"""The admin API's request and response bodies (contract §10): users as an administrator
sees them (with their second factor and live sessions), pages with an opaque cursor, and the
audit log's events. Never a password hash, a token or a secret."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, StrictBool, model_validator

from authgate.principal import SessionInfo
from authgate.store.admin import UserRow
from authgate.store.audit import AuditRow
from authgate.web.schemas import NewEmailField, NewPasswordField

__all__ = [
    "AdminSession",
    "AdminUser",
    "AdminUserCreate",
    "AdminUserDetail",
    "AdminUserUpdate",
    "AuditEventResponse",
    "AuditPage",
    "UsersPage",
]


class AdminUser(BaseModel):
    id: int
    email: str
    is_active: bool
    is_superuser: bool
    email_verified: bool
    created_at: datetime
    updated_at: datetime
    #: A confirmed authenticator app or a passkey.
    has_second_factor: bool

    @classmethod
    def of(cls, row: UserRow) -> AdminUser:
        u = row.user
        return cls(
            id=u.id,
            email=u.email,
            is_active=u.is_active,
            is_superuser=u.is_superuser,
            email_verified=u.email_verified,
            created_at=u.created_at,
            updated_at=u.updated_at,
            has_second_factor=row.has_factor,
        )


class AdminSession(BaseModel):
    """A live session of the user (GET /sessions' fields, without `current`)."""

    id: str
    created_at: datetime
    last_active_at: datetime
    expires_at: datetime | None
    ip: str | None
    user_agent: str | None

    @classmethod
    def of(cls, info: SessionInfo) -> AdminSession:
        return cls(
            id=info.id,
            created_at=info.created_at,
            last_active_at=info.last_active_at,
            expires_at=info.expires_at,
            ip=info.ip,
            user_agent=info.user_agent,
        )


class AdminUserDetail(AdminUser):
    sessions: list[AdminSession]


class UsersPage(BaseModel):
    users: list[AdminUser]
    #: Pass as `cursor` for the next page; null on the last one.
    next_cursor: str | None


class AuditEventResponse(BaseModel):
    """One stored event (contract §10): never a secret, only the event record's fixed keys."""

    id: int
    time: datetime
    event: str
    outcome: str
    user_id: int | None
    session_id: str | None
    reason: str | None
    factor: str | None
    #: Who did an admin action: "user:<id>" or "admin_token".
    actor: str | None
    client_ip: str | None
    user_agent: str | None
    request_id: str | None

    @classmethod
    def of(cls, row: AuditRow) -> AuditEventResponse:
        return cls(
            id=row.id,
            time=row.time,
            event=row.event,
            outcome=row.outcome,
            user_id=row.user_id,
            session_id=row.session_id,
            reason=row.reason,
            factor=row.factor,
            actor=row.actor,
            client_ip=row.client_ip,
            user_agent=row.user_agent,
            request_id=row.request_id,
        )


class AuditPage(BaseModel):
    events: list[AuditEventResponse]
    #: Pass as `cursor` (with the same filters) for the next, older page; null on the last.
    next_cursor: str | None


class AdminUserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: NewEmailField
    password: NewPasswordField
    is_superuser: StrictBool = False
    email_verified: StrictBool = False


class AdminUserUpdate(BaseModel):
    """The flags to change; at least one. A flag left out (or null) stays as it is."""

    model_config = ConfigDict(extra="forbid")

    is_active: StrictBool | None = None
    is_superuser: StrictBool | None = None
    email_verified: StrictBool | None = None

    @model_validator(mode="after")
    def _something(self) -> AdminUserUpdate:
        if self.is_active is None and self.is_superuser is None and self.email_verified is None:
            raise ValueError("Give at least one of is_active, is_superuser, email_verified.")
        return self
