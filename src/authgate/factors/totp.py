"""Time-based one-time passwords (RFC 6238) for an authenticator app: SHA-1, 6 digits, 30 s.

The secret is 160 random bits (RFC 4226 §4 recommends 160), given to the user as base32 and as
an `otpauth://` URI in a QR code. A code is accepted for the time step it was made for or one
step either side (RFC 6238 §5.2: one step of drift); which step matched is returned, so the
caller can accept each step once (`store/factors.accept_step`: a replay, even within the
window, is refused).

The QR code is an SVG document made here by segno (no network): paths with presentation
attributes only, no `style` attribute and no script, so a page under a CSP without
'unsafe-inline' can insert it as it is. segno is imported when a QR code is first drawn (a
setup is rare; the worker that never draws one does not carry it).
"""

from __future__ import annotations

import hmac
import io
import re
from datetime import datetime

import pyotp

__all__ = [
    "DIGITS",
    "STEP_SECONDS",
    "matching_step",
    "new_secret",
    "otpauth_uri",
    "qr_svg",
    "step_at",
]

STEP_SECONDS = 30
DIGITS = 6
#: One step of drift each way (RFC 6238 §5.2).
DRIFT_STEPS = 1

_SIX_DIGITS = re.compile(r"[0-9]{6}")


def new_secret() -> str:
    """160 random bits as base32 (32 characters), from `secrets`."""
    return pyotp.random_base32(length=32)


def otpauth_uri(secret: str, email: str, issuer: str) -> str:
    """The key URI authenticator apps read (Google Authenticator's Key Uri Format)."""
    return pyotp.TOTP(secret, digits=DIGITS, interval=STEP_SECONDS).provisioning_uri(
        name=email, issuer_name=issuer
    )


def qr_svg(uri: str) -> str:
    """`uri` as a QR code, an SVG document without XML declaration, style attribute or script."""
    import segno

    out = io.BytesIO()
    segno.make(uri, error="m").save(
        out, kind="svg", scale=4, border=4, xmldecl=False, svgns=True, nl=False
    )
    return out.getvalue().decode("ascii")


def step_at(now: datetime) -> int:
    """The RFC 6238 time step of `now` (Unix time // 30)."""
    return int(now.timestamp()) // STEP_SECONDS


def normalise_code(typed: str) -> str | None:
    """The six digits of a code as people type it (spaces dropped), or None."""
    code = "".join(typed.split())
    return code if _SIX_DIGITS.fullmatch(code) else None


def matching_step(secret: str, typed: str, now: datetime) -> int | None:
    """The time step (now's, or one either side) whose code is `typed`, or None.

    Every candidate is computed and compared in constant time, with no early exit: how long
    this takes says nothing about which step (if any) matched."""
    code = normalise_code(typed)
    # A value that cannot match still goes through the same work (against a fixed
    # non-code), so a malformed code costs what a wrong one does.
    candidate = (code if code is not None else "x" * DIGITS).encode("ascii")
    totp = pyotp.TOTP(secret, digits=DIGITS, interval=STEP_SECONDS)
    current = step_at(now)
    found: int | None = None
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        # (A step before 1970 has no code: only a clock set to the epoch gets there.)
        expected = totp.generate_otp(step).encode("ascii") if step >= 0 else b"-" * DIGITS
        if hmac.compare_digest(expected, candidate) and found is None:
            found = step
    return found if code is not None else None
