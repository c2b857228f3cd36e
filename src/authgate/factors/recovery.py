"""Recovery codes: the way back in when the authenticator app is lost.

A set is 10 codes, each 80 random bits (16 base32 characters from `secrets`, shown as
`xxxx-xxxx-xxxx-xxxx`). They are shown once and stored only as digests.

The digest is plain SHA-256 of the normalised code, under a label of its own. Why not a salted
slow hash or an HMAC: 80 random bits cannot be guessed from a leaked digest (2^80 SHA-256
evaluations per code), so neither a salt nor a work factor adds anything, while an unsalted
digest lets the database find and spend a code in one conditional UPDATE on a unique index
(single use under concurrency without reading codes into Python, and no comparison of secrets
in Python at all). An HMAC under the secret key would also tie every code to that key, so a key
rotation would silently invalidate them.

Typed input is forgiving: case, dashes and whitespace are ignored; anything that is not then
16 base32 characters is no code (it matches nothing, and costs the same lookup).
"""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["CODE_COUNT", "digest_code", "new_codes", "normalise"]

CODE_COUNT = 10
_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"  # RFC 4648 base32, lower case
_LENGTH = 16  # 16 x 5 bits = 80 bits
_GROUP = 4
_LABEL = b"authgate recovery code\x00"


def new_codes(count: int = CODE_COUNT) -> list[str]:
    """`count` fresh codes, as shown to the user (`xxxx-xxxx-xxxx-xxxx`); all distinct."""
    codes: list[str] = []
    while len(codes) < count:
        raw = "".join(secrets.choice(_ALPHABET) for _ in range(_LENGTH))
        shown = "-".join(raw[i : i + _GROUP] for i in range(0, _LENGTH, _GROUP))
        if shown not in codes:  # a repeat of 80 random bits does not happen; cheap to rule out
            codes.append(shown)
    return codes


def normalise(typed: str) -> str:
    """The code as stored: lower case, without dashes or whitespace. What is not a code
    comes back as it is, which digests to nothing stored."""
    return "".join(typed.split()).replace("-", "").lower()


def digest_code(typed: str) -> bytes:
    """The stored digest of a code as typed (normalised first)."""
    return hashlib.sha256(_LABEL + normalise(typed).encode("utf-8", "surrogatepass")).digest()
