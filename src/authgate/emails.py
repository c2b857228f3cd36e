"""Email addresses: validation and the case-insensitive key accounts are unique by."""

from __future__ import annotations

import unicodedata

from email_validator import EmailNotValidError, validate_email

__all__ = ["EmailProblem", "canonical_email", "email_key"]

MAX_EMAIL_LENGTH = 320


class EmailProblem(ValueError):
    pass


def canonical_email(raw: str) -> tuple[str, str]:
    """(address to store, unique key) of a new address; `EmailProblem` when it is not valid.

    email-validator normalises the domain (IDNA, lower case) and Unicode (NFC); the key lower-
    cases the whole address, so `Ann@Example.com` and `ann@example.com` are one account.
    Deliverability (DNS) is not checked: registration must not depend on the network.
    """
    if len(raw) > MAX_EMAIL_LENGTH:
        raise EmailProblem("The email address is too long.")
    try:
        result = validate_email(raw, check_deliverability=False)
    except EmailNotValidError as exc:
        raise EmailProblem(str(exc)) from None
    return result.normalized, email_key(result.normalized)


def email_key(address: str) -> str:
    # NFKC then case-fold: the fullwidth spelling of "Ann@example.com" and the plain one are one
    # account rather than two that look alike.
    return unicodedata.normalize("NFKC", address).casefold()


def login_key(raw: str) -> str | None:
    """The key a login attempt names, or None when it names no possible account."""
    try:
        return canonical_email(raw)[1]
    except EmailProblem:
        return None
