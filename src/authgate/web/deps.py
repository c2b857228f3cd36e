"""Request dependencies: the client address and the authenticated principal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from authgate.errors import NotAuthenticated
from authgate.principal import Principal
from authgate.tokens.keys import AccessClaims
from authgate.web.transport import UNSAFE_METHODS, access_token_from, require_csrf_header

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = [
    "CurrentUser",
    "authenticated_claims",
    "authenticated_session",
    "authenticated_user",
    "client_ip",
    "current_user",
    "gate_of",
]


def gate_of(request: Request) -> AuthGate:
    gate: AuthGate | None = getattr(request.app.state, "authgate", None)
    if gate is None:
        raise RuntimeError("authgate is not installed on this application; call gate.install(app)")
    return gate


def client_ip(request: Request) -> str:
    """The client address `RequestGuard` resolved (trusted proxies applied)."""
    resolved: str | None = request.scope.get("state", {}).get("authgate_client_ip")
    if resolved is not None:
        return resolved
    return request.client.host if request.client else "unknown"


async def current_user(request: Request) -> Principal:
    """The active user behind the request's access token, as a frozen `Principal`.

    The token comes from `Authorization: Bearer` or, failing that, the `svc_access_token`
    cookie. A cookie-authenticated unsafe request must also carry `X-CSRF-Token` equal to the
    `svc_csrf_token` cookie and bound to the same session (signed double submit), else 403.
    """
    return await authenticated_user(gate_of(request), request)


async def authenticated_user(gate: AuthGate, request: Request) -> Principal:
    """`current_user` for a known gate (the routes' own, without the app-state lookup)."""
    return (await authenticated_session(gate, request))[0]


async def authenticated_session(gate: AuthGate, request: Request) -> tuple[Principal, str]:
    """`authenticated_user` and the id of the session the request came with."""
    principal, claims = await authenticated_claims(gate, request)
    return principal, claims.session_id


async def authenticated_claims(
    gate: AuthGate, request: Request, *, allow_pending: bool = False
) -> tuple[Principal, AccessClaims]:
    """The principal and the verified claims of the request's access token (its session and
    assurance level). `allow_pending`: a session waiting for its second step is accepted (the
    second step's own routes); everywhere else it gets 401 `mfa_required`."""
    token, via_cookie = access_token_from(request)
    if token is None:
        raise NotAuthenticated()
    principal, claims = await gate.sessions.authenticate(token, allow_pending=allow_pending)
    if via_cookie and request.method in UNSAFE_METHODS:
        gate.sessions.require_csrf(require_csrf_header(request), claims.session_id)
    return principal, claims


CurrentUser = Annotated[Principal, Depends(current_user)]
