"""The emailed flows over HTTP: password reset and email verification."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from authgate.errors import PasswordRejected
from authgate.web.deps import CurrentUser, client_ip
from authgate.web.handlers import rejected_password
from authgate.web.routes.base import StrictJsonRoute, error_responses
from authgate.web.schemas import (
    EmailVerificationRequest,
    MessageResponse,
    PasswordResetConfirm,
    PasswordResetRequest,
)

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["email_router"]


def email_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(prefix=gate.config.prefix, tags=["auth"], route_class=StrictJsonRoute)

    @router.post(
        "/password-reset",
        response_model=MessageResponse,
        responses=error_responses(400, 413, 429, 501),
    )
    async def password_reset(body: PasswordResetRequest, request: Request) -> Any:
        await gate.accounts.request_password_reset(body.email, client_ip=client_ip(request))
        return MessageResponse(
            message="If an account with that email exists, a password reset link has been sent."
        )

    @router.post(
        "/password-reset/confirm",
        response_model=MessageResponse,
        responses=error_responses(400, 413),
    )
    async def password_reset_confirm(body: PasswordResetConfirm) -> Any:
        try:
            await gate.accounts.confirm_password_reset(body.token, body.new_password)
        except PasswordRejected as exc:
            raise rejected_password("new_password", exc) from None
        return MessageResponse(message="The password has been reset.")

    @router.post(
        "/email-verification",
        response_model=MessageResponse,
        responses=error_responses(401, 403, 429, 501),
    )
    async def email_verification(user: CurrentUser, request: Request) -> Any:
        sent = await gate.accounts.request_verification(user, client_ip=client_ip(request))
        return MessageResponse(
            message="A verification email has been sent."
            if sent
            else "The email is already verified."
        )

    @router.post(
        "/email-verification/confirm",
        response_model=MessageResponse,
        responses=error_responses(400, 413),
    )
    async def email_verification_confirm(body: EmailVerificationRequest) -> Any:
        await gate.accounts.confirm_verification(body.token)
        return MessageResponse(message="The email has been verified.")

    return router
