"""Asymmetric signing keys for access tokens (EdDSA or ES256), and the JWKS that publishes
their public halves so other services can verify tokens offline.

With `AUTHGATE_JWT_ALGORITHM=HS256` (the default) none of this is used: tokens are signed
with a key derived from `AUTHGATE_SECRET_KEY` and the JWKS is empty.

- The signing key is a PEM file (`AUTHGATE_JWT_PRIVATE_KEY_FILE`). In the embedded setup one
  is generated once in the data dir (mode 0600), like the secret key; with `DATABASE_URL` set
  it must be given, since every worker and host must sign with the same key.
- `kid` is the key's RFC 7638 thumbprint, so it changes exactly when the key does.
- Rotation: move the old key's file to `AUTHGATE_JWT_PREVIOUS_KEY_FILES` (private or public
  PEM). Its tokens keep verifying, and it stays in the JWKS, until you remove it after the
  access TTL; nothing is ever signed with it again.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from authgate.config import AuthConfig, ConfigError
from authgate.datadir import one_host, write_once

__all__ = ["SigningKeys", "load_signing_keys"]

GENERATED_KEY_FILE = "jwt_signing_key.pem"

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey


@dataclass(frozen=True)
class SigningKeys:
    algorithm: str
    private_key: PrivateKey
    kid: str
    #: kid → public key, the current key first; every key a token may be verified with.
    public_keys: dict[str, PublicKey] = field(default_factory=dict)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [_jwk(key, kid, self.algorithm) for kid, key in self.public_keys.items()]}


def load_signing_keys(config: AuthConfig) -> SigningKeys | None:
    """The configured asymmetric keys, or None for HS256."""
    algorithm = config.jwt_algorithm
    if algorithm == "HS256":
        return None
    if config.jwt_private_key_file is not None:
        private = _load_private(config.jwt_private_key_file, algorithm)
    elif one_host(config):
        private = _generated_key(config.data_dir / GENERATED_KEY_FILE, algorithm)
    else:
        raise ConfigError(
            f"AUTHGATE_JWT_PRIVATE_KEY_FILE must be set when AUTHGATE_JWT_ALGORITHM={algorithm} "
            "and DATABASE_URL names a database server (every worker and host must sign with the "
            "same key)"
        )
    current = private.public_key()
    keys: dict[str, PublicKey] = {_thumbprint(current): current}
    for raw in config.jwt_previous_key_files.split(","):
        if raw.strip():
            old = _load_public(Path(raw.strip()), algorithm)
            keys.setdefault(_thumbprint(old), old)
    return SigningKeys(
        algorithm=algorithm, private_key=private, kid=_thumbprint(current), public_keys=keys
    )


def _check_type(key: object, algorithm: str, path: Path) -> None:
    if algorithm == "EdDSA":
        ok = isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey)
    else:
        ok = isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(
            key.curve, ec.SECP256R1
        )
    if not ok:
        want = "an Ed25519 key" if algorithm == "EdDSA" else "a P-256 (secp256r1) EC key"
        raise ConfigError(f"{path} is not {want}, as AUTHGATE_JWT_ALGORITHM={algorithm} needs")


def _load_private(path: Path, algorithm: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        # The type only: never echo key material from a parser message.
        raise ConfigError(f"cannot load the private key {path}: {type(exc).__name__}") from None
    _check_type(key, algorithm, path)
    assert isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey)
    return key


def _load_public(path: Path, algorithm: str) -> PublicKey:
    try:
        data = path.read_bytes()
        loaded: object = (
            serialization.load_pem_private_key(data, password=None).public_key()
            if b"PRIVATE KEY" in data
            else serialization.load_pem_public_key(data)
        )
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"cannot load the previous key {path}: {type(exc).__name__}") from None
    _check_type(loaded, algorithm, path)
    assert isinstance(loaded, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey)
    return loaded


def _generated_key(path: Path, algorithm: str) -> PrivateKey:
    """Create the key once (O_EXCL, mode 0600), so concurrent workers agree on one."""
    key: PrivateKey = (
        ed25519.Ed25519PrivateKey.generate()
        if algorithm == "EdDSA"
        else ec.generate_private_key(ec.SECP256R1())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _, created = write_once(path, pem, complete=lambda d: b"END PRIVATE KEY" in d)
    return key if created else _load_private(path, algorithm)


def _jwk(key: PublicKey, kid: str, algorithm: str) -> dict[str, Any]:
    jwk: dict[str, Any] = (
        OKPAlgorithm.to_jwk(key, as_dict=True)
        if isinstance(key, ed25519.Ed25519PublicKey)
        else ECAlgorithm.to_jwk(key, as_dict=True)
    )
    return {**jwk, "kid": kid, "alg": algorithm, "use": "sig"}


def _thumbprint(key: PublicKey) -> str:
    """RFC 7638: SHA-256 over the required members, sorted, no whitespace."""
    jwk = _jwk(key, "", "")
    members = ("crv", "kty", "x") if jwk["kty"] == "OKP" else ("crv", "kty", "x", "y")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
