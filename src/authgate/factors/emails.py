"""Email addresses: validation and the key accounts are unique by.

The key (`email_key`) is the address as email-validator normalises it, with two case rules:

- the domain in its ASCII (IDNA 2008 / punycode) form, lower case: `Bücher.DE` and
  `xn--bcher-kva.de` are one domain, `straße.de` (`xn--strae-oqa.de`) and `strasse.de` two;
- the local part (NFC) lower-cased with Python's `str.lower()` (Unicode's default lower-case
  mapping, final sigma included, no locale): `Ann` and `ann` are one mailbox, `ß` stays `ß`
  (case folding would make it `ss`), and nothing else is merged.

So two addresses share a key only when their normalised forms are equal after `str.lower()`.
Compatibility forms are not merged: `sam` spelt with a fullwidth s (U+FF53), with a long s
(U+017F) and with a plain s are three different local parts to a mail server. Since such a
look-alike would be a second account that looks like someone else's, a NEW address
(registration, `users create`) whose NFKC form differs from its normalised (NFC) form is
refused. Login and the reset request do not refuse them: an account registered before this
rule keeps working with the address it has.

Migration 0003 recomputed the keys of existing rows with a frozen copy of this rule; a change
to the rule here needs a migration of its own.
"""

from __future__ import annotations

import unicodedata

from email_validator import EmailNotValidError, ValidatedEmail, validate_email

__all__ = ["MAX_EMAIL_LENGTH", "EmailProblem", "canonical_email", "email_key", "login_key"]

#: The width of the `email` and `email_key` columns, and the longest text looked at.
MAX_EMAIL_LENGTH = 320


class EmailProblem(ValueError):
    pass


def canonical_email(raw: str) -> tuple[str, str]:
    """(address to store, unique key) of a NEW address; `EmailProblem` when it is refused.

    Refused: anything email-validator refuses (deliverability, DNS, is not checked:
    registration must not depend on the network), and an address with compatibility
    characters (its NFKC form differs from its NFC form).
    """
    result = _validated(raw)
    address = result.normalized
    if unicodedata.normalize("NFKC", address) != address:
        raise EmailProblem(
            "The email address contains compatibility characters (such as fullwidth letters, "
            "ligatures or the long s); type it with the ordinary characters."
        )
    return address, _key(result)


def email_key(address: str) -> str:
    """The unique key of a valid address (new or existing); `EmailProblem` when it is not."""
    return _key(_validated(address))


def login_key(raw: str) -> str | None:
    """The key a login or reset request names, or None when it names no possible account.

    Unlike `canonical_email`, an address with compatibility characters is not refused: it may
    belong to an account registered before they were.
    """
    try:
        return email_key(raw)
    except EmailProblem:
        return None


def _validated(raw: str) -> ValidatedEmail:
    if len(raw) > MAX_EMAIL_LENGTH:
        raise EmailProblem("The email address is too long.")
    try:
        return validate_email(raw, check_deliverability=False)
    except EmailNotValidError as exc:
        raise EmailProblem(str(exc)) from None


def _key(result: ValidatedEmail) -> str:
    key = result.local_part.lower() + "@" + result.ascii_domain.lower()
    # email-validator caps the address at 254 UTF-8 bytes, and no character's lower case has
    # more characters than its UTF-8 form has bytes, so this cannot trigger; it stays so that
    # a key can never be wider than its column (a database error, not a clean 4xx).
    if len(key) > MAX_EMAIL_LENGTH:
        raise EmailProblem("The email address is too long.")
    return key
