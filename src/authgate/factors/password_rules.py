"""Password rules (interface §8, contract §4): at least 8 characters and at most 72 bytes of
UTF-8, any characters, never truncated, and not one of the 30,000 most common passwords
(case-folded). Passwords are NFKC-normalised first, on every path (register, login, reset), so
the same password typed on two keyboards is the same password.

The services enforce these rules (`check_new_password`) wherever a password is set; the HTTP
schemas only cap the length of what they parse.
"""

from __future__ import annotations

import functools
import gzip
import unicodedata
from importlib import resources

from authgate.errors import PasswordRejected

__all__ = [
    "MAX_PASSWORD_BYTES",
    "MIN_PASSWORD_CHARS",
    "check_new_password",
    "common_passwords",
    "normalise",
    "password_problem",
]

MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_BYTES = 72


def normalise(password: str) -> str:
    return unicodedata.normalize("NFKC", password)


def password_problem(password: str) -> str | None:
    """Why a new password is refused, or None. Expects the normalised password."""
    if len(password) < MIN_PASSWORD_CHARS:
        return f"The password must be at least {MIN_PASSWORD_CHARS} characters long."
    try:
        size = len(password.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates cannot be stored or typed again
        return "The password contains characters that cannot be encoded."
    if size > MAX_PASSWORD_BYTES:
        return f"The password must be at most {MAX_PASSWORD_BYTES} bytes in UTF-8."
    if password.casefold() in common_passwords():
        # NIST SP 800-63B §3.1.1.2: refuse values from lists of commonly used passwords.
        return "This password is one of the most commonly used passwords; choose another."
    return None


@functools.cache
def common_passwords() -> frozenset[str]:
    """The 30,000 most common passwords, NFKC-normalised and case-folded (shipped data; see
    scripts/make-blocklist for where it comes from)."""
    data = resources.files("authgate.factors").joinpath("data/common-passwords.txt.gz").read_bytes()
    return frozenset(gzip.decompress(data).decode().split("\n")) - {""}


def check_new_password(password: str) -> str:
    """The normalised password, or `PasswordRejected` saying which rule it breaks."""
    password = normalise(password)
    problem = password_problem(password)
    if problem is not None:
        raise PasswordRejected(problem)
    return password
