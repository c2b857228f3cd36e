"""authgate: email-and-password authentication for Python, as a service or a library.

from authgate import AuthConfig, create_app
app = create_app(AuthConfig())
"""

from authgate.app import AuthGate, create_app
from authgate.config import AuthConfig
from authgate.errors import (
    AuthError,
    CsrfFailed,
    EmailTaken,
    InvalidCredentials,
    InvalidOneTimeToken,
    InvalidRefreshToken,
    NotAuthenticated,
    NotConfigured,
    RateLimited,
    RefreshTokenReused,
    ServiceUnavailable,
)
from authgate.principal import Principal
from authgate.store.models import User
from authgate.web.deps import CurrentUser, current_user

__all__ = [
    "AuthConfig",
    "AuthError",
    "AuthGate",
    "CsrfFailed",
    "CurrentUser",
    "EmailTaken",
    "InvalidCredentials",
    "InvalidOneTimeToken",
    "InvalidRefreshToken",
    "NotAuthenticated",
    "NotConfigured",
    "Principal",
    "RateLimited",
    "RefreshTokenReused",
    "ServiceUnavailable",
    "User",
    "create_app",
    "current_user",
]
