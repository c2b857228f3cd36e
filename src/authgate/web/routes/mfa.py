"""TOTP, recovery codes and the second step over HTTP (contract §9).

Every answer is personal (a secret, codes, tokens) and carries `Cache-Control: no-store`.
Every route but `POST /mfa/verify` refuses a session waiting for its second step (401
`mfa_required`); verify is the one that accepts it. Cookie-authenticated unsafe requests
need the CSRF header (`authenticated_claims`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from authgate.web.deps import authenticated_claims, authenticated_session, client_ip
from authgate.web.routes.base import StrictJsonRoute, error_responses, no_store
from authgate.web.schemas import (
    MfaStatusResponse,
    MfaVerifyRequest,
    PasswordConfirmation,
    RecoveryCodesResponse,
    TokenResponse,
    TotpConfirmRequest,
    TotpEnrolmentResponse,
)
from authgate.web.transport import set_auth_cookies

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["mfa_router"]


def mfa_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(
        prefix=gate.config.prefix, tags=["second factors"], route_class=StrictJsonRoute
    )
    service = gate.mfa

    @router.get("/mfa", response_model=MfaStatusResponse, responses=error_responses(401))
    async def status(request: Request, response: Response) -> Any:
        user, _ = await authenticated_session(gate, request)
        no_store(response)
        found = await service.status(user)
        return MfaStatusResponse(
            totp=found.totp,
            recovery_codes_remaining=found.recovery_codes_remaining,
            passkeys=found.passkeys,
        )

    @router.post(
        "/mfa/totp",
        response_model=TotpEnrolmentResponse,
        responses=error_responses(401, 403, 409),
    )
    async def enrol_totp(request: Request, response: Response) -> Any:
        user, _ = await authenticated_session(gate, request)
        no_store(response)
        enrolment = await service.enrol_totp(user)
        return TotpEnrolmentResponse(
            secret=enrolment.secret, otpauth_uri=enrolment.otpauth_uri, qr_svg=enrolment.qr_svg
        )

    @router.post(
        "/mfa/totp/confirm",
        response_model=RecoveryCodesResponse,
        responses=error_responses(400, 401, 403, 409, 413, 429),
    )
    async def confirm_totp(body: TotpConfirmRequest, request: Request, response: Response) -> Any:
        user, current = await authenticated_session(gate, request)
        no_store(response)
        codes = await service.confirm_totp(user, current, body.code)
        return RecoveryCodesResponse(recovery_codes=codes)

    @router.delete(
        "/mfa/totp", status_code=204, responses=error_responses(400, 401, 403, 404, 413, 429, 503)
    )
    async def remove_totp(body: PasswordConfirmation, request: Request) -> Response:
        user, current = await authenticated_session(gate, request)
        await service.remove_totp(user, current, body.password, client_ip=client_ip(request))
        response = Response(status_code=204)
        no_store(response)
        return response

    @router.post(
        "/mfa/recovery-codes",
        response_model=RecoveryCodesResponse,
        responses=error_responses(400, 401, 403, 409, 413, 429, 503),
    )
    async def regenerate_recovery_codes(
        body: PasswordConfirmation, request: Request, response: Response
    ) -> Any:
        user, _ = await authenticated_session(gate, request)
        no_store(response)
        codes = await service.regenerate_recovery_codes(
            user, body.password, client_ip=client_ip(request)
        )
        return RecoveryCodesResponse(recovery_codes=codes)

    @router.post(
        "/mfa/verify",
        response_model=TokenResponse,
        responses=error_responses(400, 401, 403, 413, 429),
    )
    async def verify(body: MfaVerifyRequest, request: Request, response: Response) -> Any:
        # The one route (with logout and the passkey assertion) a pending session may use.
        user, claims = await authenticated_claims(gate, request, allow_pending=True)
        tokens = await service.verify(
            user,
            claims.session_id,
            claims.level,
            code=body.code,
            recovery_code=body.recovery_code,
        )
        set_auth_cookies(response, tokens, gate.config)
        no_store(response)
        return TokenResponse(access_token=tokens.access_token, refresh_token=tokens.refresh_token)

    return router
