"""Thin handlers: parse, call the service, respond. Paths and codes are interface.md §4's."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from authgate.errors import InvalidRefreshToken
from authgate.services.sessions import IssuedTokens
from authgate.web.deps import CurrentUser, authenticated_user, client_ip
from authgate.web.schemas import (
    EmailVerificationRequest,
    ErrorResponse,
    HealthResponse,
    LoginRequest,
    LogoutRequest,
    MessageResponse,
    PasswordResetConfirm,
    PasswordResetRequest,
    ReadinessResponse,
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
    from authgate.store.models import User

__all__ = ["auth_router", "health_router"]

READINESS_TIMEOUT_S = 2.0
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class StrictJsonRequest(Request):
    """JSON bodies with a key given twice are refused, not resolved by "last one wins"."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            self._json = json.loads(body, object_pairs_hook=_unique_keys)
        return self._json


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # A JSONDecodeError, so FastAPI answers its usual 422 json_invalid.
            raise json.JSONDecodeError(f"duplicate key {key[:64]!r}", "", 0)
        out[key] = value
    return out


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler  # nothing to parse: no second Request on GET /me

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse} for code in codes}


def _user_json(user: User) -> bytes:
    return UserResponse.model_validate(user).model_dump_json().encode()


def _no_store(response: Response) -> None:
    response.headers.update(NO_STORE)


def auth_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(prefix=gate.config.prefix, tags=["auth"], route_class=StrictJsonRoute)
    config = gate.config

    def token_response(response: Response, tokens: IssuedTokens) -> TokenResponse:
        set_auth_cookies(response, tokens, config)
        _no_store(response)
        return TokenResponse(access_token=tokens.access_token, refresh_token=tokens.refresh_token)

    @router.post(
        "/register",
        status_code=201,
        response_model=UserResponse,
        responses=_errors(400, 409, 413, 429),
    )
    async def register(body: RegisterRequest, request: Request, response: Response) -> Any:
        user = await gate.accounts.register(body.email, body.password, client_ip=client_ip(request))
        _no_store(response)
        return user  # validated once, by response_model

    @router.post("/login", response_model=TokenResponse, responses=_errors(400, 401, 413, 429))
    async def login(body: LoginRequest, request: Request, response: Response) -> Any:
        tokens = await gate.sessions.login(body.email, body.password, client_ip=client_ip(request))
        return token_response(response, tokens)

    @router.post("/refresh", response_model=TokenResponse, responses=_errors(400, 401, 403, 413))
    async def refresh(
        request: Request,
        response: Response,
        body: Annotated[RefreshRequest | None, Body()] = None,
    ) -> Any:
        if body is not None:
            tokens = await gate.sessions.refresh(body.refresh_token)
        else:
            cookie = single_cookie(request, REFRESH_COOKIE)
            if not cookie:
                raise InvalidRefreshToken()
            csrf = require_csrf_header(request)
            tokens = await gate.sessions.refresh(cookie, csrf=csrf)
        return token_response(response, tokens)

    @router.post("/logout", response_model=MessageResponse, responses=_errors(400, 413))
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
        _no_store(response)
        return MessageResponse(message="Logged out.")

    @router.get("/me", response_model=UserResponse, responses=_errors(401))
    async def me(request: Request) -> Response:
        # The hottest route: no dependency tree, no second validation, headers set once.
        user = await authenticated_user(gate, request)
        return Response(_user_json(user), media_type="application/json", headers=NO_STORE)

    @router.post(
        "/password-reset", response_model=MessageResponse, responses=_errors(400, 413, 429, 501)
    )
    async def password_reset(body: PasswordResetRequest, request: Request) -> Any:
        await gate.accounts.request_password_reset(body.email, client_ip=client_ip(request))
        return MessageResponse(
            message="If an account with that email exists, a password reset link has been sent."
        )

    @router.post(
        "/password-reset/confirm", response_model=MessageResponse, responses=_errors(400, 413)
    )
    async def password_reset_confirm(body: PasswordResetConfirm) -> Any:
        await gate.accounts.confirm_password_reset(body.token, body.new_password)
        return MessageResponse(message="The password has been reset.")

    @router.post(
        "/email-verification",
        response_model=MessageResponse,
        responses=_errors(401, 403, 429, 501),
    )
    async def email_verification(user: CurrentUser, request: Request) -> Any:
        sent = await gate.accounts.request_verification(user, client_ip=client_ip(request))
        return MessageResponse(
            message="A verification email has been sent."
            if sent
            else "The email is already verified."
        )

    @router.post(
        "/email-verification/confirm", response_model=MessageResponse, responses=_errors(400, 413)
    )
    async def email_verification_confirm(body: EmailVerificationRequest) -> Any:
        await gate.accounts.confirm_verification(body.token)
        return MessageResponse(message="The email has been verified.")

    return router


def health_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/.well-known/jwks.json", tags=["keys"])
    async def jwks() -> Any:
        """Public keys of the access-token signatures (empty with HS256)."""
        return JSONResponse(
            gate.services.keys.jwks(), headers={"Cache-Control": "public, max-age=300"}
        )

    @router.get("/health", response_model=HealthResponse)
    async def health() -> Any:
        return HealthResponse()

    @router.get(
        "/readiness",
        response_model=ReadinessResponse,
        responses={503: {"model": ReadinessResponse}},
    )
    async def readiness() -> Any:
        probes = {}
        if gate.config.database_url is not None:
            probes["database"] = gate.services.db.ping
        if gate.config.cache_url is not None:
            probes["cache"] = gate.cache.ping
        names = list(probes)
        results = await asyncio.gather(*(_check(probes[name]) for name in names))
        checks = dict(zip(names, results, strict=True))
        ok = all(c["status"] == "ok" for c in checks.values())
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": checks},
            status_code=200 if ok else 503,
            headers={"Cache-Control": "no-store"},
        )

    return router


async def _check(probe: Any) -> dict[str, Any]:
    started = time.perf_counter()
    error: str | None = None
    try:
        await asyncio.wait_for(probe(), timeout=READINESS_TIMEOUT_S)
    except TimeoutError:
        error = "timed out after 2 s"
    except Exception as exc:
        # The exception's type only: a driver message could quote the URL and its password.
        error = type(exc).__name__
    result: dict[str, Any] = {
        "status": "ok" if error is None else "error",
        "latency_ms": round((time.perf_counter() - started) * 1000, 1),
    }
    if error is not None:
        result["error"] = error
    return result
