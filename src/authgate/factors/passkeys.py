"""Passkeys (WebAuthn Level 2, py_webauthn): the relying party authgate is to browsers.

The two ceremonies, each in two halves: options for `navigator.credentials.create()/get()`
(as `options_to_json` writes them, which `PublicKeyCredential.parseCreationOptionsFromJSON`
and `parseRequestOptionsFromJSON` read), and the verification of what the browser answered
(`PublicKeyCredential.toJSON()`). Nothing here stores anything or knows about HTTP: the
service keeps the challenge, the store the credential.

Every verification failure is a `CeremonyFailed` carrying a fixed reason word; the library's
own messages (which quote origins, counters and challenges) never leave this module.

py_webauthn is imported by the function that first needs it, not with this module: with its
CBOR, ASN.1 and pyOpenSSL parts it adds about 5 MB to every worker, and most workers of most
deployments never see a passkey ceremony (issue 16, memory per worker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from authgate.config import AuthConfig

if TYPE_CHECKING:
    from webauthn.helpers.structs import (
        AuthenticationCredential,
        CredentialDeviceType,
        RegistrationCredential,
    )

__all__ = [
    "TIMEOUT_MS",
    "Assertion",
    "CeremonyFailed",
    "NewCredential",
    "Options",
    "authentication_options",
    "parse_assertion",
    "registration_options",
    "rp_id",
    "rp_origins",
    "user_handle",
    "verify_assertion",
    "verify_registration",
]

#: How long a browser should let the user take; the challenge lives as long (contract §9).
TIMEOUT_MS = 300_000


class CeremonyFailed(Exception):
    """What the browser sent is not a valid answer to the ceremony. `reason` is a fixed word
    (malformed, not_verified) for events; the exception text never quotes the input."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def rp_id(config: AuthConfig) -> str:
    """The relying party id: `AUTHGATE_WEBAUTHN_RP_ID`, else the host of the public URL."""
    return config.webauthn_rp_id or (urlsplit(config.public_url).hostname or "localhost")


def rp_origins(config: AuthConfig) -> list[str]:
    """The origins a ceremony may come from: `AUTHGATE_WEBAUTHN_ORIGINS`, else the public
    URL's origin."""
    listed = [o.strip().rstrip("/") for o in config.webauthn_origins.split(",") if o.strip()]
    if listed:
        return listed
    parts = urlsplit(config.public_url)
    return [f"{parts.scheme}://{parts.netloc}"]


def user_handle(user_id: int) -> bytes:
    """The WebAuthn user handle of an account: its row id as 8 big-endian bytes.

    Not the email (WebAuthn §14.6.1: no personal data in the handle). Stable across secret-key
    rotations, unlike an HMAC of the id, so a passkey keeps matching its account. The
    credential id, not the handle, is what finds the account at sign-in; the handle a
    discoverable assertion returns must then name that same account (§7.2 step 6)."""
    return user_id.to_bytes(8, "big")


@dataclass(frozen=True, slots=True)
class Options:
    """Options for the browser (JSON text) and the challenge they carry (to keep)."""

    json: str
    challenge: bytes


@dataclass(frozen=True, slots=True)
class NewCredential:
    """A verified registration: what the store keeps of the new passkey."""

    credential_id: bytes
    public_key: bytes
    sign_count: int
    #: "single_device" or "multi_device" (a synced passkey).
    device_type: str
    backed_up: bool
    transports: str | None


@dataclass(frozen=True, slots=True)
class Assertion:
    """A parsed, not yet verified, sign-in answer: the credential id finds the passkey."""

    parsed: AuthenticationCredential
    credential_id: bytes
    user_handle: bytes | None


def registration_options(
    config: AuthConfig, *, user_id: int, email: str, exclude: list[bytes]
) -> Options:
    """Creation options: a discoverable credential (resident key required) with user
    verification, no attestation, never one of the account's existing credentials again."""
    from webauthn import generate_registration_options, options_to_json
    from webauthn.helpers.structs import (
        AttestationConveyancePreference,
        AuthenticatorSelectionCriteria,
        PublicKeyCredentialDescriptor,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )

    options = generate_registration_options(
        rp_id=rp_id(config),
        rp_name=config.product_name,
        user_id=user_handle(user_id),
        user_name=email,
        user_display_name=email,
        timeout=TIMEOUT_MS,
        attestation=AttestationConveyancePreference.NONE,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[PublicKeyCredentialDescriptor(id=c) for c in exclude],
    )
    return Options(options_to_json(options), options.challenge)


