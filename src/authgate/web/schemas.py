"""Request and response bodies (interface.md §2), nothing else."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from authgate.factors.emails import MAX_EMAIL_LENGTH, EmailProblem, canonical_email

__all__ = [
    "AccountDeletion",
    "EmailChangeConfirm",
    "EmailChangeRequest",
    "EmailVerificationRequest",
    "ErrorResponse",
    "HealthResponse",
    "LoginRequest",
    "LogoutRequest",
    "MessageResponse",
    "MfaStatusResponse",
    "MfaVerifyRequest",
    "PasskeyLoginRequest",
    "PasskeyRegisterRequest",
    "PasskeyRenameRequest",
    "PasskeyResponse",
    "PasskeysResponse",
    "PasswordChangeRequest",
    "PasswordConfirmation",
    "PasswordResetConfirm",
    "PasswordResetRequest",
    "ReadinessResponse",
    "RecoveryCodesResponse",
    "RefreshRequest",
    "RegisterRequest",
    "RevokedResponse",
    "SessionResponse",
    "SessionsResponse",
    "TokenResponse",
    "TotpConfirmRequest",
    "TotpEnrolmentResponse",
    "UserResponse",
]

# Generous caps: long enough for any real value, short enough that nothing expensive (argon2,
# a database lookup) ever runs on megabytes of attacker input. The password rules themselves
# are the services' (factors/password_rules.py): the routes turn their refusal into the 422.
EmailField = Annotated[
    str, Field(max_length=MAX_EMAIL_LENGTH, json_schema_extra={"format": "email"})
]
SecretField = Annotated[str, Field(max_length=1024)]
TokenField = Annotated[str, Field(min_length=1, max_length=512)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=False)


def _new_address(value: str) -> str:
    try:
        return canonical_email(value)[0]
    except EmailProblem as exc:
        raise ValueError(f"Invalid email address: {exc}") from None


#: An address a user is about to own: validated as registration does.
NewEmailField = Annotated[EmailField, AfterValidator(_new_address)]
NewPasswordField = Annotated[
    SecretField,
    Field(description="At least 8 characters and at most 72 bytes of UTF-8 (after NFKC)."),
]


class RegisterRequest(_Request):
    email: NewEmailField
    password: NewPasswordField


class LoginRequest(_Request):
    email: EmailField
    password: SecretField


class RefreshRequest(_Request):
    refresh_token: TokenField


class LogoutRequest(_Request):
    refresh_token: TokenField


class PasswordResetRequest(_Request):
    email: EmailField


class PasswordResetConfirm(_Request):
    token: TokenField
    new_password: SecretField


class EmailVerificationRequest(_Request):
    token: TokenField


class PasswordChangeRequest(_Request):
    current_password: SecretField
    new_password: NewPasswordField


class EmailChangeRequest(_Request):
    new_email: NewEmailField
    password: SecretField


class EmailChangeConfirm(_Request):
    token: TokenField


class AccountDeletion(_Request):
    password: SecretField


class SessionResponse(BaseModel):
    """One live session (the `sid` of its access tokens is `id`)."""

    id: str
    created_at: datetime
    #: The login or the latest refresh (an authenticated request writes nothing).
    last_active_at: datetime
    #: The session's absolute end; null when it has none.
    expires_at: datetime | None
    ip: str | None
    user_agent: str | None
    #: True for the session the request came with.
    current: bool


class SessionsResponse(BaseModel):
    sessions: list[SessionResponse]


class RevokedResponse(BaseModel):
    revoked: int


class UserResponse(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    email: str
    is_active: bool
    is_superuser: bool
    email_verified: bool


class TokenResponse(BaseModel):
    access_token: str
    refresh_token: str
    token_type: Literal["bearer"] = "bearer"  # noqa: S105 - the scheme name


class MessageResponse(BaseModel):
    message: str


class ErrorResponse(BaseModel):
    detail: str
    code: str


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadinessResponse(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, dict[str, Any]]


# --- second factors (contract §9) ----------------------------------------------------------

#: A TOTP code as people type it (spaces are dropped by the service), or a recovery code.
CodeField = Annotated[str, Field(min_length=1, max_length=64)]
#: What `navigator.credentials.create()/get()` returned, as `PublicKeyCredential.toJSON()`
#: gives it (WebAuthn Level 3 JSON: base64url strings). Parsed by py_webauthn.
CredentialField = Annotated[dict[str, Any], Field(description="PublicKeyCredential.toJSON()")]
PasskeyNameField = Annotated[str, Field(min_length=1, max_length=64)]


class PasswordConfirmation(_Request):
    """A step that changes the second factors asks for the password again."""

    password: SecretField


class TotpEnrolmentResponse(BaseModel):
    secret: str = Field(description="Base32, for typing into an authenticator app.")
    otpauth_uri: str
    qr_svg: str = Field(description="The otpauth URI as a QR code, an SVG document.")


class TotpConfirmRequest(_Request):
    code: CodeField


class RecoveryCodesResponse(BaseModel):
    recovery_codes: list[str] = Field(description="Shown once; each works once.")


class MfaVerifyRequest(_Request):
    """Exactly one of `code` (TOTP) and `recovery_code`."""

    code: CodeField | None = None
    recovery_code: CodeField | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> MfaVerifyRequest:
        if (self.code is None) == (self.recovery_code is None):
            raise ValueError("give exactly one of code and recovery_code")
        return self


class MfaStatusResponse(BaseModel):
    totp: Literal["none", "pending", "enabled"]
    recovery_codes_remaining: int
    passkeys: int


class PasskeyRegisterRequest(_Request):
    credential: CredentialField
    name: PasskeyNameField


class PasskeyLoginRequest(_Request):
    credential: CredentialField


class PasskeyRenameRequest(_Request):
    name: PasskeyNameField


class PasskeyResponse(BaseModel):
    id: int
    name: str
    created_at: datetime
    last_used_at: datetime | None


class PasskeysResponse(BaseModel):
    passkeys: list[PasskeyResponse]
