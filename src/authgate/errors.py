"""Errors that carry their own wire format.

Every error the service raises on purpose is an `AuthError`; the HTTP edge renders it as
`{"detail": error.detail, "code": error.code}` with `error.status_code`. Messages are fixed
strings: no message ever interpolates a secret, a token or a password.

    AuthError
    ├── BadRequest (400)
    │   ├── InvalidOneTimeToken          invalid_token
    │   ├── InvalidCode                  invalid_code
    │   ├── PasskeyRejected              passkey_rejected
    │   └── PasswordRequired             password_required
    ├── Unauthorized (401)
    │   ├── InvalidCredentials           invalid_credentials
    │   ├── NotAuthenticated             not_authenticated
    │   ├── InvalidRefreshToken          invalid_refresh_token
    │   ├── MfaRequired                  mfa_required
    │   └── RefreshTokenReused           refresh_token_reused
    ├── Forbidden (403)
    │   └── CsrfFailed                   csrf_failed
    ├── Conflict (409)
    │   └── EmailTaken                   email_taken
    ├── PayloadTooLarge (413)            payload_too_large
    ├── PasswordRejected (422)           password_rejected
    ├── RateLimited (429)                rate_limited
    ├── NotConfigured (501)              not_configured
    └── ServiceUnavailable (503)         service_unavailable
        └── Busy                         busy
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "BadRequest",
    "Busy",
    "Conflict",
    "CsrfFailed",
    "EmailTaken",
    "Forbidden",
    "InvalidCode",
    "InvalidCredentials",
    "InvalidOneTimeToken",
    "InvalidRefreshToken",
    "MfaRequired",
    "NotAuthenticated",
    "NotConfigured",
    "NotFound",
    "PasskeyRejected",
    "PasswordRejected",
    "PasswordRequired",
    "PayloadTooLarge",
    "RateLimited",
    "RefreshTokenReused",
    "ServiceUnavailable",
    "Unauthorized",
    "WrongPassword",
]


class AuthError(Exception):
    status_code: int = 400
    code: str = "bad_request"
    detail: str = "Bad request."

    def __init__(self, detail: str | None = None) -> None:
        if detail is not None:
            self.detail = detail
        super().__init__(self.detail)


class BadRequest(AuthError):
    pass


class PasskeyRejected(BadRequest):
    """A registration answer that is malformed, fails verification, or comes without a live
    challenge of this browser; or a sign-in answer that is not even a credential."""

    code = "passkey_rejected"
    detail = "The passkey response is not valid; start again."


class PasswordRequired(BadRequest):
    code = "password_required"
    detail = "Confirm with your password to remove a passkey."


class InvalidOneTimeToken(BadRequest):
    code = "invalid_token"
    detail = "The token is invalid, expired or already used."


class InvalidCode(BadRequest):
    """A second-factor code that is wrong, malformed, already used or of an earlier step:
    one answer for all (which of them it was is no business of the sender's)."""

    code = "invalid_code"
    detail = "The code is invalid or has already been used."


class Unauthorized(AuthError):
    status_code = 401
    code = "not_authenticated"
    detail = "Not authenticated."


class InvalidCredentials(Unauthorized):
    # One message for an unknown email, a wrong password and an inactive account.
    code = "invalid_credentials"
    detail = "Invalid email or password."


class NotAuthenticated(Unauthorized):
    pass


class InvalidRefreshToken(Unauthorized):
    code = "invalid_refresh_token"
    detail = "The refresh token is invalid, expired or revoked."


class MfaRequired(Unauthorized):
    """An `aal1` session of a user with a second factor, on a route other than the second
    step, logout and the passkey assertion (contract §9)."""

    code = "mfa_required"
    detail = "A second factor is required: complete the second step of the sign-in."


class RefreshTokenReused(Unauthorized):
    code = "refresh_token_reused"
    detail = "The refresh token was already used; the session has been revoked."


class Forbidden(AuthError):
    status_code = 403
    code = "forbidden"
    detail = "Forbidden."


class CsrfFailed(Forbidden):
    code = "csrf_failed"
    detail = "Missing or invalid CSRF token."


class WrongPassword(Forbidden):
    code = "wrong_password"
    detail = "The password is wrong."


class NotFound(AuthError):
    status_code = 404
    code = "not_found"
    detail = "Not found."


class Conflict(AuthError):
    status_code = 409
    code = "conflict"
    detail = "Conflict."


class EmailTaken(Conflict):
    code = "email_taken"
    detail = "This email is already registered."


class PayloadTooLarge(AuthError):
    status_code = 413
    code = "payload_too_large"
    detail = "The request body is too large."


class PasswordRejected(AuthError):
    """A new password breaks a password rule; `detail` says which (a fixed sentence of
    `password_problem`, never the password). The routes answer it as the request body's 422."""

    status_code = 422
    code = "password_rejected"
    detail = "The password does not meet the password rules."


class RateLimited(AuthError):
    status_code = 429
    code = "rate_limited"
    detail = "Too many requests; try again later."

    def __init__(self, retry_after: int, detail: str | None = None) -> None:
        self.retry_after = max(1, retry_after)
        super().__init__(detail)


class NotConfigured(AuthError):
    status_code = 501
    code = "not_configured"
    detail = "This feature is not configured."


class ServiceUnavailable(AuthError):
    status_code = 503
    code = "service_unavailable"
    detail = "The service is temporarily unavailable; try again shortly."

    def __init__(self, detail: str | None = None, retry_after: int = 1) -> None:
        self.retry_after = retry_after
        super().__init__(detail)


class Busy(ServiceUnavailable):
    """More password hashes are waiting than can be done within the wait budget."""

    code = "busy"
    detail = "The service is busy; try again shortly."