def authentication_options(config: AuthConfig) -> Options:
    """Request options for a discoverable credential: no allowCredentials (the user names no
    account), user verification required."""
    from webauthn import generate_authentication_options, options_to_json
    from webauthn.helpers.structs import UserVerificationRequirement

    options = generate_authentication_options(
        rp_id=rp_id(config),
        timeout=TIMEOUT_MS,
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return Options(options_to_json(options), options.challenge)


def _parsed_registration(credential: dict[str, Any]) -> RegistrationCredential:
    from webauthn.helpers import parse_registration_credential_json

    try:
        return parse_registration_credential_json(credential)
    except Exception:
        # Any parse failure of client input is the client's (a 400), whatever the library
        # raised for it (InvalidJSONStructure, InvalidRegistrationResponse, a binascii error).
        raise CeremonyFailed("malformed") from None


def verify_registration(
    config: AuthConfig, credential: dict[str, Any], challenge: bytes
) -> NewCredential:
    """Verify a `navigator.credentials.create()` answer against `challenge`, the RP id and
    the allowed origins, with user presence and verification required."""
    from webauthn import verify_registration_response
    from webauthn.helpers.structs import AuthenticatorTransport

    parsed = _parsed_registration(credential)
    try:
        verified = verify_registration_response(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=rp_id(config),
            expected_origin=rp_origins(config),
            require_user_presence=True,
            require_user_verification=True,
        )
    except Exception:
        # Pure computation on client bytes (CBOR, COSE keys, signatures): whatever fails in
        # it, the answer is not a valid registration. The library's message quotes the input.
        raise CeremonyFailed("not_verified") from None
    transports = parsed.response.transports or []
    # Transports worth keeping as a hint for `excludeCredentials`: the enum's own values.
    known = {t.value for t in AuthenticatorTransport}
    kept = sorted({t.value for t in transports if t.value in known})
    return NewCredential(
        credential_id=verified.credential_id,
        public_key=verified.credential_public_key,
        sign_count=verified.sign_count,
        device_type=_device_type(verified.credential_device_type),
        backed_up=verified.credential_backed_up,
        transports=",".join(kept)[:128] or None,
    )


def parse_assertion(credential: dict[str, Any]) -> Assertion:
    """Parse a `navigator.credentials.get()` answer; `CeremonyFailed("malformed")` when it is
    not one."""
    from webauthn.helpers import parse_authentication_credential_json

    try:
        parsed = parse_authentication_credential_json(credential)
    except Exception:
        raise CeremonyFailed("malformed") from None
    return Assertion(parsed, parsed.raw_id, parsed.response.user_handle)


def verify_assertion(
    config: AuthConfig,
    assertion: Assertion,
    *,
    challenge: bytes,
    public_key: bytes,
    sign_count: int,
) -> tuple[int, str]:
    """Verify the assertion's signature with the stored public key, against `challenge`, the
    RP id and the allowed origins, user verification required, and a counter that grows (or
    stays 0 for authenticators without one). (the new counter, the device type)."""
    from webauthn import verify_authentication_response

    try:
        verified = verify_authentication_response(
            credential=assertion.parsed,
            expected_challenge=challenge,
            expected_rp_id=rp_id(config),
            expected_origin=rp_origins(config),
            credential_public_key=public_key,
            credential_current_sign_count=sign_count,
            require_user_verification=True,
        )
    except Exception:
        raise CeremonyFailed("not_verified") from None
    return verified.new_sign_count, _device_type(verified.credential_device_type)


def _device_type(value: CredentialDeviceType) -> str:
    from webauthn.helpers.structs import CredentialDeviceType

    return "multi_device" if value == CredentialDeviceType.MULTI_DEVICE else "single_device"
