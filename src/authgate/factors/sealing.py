"""Secrets that must be read back (TOTP secrets), sealed at rest with AES-256-GCM.

The key is derived from the secret key with HKDF-SHA256 (RFC 5869) under a label of its own,
so it is independent of every other subkey. `AUTHGATE_SECRET_KEY_PREVIOUS` keys still open
what they sealed (a key rotation in progress); `open` says when one did, so the caller can
seal the value again under the current key. The associated data binds a sealed value to its
row (the user id): a value copied into another user's row does not open.

Layout: version byte (1) | 12-byte random nonce | ciphertext and 16-byte tag.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["SealError", "Sealer"]

_VERSION = b"\x01"
_NONCE_BYTES = 12


class SealError(Exception):
    """A sealed value that no key we hold opens (wrong key, tampered or truncated)."""


def _derive(secret: bytes, label: bytes) -> AESGCM:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(secret)
    return AESGCM(key)


class Sealer:
    def __init__(self, secret: bytes, previous: Sequence[bytes] = (), *, label: bytes) -> None:
        """`label` separates purposes: the same secret key gives each label its own key."""
        self._keys = [_derive(key, label) for key in (secret, *previous)]

    def seal(self, plaintext: bytes, context: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return _VERSION + nonce + self._keys[0].encrypt(nonce, plaintext, context)

    def open(self, sealed: bytes, context: bytes) -> tuple[bytes, bool]:
        """(plaintext, True when a previous key opened it: seal it again)."""
        if len(sealed) < 1 + _NONCE_BYTES + 16 or sealed[:1] != _VERSION:
            raise SealError("not a sealed value")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        for index, key in enumerate(self._keys):
            try:
                return key.decrypt(nonce, body, context), index > 0
            except InvalidTag:
                continue
        raise SealError("no key opens this value")
