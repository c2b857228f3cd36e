"""Passkey routes (contract §9): the two WebAuthn ceremonies and the account's list.

Each ceremony's options answer sets `svc_webauthn`, an HttpOnly cookie holding a random
binding value (the store keeps only its SHA-256); the ceremony's second request must carry
it, so a challenge only works in the browser that asked for it. The cookie is scoped to the
passkey routes, SameSite=Strict, and lives as long as the challenge (5 minutes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Path, Request, Response

from authgate.errors import NotAuthenticated
from authgate.factors.passkeys import TIMEOUT_MS
from authgate.principal import Client
from authgate.services.passkeys import Ceremony
from authgate.services.sessions import IssuedTokens
from authgate.store.passkeys import PasskeyInfo
from authgate.tokens.keys import AccessClaims
from authgate.web.deps import authenticated_claims, client_ip
from authgate.web.routes.base import StrictJsonRoute, error_responses, no_store
from authgate.web.schemas import (
    PasskeyLoginRequest,
    PasskeyRegisterRequest,
    PasskeyRenameRequest,
    PasskeyResponse,
    PasskeysResponse,
    PasswordConfirmation,
    TokenResponse,
)
from authgate.web.transport import (
    access_token_from,
    require_csrf_header,
    set_auth_cookies,
    single_cookie,
)

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["WEBAUTHN_COOKIE", "passkeys_router"]

WEBAUTHN_COOKIE = "svc_webauthn"
#: A passkey id as the database keeps them (BIGINT): anything else is 422, never a query.
PasskeyId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _response(info: PasskeyInfo) -> PasskeyResponse:
    return PasskeyResponse(
        id=info.id, name=info.name, created_at=info.created_at, last_used_at=info.last_used_at
    )


def _options_doc(what: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": f"{what}, as py_webauthn's options_to_json writes it"}}


def passkeys_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(
        prefix=gate.config.prefix, tags=["second factors"], route_class=StrictJsonRoute
    )
    config = gate.config
    cookie_path = f"{config.prefix}/passkeys"

    def options_response(ceremony: Ceremony) -> Response:
        response = Response(ceremony.options_json, media_type="application/json")
        response.set_cookie(
            WEBAUTHN_COOKIE,
            ceremony.binding,
            max_age=TIMEOUT_MS // 1000,
            path=cookie_path,
            domain=config.cookie_domain,
            secure=config.cookie_secure,
            httponly=True,
            samesite="strict",
        )
        no_store(response)
        return response

    def end_ceremony(response: Response) -> None:
        response.delete_cookie(
            WEBAUTHN_COOKIE,
            path=cookie_path,
            domain=config.cookie_domain,
            secure=config.cookie_secure,
            httponly=True,
            samesite="strict",
        )
        no_store(response)

    async def pending_session(request: Request) -> AccessClaims | None:
        """The request's session when it waits for its second step; None without a valid
        access token, or with one of a session that does not wait (a passkey sign-in then
        opens a new session, and acts on no session the request came with: no CSRF check).
        Raising a pending session on its cookie needs the CSRF header, as every unsafe
        request acting on a cookie session does."""
        token, via_cookie = access_token_from(request)
        if token is None:
            return None
        try:
            _, claims = await gate.sessions.authenticate(token, allow_pending=True)
        except NotAuthenticated:
            return None
        if not claims.level.pending:
            return None
        if via_cookie:
            gate.sessions.require_csrf(require_csrf_header(request), claims.session_id)
        return claims

    # --- registration ---------------------------------------------------------------------

    @router.post(
        "/passkeys/register/options",
        response_class=Response,
        responses={
            **_options_doc("PublicKeyCredentialCreationOptionsJSON"),
            **error_responses(401, 403),
        },
    )
    async def registration_options(request: Request) -> Response:
        user, _ = await authenticated_claims(gate, request)
        return options_response(await gate.passkeys.registration_options(user))

    @router.post(
        "/passkeys/register",
        status_code=201,
        response_model=PasskeyResponse,
        responses=error_responses(400, 401, 403, 413),
    )
    async def register(body: PasskeyRegisterRequest, request: Request, response: Response) -> Any:
        user, claims = await authenticated_claims(gate, request)
        added = await gate.passkeys.register(
            user,
            claims.session_id,
            single_cookie(request, WEBAUTHN_COOKIE),
            body.credential,
            body.name,
        )
        end_ceremony(response)
        return _response(added)

    # --- the account page -------------------------------------------------------------------

    @router.get("/passkeys", response_model=PasskeysResponse, responses=error_responses(401))
    async def listing(request: Request, response: Response) -> Any:
        user, _ = await authenticated_claims(gate, request)
        no_store(response)
        return PasskeysResponse(passkeys=[_response(p) for p in await gate.passkeys.listing(user)])

    @router.patch(
        "/passkeys/{passkey_id}",
        response_model=PasskeyResponse,
        responses=error_responses(400, 401, 403, 404, 413),
    )
    async def rename(
        passkey_id: PasskeyId, body: PasskeyRenameRequest, request: Request, response: Response
    ) -> Any:
        user, _ = await authenticated_claims(gate, request)
        no_store(response)
        return _response(await gate.passkeys.rename(user, passkey_id, body.name))

    @router.delete(
        "/passkeys/{passkey_id}",
        status_code=204,
        response_class=Response,
        responses=error_responses(400, 401, 403, 404, 413, 429),
    )
    async def remove(
        passkey_id: PasskeyId,
        request: Request,
        body: Annotated[PasswordConfirmation | None, Body()] = None,
    ) -> Response:
        user, claims = await authenticated_claims(gate, request)
        await gate.passkeys.remove(
            user,
            claims.session_id,
            passkey_id,
            body.password if body is not None else None,
            client_ip=client_ip(request),
        )
        response = Response(status_code=204)
        no_store(response)
        return response

    # --- sign-in ----------------------------------------------------------------------------

    @router.post(
        "/passkeys/login/options",
        response_class=Response,
        responses={**_options_doc("PublicKeyCredentialRequestOptionsJSON"), **error_responses(429)},
    )
    async def login_options(request: Request) -> Response:
        return options_response(await gate.passkeys.login_options(client_ip=client_ip(request)))

    @router.post(
        "/passkeys/login",
        response_model=TokenResponse,
        responses=error_responses(400, 401, 403, 413),
    )
    async def login(body: PasskeyLoginRequest, request: Request, response: Response) -> Any:
        tokens: IssuedTokens = await gate.passkeys.login(
            single_cookie(request, WEBAUTHN_COOKIE),
            body.credential,
            await pending_session(request),
            Client.of(client_ip(request), request.headers.get("user-agent")),
        )
        set_auth_cookies(response, tokens, config)
        end_ceremony(response)
        return TokenResponse(access_token=tokens.access_token, refresh_token=tokens.refresh_token)

    return router
