"""The admin API over HTTP (contract §10), under `{prefix}/admin`.

Who may call it: a superuser's access token (at `aal2` when that superuser has a second
factor; a session pending its second step is 401 `mfa_required` as everywhere), or
`Authorization: Bearer <AUTHGATE_ADMIN_TOKEN>` when that is set. Anyone else gets 403
`forbidden`; a request with no credentials 401. The admin token is kept only as its SHA-256
digest here and compared with `hmac.compare_digest` on digests (constant time, no length
signal). A bearer value equal to it acts as the token; any other value shaped as a JWT is
an access token (its own 401s: expired, revoked); and with an admin token configured, any
other value is a wrong admin token: 403.

Every answer a route gives is personal or an action: `Cache-Control: no-store`. (The error
answers come from the shared handlers: they carry nothing personal, and a shared cache stores
no answer to a request with `Authorization` anyway, RFC 9111 §3.5.) Cookie-authenticated unsafe
requests need the CSRF header (`authenticated_claims`); the admin token travels only in the
Authorization header, which a browser never adds by itself.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.security import HTTPBearer
from pydantic import AwareDatetime

from authgate.errors import Forbidden, NotAuthenticated, PasswordRejected
from authgate.services.admin import MAX_ID, Actor, AdminService
from authgate.web.admin_schemas import (
    AdminSession,
    AdminUser,
    AdminUserCreate,
    AdminUserDetail,
    AdminUserUpdate,
    AuditEventResponse,
    AuditPage,
    UsersPage,
)
from authgate.web.deps import authenticated_claims
from authgate.web.handlers import rejected_password
from authgate.web.routes.base import StrictJsonRoute, error_responses, no_store
from authgate.web.schemas import RevokedResponse
from authgate.web.transport import access_token_from

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["admin_router"]

UserId = Annotated[int, Path(ge=1, le=MAX_ID, description="The user's id.")]


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
