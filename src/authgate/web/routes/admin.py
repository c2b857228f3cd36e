"""The admin API over HTTP (contract §10), under `{prefix}/admin`.

Who may call it: a superuser's access token (at `aal2` when that superuser has a second
factor; a session pending its second step is 401 `mfa_required` as everywhere), or
`Authorization: Bearer <AUTHGATE_ADMIN_TOKEN>` when that is set. Anyone else gets 403
`forbidden`; a request with no credentials 401. The admin token is kept only as its SHA-256
digest here and compared with `hmac.compare_digest` on digests (constant time, no length
signal). A bearer value equal to it acts as the token; any other value shaped as a JWT is
an access token (its own 401s: expired, revoked); and with an admin token configured, any
other value is a wrong admin token: 403.

Every answer is personal or an action: `Cache-Control: no-store`. Cookie-authenticated unsafe
requests need the CSRF header (`authenticated_claims`); the admin token travels only in the
Authorization header, which a browser never adds by itself.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.security import HTTPBearer
from pydantic import AwareDatetime, BaseModel, ConfigDict, StrictBool, model_validator

from authgate.errors import Forbidden, NotAuthenticated, PasswordRejected
from authgate.principal import SessionInfo
from authgate.services.admin import MAX_ID, Actor, AdminService
from authgate.store.admin import UserRow
from authgate.store.audit import AuditRow
from authgate.web.deps import authenticated_claims
from authgate.web.handlers import rejected_password
from authgate.web.routes.base import StrictJsonRoute, error_responses, no_store
from authgate.web.schemas import NewEmailField, NewPasswordField, RevokedResponse
from authgate.web.transport import access_token_from

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = [
    "AdminSession",
    "AdminUser",
    "AdminUserDetail",
    "AuditEventResponse",
    "AuditPage",
    "UsersPage",
    "admin_router",
]

UserId = Annotated[int, Path(ge=1, le=MAX_ID, description="The user's id.")]


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


def admin_router(gate: AuthGate) -> APIRouter:
    service = AdminService(gate.services, gate.accounts)
    secret = gate.config.admin_token
    # Only the digest is kept: the token itself is never held by the router, logged or sent.
    admin_digest = (
        hashlib.sha256(secret.get_secret_value().encode()).digest() if secret is not None else None
    )
    router = APIRouter(
        prefix=f"{gate.config.prefix}/admin",
        tags=["admin"],
        route_class=StrictJsonRoute,
        # In the OpenAPI document only (the security scheme); `actor` below authenticates.
        dependencies=[Depends(HTTPBearer(auto_error=False, scheme_name="bearer"))],
    )

    async def actor(request: Request) -> Actor:
        token, via_cookie = access_token_from(request)
        if token is None:
            raise NotAuthenticated()
        if admin_digest is not None and not via_cookie:
            given = hashlib.sha256(token.encode()).digest()
            if hmac.compare_digest(given, admin_digest):
                return Actor(None)
            if token.count(".") != 2:
                raise Forbidden("Not an administrator.")
        principal, claims = await authenticated_claims(gate, request)
        if not principal.is_superuser:
            raise Forbidden("Not an administrator.")
        if claims.level.aal < 2 and await service.has_factor(principal.id):
            raise Forbidden("Administrators with a second factor must use it for this session.")
        return Actor(principal.id)

    @router.get("/users", response_model=UsersPage, responses=error_responses(400, 401, 403))
    async def list_users(
        request: Request,
        response: Response,
        query: Annotated[str | None, Query(max_length=320)] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 50,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Any:
        """Users by id, those whose email contains `query` (case-insensitive), a page at a
        time: pass `next_cursor` back as `cursor` (with the same `query`)."""
        await actor(request)
        no_store(response)
        rows, following = await service.list_users(query, limit, cursor)
        return UsersPage(users=[AdminUser.of(r) for r in rows], next_cursor=following)

    @router.get(
        "/users/{user_id}", response_model=AdminUserDetail, responses=error_responses(401, 403, 404)
    )
    async def get_user(user_id: UserId, request: Request, response: Response) -> Any:
        await actor(request)
        no_store(response)
        detail = await service.user(user_id)
        return AdminUserDetail(
            **AdminUser.of(detail.row).model_dump(),
            sessions=[AdminSession.of(s) for s in detail.sessions],
        )

    @router.post(
        "/users",
        status_code=201,
        response_model=AdminUser,
        responses=error_responses(400, 401, 403, 409, 413, 503),
    )
    async def create_user(body: AdminUserCreate, request: Request, response: Response) -> Any:
        who = await actor(request)
        no_store(response)
        try:
            row = await service.create_user(
                who,
                body.email,
                body.password,
                is_superuser=body.is_superuser,
                email_verified=body.email_verified,
            )
        except PasswordRejected as exc:
            raise rejected_password("password", exc) from None
        return AdminUser.of(row)

    @router.patch(
        "/users/{user_id}",
        response_model=AdminUser,
        responses=error_responses(400, 401, 403, 404, 409, 413),
    )
    async def update_user(
        user_id: UserId, body: AdminUserUpdate, request: Request, response: Response
    ) -> Any:
        """Deactivation (`is_active: false`) revokes every session of the user; its access
        tokens stop working at once, on every worker."""
        who = await actor(request)
        no_store(response)
        row = await service.update_user(
            who,
            user_id,
            is_active=body.is_active,
            is_superuser=body.is_superuser,
            email_verified=body.email_verified,
        )
        return AdminUser.of(row)

    @router.delete(
        "/users/{user_id}", status_code=204, responses=error_responses(401, 403, 404, 409)
    )
    async def delete_user(user_id: UserId, request: Request) -> Response:
        who = await actor(request)
        await service.delete_user(who, user_id)
        response = Response(status_code=204)
        no_store(response)
        return response

    @router.delete(
        "/users/{user_id}/sessions",
        response_model=RevokedResponse,
        responses=error_responses(401, 403, 404),
    )
    async def revoke_sessions(user_id: UserId, request: Request, response: Response) -> Any:
        who = await actor(request)
        no_store(response)
        return RevokedResponse(revoked=await service.revoke_sessions(who, user_id))

    @router.get("/audit", response_model=AuditPage, responses=error_responses(400, 401, 403))
    async def audit(
        request: Request,
        response: Response,
        user_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        event: Annotated[str | None, Query(max_length=40)] = None,
        since: Annotated[AwareDatetime | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 50,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Any:
        """The audit log, newest first: the user's (`user_id`), one event's, since a moment
        (ISO 8601 with its offset), a page at a time. Events reach the table within half a
        second of their step (each worker writes them in batches)."""
        await actor(request)
        no_store(response)
        rows, following = await service.audit(
            user_id=user_id, event=event, since=since, limit=limit, cursor=cursor
        )
        return AuditPage(events=[AuditEventResponse.of(r) for r in rows], next_cursor=following)

    return router
