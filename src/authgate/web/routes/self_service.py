"""Self-service accounts over HTTP (contract §5): sessions, password and email change, and
deleting the account. Every answer carries personal data or ends a session: none is stored
by a cache (`Cache-Control: no-store`). Cookie-authenticated unsafe requests need the CSRF
header (`authenticated_session`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from authgate.errors import PasswordRejected
from authgate.web.deps import authenticated_session, client_ip
from authgate.web.handlers import rejected_password
from authgate.web.routes.base import StrictJsonRoute, error_responses, no_store
from authgate.web.schemas import (
    AccountDeletion,
    EmailChangeConfirm,
    EmailChangeRequest,
    MessageResponse,
    PasswordChangeRequest,
    RevokedResponse,
    SessionResponse,
    SessionsResponse,
)
from authgate.web.transport import clear_auth_cookies

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["self_service_router"]


def self_service_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(prefix=gate.config.prefix, tags=["account"], route_class=StrictJsonRoute)
    service = gate.self_service
    config = gate.config

    @router.get("/sessions", response_model=SessionsResponse, responses=error_responses(401))
    async def list_sessions(request: Request, response: Response) -> Any:
        user, current = await authenticated_session(gate, request)
        no_store(response)
        sessions = await service.sessions(user.id)
        return SessionsResponse(
            sessions=[
                SessionResponse(
                    id=info.id,
                    created_at=info.created_at,
                    last_active_at=info.last_active_at,
                    expires_at=info.expires_at,
                    ip=info.ip,
                    user_agent=info.user_agent,
                    current=info.id == current,
                )
                for info in sessions
            ]
        )

    @router.delete(
        "/sessions/{session_id}", status_code=204, responses=error_responses(401, 403, 404)
    )
    async def revoke_session(session_id: str, request: Request) -> Response:
        user, current = await authenticated_session(gate, request)
        await service.revoke_session(user.id, session_id)
        response = Response(status_code=204)
        if session_id == current:
            # The caller signed itself out: its cookies go too, as at logout.
            clear_auth_cookies(response, config)
        no_store(response)
        return response

    @router.delete(
        "/sessions", response_model=RevokedResponse, responses=error_responses(401, 403, 503)
    )
    async def revoke_other_sessions(request: Request, response: Response) -> Any:
        user, current = await authenticated_session(gate, request)
        no_store(response)
        return RevokedResponse(revoked=await service.revoke_other_sessions(user.id, current))

    @router.post(
        "/password-change",
        response_model=MessageResponse,
        responses=error_responses(400, 401, 403, 413, 429, 503),
    )
    async def password_change(
        body: PasswordChangeRequest, request: Request, response: Response
    ) -> Any:
        user, current = await authenticated_session(gate, request)
        no_store(response)
        try:
            await service.change_password(
                user,
                current,
                body.current_password,
                body.new_password,
                client_ip=client_ip(request),
            )
        except PasswordRejected as exc:
            raise rejected_password("new_password", exc) from None
        return MessageResponse(
            message="The password has been changed; every other session has been signed out."
        )

    @router.post(
        "/email-change",
        status_code=202,
        response_model=MessageResponse,
        responses=error_responses(400, 401, 403, 409, 413, 429, 501, 503),
    )
    async def email_change(body: EmailChangeRequest, request: Request, response: Response) -> Any:
        user, _ = await authenticated_session(gate, request)
        no_store(response)
        await service.request_email_change(
            user, body.new_email, body.password, client_ip=client_ip(request)
        )
        return MessageResponse(
            message="A confirmation link has been sent to the new address; "
            "the email changes when it is followed."
        )

    @router.post(
        "/email-change/confirm",
        response_model=MessageResponse,
        responses=error_responses(400, 409, 413),
    )
    async def email_change_confirm(body: EmailChangeConfirm, response: Response) -> Any:
        no_store(response)
        await service.confirm_email_change(body.token)
        return MessageResponse(message="The email address has been changed.")

    @router.delete("/me", status_code=204, responses=error_responses(400, 401, 403, 413, 429, 503))
    async def delete_me(body: AccountDeletion, request: Request) -> Response:
        user, _ = await authenticated_session(gate, request)
        await service.delete_account(user, body.password, client_ip=client_ip(request))
        response = Response(status_code=204)
        clear_auth_cookies(response, config)
        no_store(response)
        return response

    return router
