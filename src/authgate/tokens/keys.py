"""What a token is: signed access JWTs, opaque one-time secrets and their digests, CSRF values.

Where a token travels (cookie, header, body) is `transport.py`'s business, not this module's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jwt

from authgate.principal import PASSWORD, Level

if TYPE_CHECKING:
    from authgate.tokens.jwks import SigningKeys

__all__ = ["AccessClaims", "Keys", "TokenError", "digest", "new_opaque_token", "new_session_id"]

ALGORITHM = "HS256"
#: RFC 9068 media type of JWT access tokens; a JWT without it is not an access token.
ACCESS_TOKEN_TYP = "at+jwt"  # a media type  # noqa: S105  # nosec B105
OPAQUE_TOKEN_BYTES = 32  # 256 bits
#: Domain separation of the refresh-grace successors: their subkey and every message.
_SUCCESSOR_LABEL = b"authgate/refresh-successor/v1"
#: Ours are about 350 characters; anything much longer is not worth parsing.
MAX_ACCESS_TOKEN_LENGTH = 2048
#: Header parameters that would let a token pick its own key or demand extensions.
_FORBIDDEN_HEADERS = frozenset({"jku", "jwk", "x5u", "x5c", "crit"})
_REQUIRED_CLAIMS = ("sub", "sid", "iat", "exp", "jti", "iss", "aud")


class TokenError(Exception):
    """An access token that is not acceptable. The reason is for logs, never a secret."""


@dataclass(frozen=True, slots=True)
class AccessClaims:
    user_id: int
    session_id: str
    issued_at: int
    expires_at: int
    jti: str
    #: The session's assurance when the token was issued (`PASSWORD` for tokens without the
    #: claims, issued before second factors existed).
    level: Level = PASSWORD


#: How many verified access tokens a worker remembers (`Keys.verify_access`): about 200
#: bytes each.
VERIFIED_CACHE = 4096


def new_opaque_token() -> str:
    return secrets.token_urlsafe(OPAQUE_TOKEN_BYTES)


def new_session_id() -> str:
    return secrets.token_hex(16)


def digest(token: str) -> bytes:
    """SHA-256 of an opaque token: what the database stores and looks up.

    The tokens carry 256 bits of randomness, so an unsalted fast hash is enough to make a
    leaked table useless; lookups are by digest, so no comparison of secrets happens in Python.
    """
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Keys:
    """Key material derived from the configured secret, one subkey per purpose.

    `previous` secrets (a rotation in progress) verify but never sign, so access tokens and
    CSRF values issued before the rotation keep working until they expire.
    """

    def __init__(
        self,
        secret: bytes,
        *,
        issuer: str,
        audience: str,
        previous: Sequence[bytes] = (),
        signing: SigningKeys | None = None,
    ) -> None:
        self._signing = signing
        self.algorithm = signing.algorithm if signing is not None else ALGORITHM
        self._jwt_key = _derive(secret, b"authgate/access-token/v1")
        self._csrf_key = _derive(secret, b"authgate/csrf/v1")
        self._jwt_verify_keys = [self._jwt_key] + [
            _derive(old, b"authgate/access-token/v1") for old in previous
        ]
        self._csrf_verify_keys = [self._csrf_key] + [
            _derive(old, b"authgate/csrf/v1") for old in previous
        ]
        #: The refresh-grace successor key (contract §8), current first.
        self._successor_keys = [_derive(key, _SUCCESSOR_LABEL) for key in (secret, *previous)]
        self.issuer = issuer
        self.audience = audience
        #: Access tokens this worker has verified: SHA-256 of the token -> (claims, nbf).
        #: See `verify_access`.
        self._verified: dict[bytes, tuple[AccessClaims, int]] = {}

    # --- access tokens ---------------------------------------------------------------

    def issue_access(
        self, *, user_id: int, session_id: str, now: datetime, ttl: int, level: Level = PASSWORD
    ) -> str:
        iat = int(now.timestamp())
        claims: dict[str, Any] = {
            "sub": str(user_id),
            "sid": session_id,
            "iat": iat,
            "nbf": iat,
            "exp": iat + ttl,
            "jti": secrets.token_urlsafe(12),
            "iss": self.issuer,
            "aud": self.audience,
            "aal": f"aal{level.aal}",
            "amr": list(level.amr),
        }
        if level.pending:
            claims["mfa"] = "pending"
        if self._signing is not None:
            return jwt.encode(
                claims,
                self._signing.private_key,
                algorithm=self._signing.algorithm,
                headers={"typ": ACCESS_TOKEN_TYP, "kid": self._signing.kid},
            )
        return jwt.encode(
            claims, self._jwt_key, algorithm=ALGORITHM, headers={"typ": ACCESS_TOKEN_TYP}
        )

    def verify_access(self, token: str, *, now: datetime) -> AccessClaims:
        """The claims of a valid access token at `now`, else `TokenError`.

        What does not depend on the time (signature, header, claim shapes) is a pure function
        of the token and this worker's keys, so it is worked out once per token: a client
        sends the same token with every request until it expires, and the signature check
        and JSON parsing were a fifth of GET /me (bench/RESULTS.md, issue 16). The tokens
        verified are remembered by their SHA-256 (never the token itself, and never compared
        as text), at most `VERIFIED_CACHE` of them, oldest dropped first; a token that fails
        is never remembered. The time claims are checked on every call, against the caller's
        clock. Revocation is not a property of the token: the caller checks the session on
        every request whatever this returns (`SessionService.authenticate`)."""
        if len(token) > MAX_ACCESS_TOKEN_LENGTH or not token.isascii():
            raise TokenError("malformed token")
        key = hashlib.sha256(token.encode("ascii")).digest()
        known = self._verified.get(key)
        if known is None:
            known = self._verify_signed(token)
            if len(self._verified) >= VERIFIED_CACHE:
                del self._verified[next(iter(self._verified))]
            self._verified[key] = known
        claims, nbf = known
        ts = now.timestamp()
        if ts >= claims.expires_at:
            raise TokenError("expired")
        if nbf > ts or claims.issued_at > ts + 60:
            raise TokenError("not yet valid")
        return claims

    def _verify_signed(self, token: str) -> tuple[AccessClaims, int]:
        """Everything of `verify_access` but the time: (the claims, nbf)."""
        if self._signing is None:
            # HS256: one parse; the header rules are checked on the verified header.
            header, claims = self._decode(token)
            self._check_header(header)
            if "kid" in header:
                raise TokenError("forbidden header parameter")
        else:
            try:
                header = jwt.get_unverified_header(token)
            except jwt.PyJWTError as exc:
                raise TokenError("malformed token") from exc
            self._check_header(header)
            kid = header.get("kid")
            public = self._signing.public_keys.get(kid) if isinstance(kid, str) else None
            if public is None:
                raise TokenError("unknown key id")
            _, claims = self._decode_with(token, public)
        exp, iat, nbf = claims["exp"], claims["iat"], claims.get("nbf", claims["iat"])
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (exp, iat, nbf)):
            raise TokenError("malformed time claim")
        sub, sid, jti = claims["sub"], claims["sid"], claims["jti"]
        if not (isinstance(sub, str) and sub.isascii() and sub.isdigit() and len(sub) <= 19):
            raise TokenError("malformed subject")
        if not (isinstance(sid, str) and len(sid) == 32) or not isinstance(jti, str):
            raise TokenError("malformed session")
        return AccessClaims(int(sub), sid, iat, exp, jti, _level(claims)), nbf

    def jwks(self) -> dict[str, Any]:
        """The public keys other services may verify access tokens with (none for HS256)."""
        return self._signing.jwks() if self._signing is not None else {"keys": []}

    def _check_header(self, header: dict[str, Any]) -> None:
        # The algorithm is pinned by configuration, never chosen by the token.
        if header.get("alg") != self.algorithm:
            raise TokenError("unexpected algorithm")
        if header.get("typ") != ACCESS_TOKEN_TYP:
            raise TokenError("not an access token")
        if _FORBIDDEN_HEADERS.intersection(header):
            raise TokenError("forbidden header parameter")

    def _decode(self, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """HS256: try the current key, then the previous ones (a rotation in progress)."""
        for key in self._jwt_verify_keys:
            try:
                return self._jwt_decode(token, key, ALGORITHM)
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                raise TokenError("invalid token") from exc
        raise TokenError("invalid signature")

    def _decode_with(self, token: str, key: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """EdDSA/ES256: the public key the token's `kid` named."""
        assert self._signing is not None
        try:
            return self._jwt_decode(token, key, self._signing.algorithm)
        except jwt.PyJWTError as exc:
            raise TokenError("invalid token") from exc

    def _jwt_decode(
        self, token: str, key: Any, algorithm: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The verified header and claims."""
        complete = jwt.decode_complete(
            token,
            key,
            algorithms=[algorithm],
            audience=self.audience,
            issuer=self.issuer,
            # Time claims are checked by the caller against our clock, which tests move.
            options={
                "require": list(_REQUIRED_CLAIMS),
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
            },
        )
        header: dict[str, Any] = complete["header"]
        claims: dict[str, Any] = complete["payload"]
        return header, claims

    # --- refresh successors (refresh grace, contract §8) --------------------------------

    def successor(self, parent: str) -> str:
        """The refresh token that succeeds `parent` when refresh grace is on: derived under the
        current key, so a repeated presentation of `parent` can re-derive it (only its digest
        is stored). As long and as unguessable as `new_opaque_token()` without the key."""
        return _successor(self._successor_keys[0], parent)

    def successor_candidates(self, parent: str) -> list[str]:
        """What `successor(parent)` was under the current key, then under each previous key
        (a rotation of the secret key between a refresh and its replay)."""
        return [_successor(key, parent) for key in self._successor_keys]

    # --- CSRF (signed double-submit, bound to the session) -------------------------------

    def issue_csrf(self, session_id: str) -> str:
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{self._csrf_mac(session_id, nonce)}"

    def check_csrf(self, value: str, session_id: str) -> bool:
        nonce, sep, mac = value.partition(".")
        if not sep or not nonce or not mac:
            return False
        # Bytes, not str: compare_digest raises TypeError on non-ASCII str, and a header
        # value can carry any latin-1 character.
        given = mac.encode("utf-8", "surrogatepass")
        return any(
            hmac.compare_digest(given, self._csrf_mac(session_id, nonce, key).encode())
            for key in self._csrf_verify_keys
        )

    def _csrf_mac(self, session_id: str, nonce: str, key: bytes | None = None) -> str:
        msg = f"{session_id}.{nonce}".encode("utf-8", "surrogatepass")
        return hmac.new(key or self._csrf_key, msg, hashlib.sha256).hexdigest()


def _level(claims: dict[str, Any]) -> Level:
    """The assurance an access token carries; PASSWORD when it carries none (older tokens)."""
    aal = claims.get("aal")
    if aal is None:
        return PASSWORD
    amr, pending = claims.get("amr"), claims.get("mfa")
    if aal not in ("aal1", "aal2") or pending not in (None, "pending"):
        raise TokenError("malformed assurance claims")
    if not (isinstance(amr, list) and amr and all(isinstance(m, str) for m in amr)):
        raise TokenError("malformed assurance claims")
    return Level.of(int(aal[3]), " ".join(amr), pending is not None)


def _successor(key: bytes, parent: str) -> str:
    # HMAC-SHA256 over a domain-separated label and the parent, keyed by the successor subkey:
    # 256 bits, URL-safe base64 without padding (the shape of `new_opaque_token()`).
    msg = _SUCCESSOR_LABEL + b"\x00" + parent.encode("utf-8", "surrogatepass")
    mac = hmac.new(key, msg, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def _derive(secret: bytes, label: bytes) -> bytes:
    # HMAC as a PRF keyed by the secret: independent subkeys from one configured value.
    return hmac.new(secret, label, hashlib.sha256).digest()
