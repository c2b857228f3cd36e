"""The HTTP routes, one module per group: `auth` (register, login, refresh, logout, me),
`email` (password reset, email verification), `self_service` (a signed-in user's sessions,
password and email change, account deletion), `client` (the browser client's module),
`mfa` (TOTP, recovery codes, the second step), `passkeys` (WebAuthn), `health` (liveness,
readiness, JWKS), `admin` (the admin API) and `docs` (the Swagger UI page). Paths and codes are
interface.md §4's and the contract's; handlers stay thin: parse, call the service, respond."""

from authgate.web.routes.admin import admin_router
from authgate.web.routes.auth import auth_router
from authgate.web.routes.client import client_router
from authgate.web.routes.docs import add_docs
from authgate.web.routes.email import email_router
from authgate.web.routes.health import health_router
from authgate.web.routes.mfa import mfa_router
from authgate.web.routes.passkeys import passkeys_router
from authgate.web.routes.self_service import self_service_router

__all__ = [
    "add_docs",
    "admin_router",
    "auth_router",
    "client_router",
    "email_router",
    "health_router",
    "mfa_router",
    "passkeys_router",
    "self_service_router",
]
