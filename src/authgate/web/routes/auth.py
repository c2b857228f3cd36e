"""Sessions over HTTP: register, login, refresh, logout and the current user."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Request, Response

from authgate.errors import InvalidRefreshToken, PasswordRejected
from authgate.services.sessions import IssuedTokens
from authgate.web.deps import authenticated_user, client_ip
from authgate.web.handlers import rejected_password
from authgate.web.routes.base import NO_STORE, StrictJsonRoute, error_responses, no_store
from authgate.web.schemas import (
    LoginRequest,
    LogoutRequest,
    MessageResponse,
    RefreshRequest,
    RegisterRequest,
    TokenResponse,
    UserResponse,
)
from authgate.web.transport import (
    REFRESH_COOKIE,
    access_token_from,
    clear_auth_cookies,
    require_csrf_header,
    set_auth_cookies,
    single_cookie,
)

if TYPE_CHECKING:
    from authgate.app import AuthGate
    from authgate.principal import Principal

__all__ = ["auth_router"]


@functools.lru_cache(maxsize=1024)
def _user_json(principal: Principal) -> bytes:
    """GET /me's body. A `Principal` is a frozen value, and a worker answers the same user
    many times from its state cache: the JSON is made once per distinct value (an update of
    the user is a new value), not validated and serialised on every request."""
    return UserResponse.model_validate(principal).model_dump_json().encode()


def auth_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(prefix=gate.config.prefix, tags=["auth"], route_class=StrictJsonRoute)
    config = gate.config

    def token_response(response: Response, tokens: IssuedTokens) -> TokenResponse:
        set_auth_cookies(response, tokens, config)
        no_store(response)
        return TokenResponse(access_token=tokens.access_token, refresh_token=tokens.refresh_token)

    @router.post(
        "/register",
        status_code=201,
        response_model=UserResponse,
        responses=error_responses(400, 409, 413, 429),
    )
    async def register(body: RegisterRequest, request: Request, response: Response) -> Any:
        try:
            user = await gate.accounts.register(
                body.email, body.password, client_ip=client_ip(request)
            )
        except PasswordRejected as exc:
            raise rejected_password("password", exc) from None
        no_store(response)
        return user  # validated once, by response_model

    @router.post(
        "/login", response_model=TokenResponse, responses=error_responses(400, 401, 413, 429)
    )
    async def login(body: LoginRequest, request: Request, response: Response) -> Any:
        tokens = await gate.sessions.login(
            body.email,
            body.password,
            client_ip=client_ip(request),
            user_agent=request.headers.get("user-agent"),
        )
        return token_response(response, tokens)

    @router.post(
        "/refresh", response_model=TokenResponse, responses=error_responses(400, 401, 403, 413)
    )
    async def refresh(
        request: Request,
        response: Response,
        body: Annotated[RefreshRequest | None, Body()] = None,
    ) -> Any:
        ip, agent = client_ip(request), request.headers.get("user-agent")
        if body is not None:
            tokens = await gate.sessions.refresh(body.refresh_token, client_ip=ip, user_agent=agent)
        else:
            cookie = single_cookie(request, REFRESH_COOKIE)
            if not cookie:
                raise InvalidRefreshToken()
            csrf = require_csrf_header(request)
            tokens = await gate.sessions.refresh(cookie, csrf=csrf, client_ip=ip, user_agent=agent)
        return token_response(response, tokens)

    @router.post("/logout", response_model=MessageResponse, responses=error_responses(400, 413))
    async def logout(
        request: Request,
        response: Response,
        body: Annotated[LogoutRequest | None, Body()] = None,
    ) -> Any:
        # No CSRF check: logout must answer 200 with or without authentication, and a
        # forced logout grants an attacker nothing (contract §4).
        refresh_token = (
            body.refresh_token if body is not None else single_cookie(request, REFRESH_COOKIE)
        )
        access_token, _ = access_token_from(request)
        await gate.sessions.logout(refresh_token, access_token)
        clear_auth_cookies(response, config)
        no_store(response)
        return MessageResponse(message="Logged out.")

    @router.get("/me", response_model=UserResponse, responses=error_responses(401))
    async def me(request: Request) -> Response:
        # The hottest route: no dependency tree, no second validation, headers set once.
        principal = await authenticated_user(gate, request)
        return Response(_user_json(principal), media_type="application/json", headers=NO_STORE)

    return router
