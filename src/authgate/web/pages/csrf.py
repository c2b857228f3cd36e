"""CSRF for the forms that work without JavaScript (the pages a mailed link opens): a signed
double submit.

The page's GET sets a cookie holding a random nonce (HttpOnly, SameSite=Strict, and
`__Host-`-prefixed when cookies are Secure, so a sibling subdomain cannot plant one) and puts
`HMAC(key, nonce | purpose | SHA-256(token))` in a hidden field. The POST must bring both, and
they must match. Another site can neither read the cookie nor compute the field without the
server's key; a planted cookie is useless without a field made for it, and a field is bound to
one purpose and one link's token. `Sec-Fetch-Site: cross-site` is refused outright, as a second
line for browsers that send it.

The key is derived from `AUTHGATE_SECRET_KEY` under its own label (like `tokens/keys.py`'s
subkeys); former keys (`AUTHGATE_SECRET_KEY_PREVIOUS`) still verify during a rotation.
The pages driven by JavaScript do not use this: the browser client sends the session-bound
`X-CSRF-Token` header to the JSON API (contract §4).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from fastapi import Request, Response

from authgate.config import AuthConfig
from authgate.web.transport import single_cookie

__all__ = ["FormGuard"]

_LABEL = b"authgate/page-form-csrf/v1"
_NONCE = re.compile(r"[A-Za-z0-9_-]{22,64}")
#: How long a form opened from a link can be submitted (a person reading a mail, then typing).
_COOKIE_MAX_AGE = 86_400


class FormGuard:
    """Issues and checks the nonce cookie and the hidden field of the link pages' forms."""

    def __init__(self, config: AuthConfig) -> None:
        self._keys = [
            hmac.new(secret, _LABEL, hashlib.sha256).digest()
            for secret in (config.secret(), *config.previous_secrets())
        ]
        self._secure = config.cookie_secure
        # `__Host-` needs Secure, Path=/ and no Domain; plain HTTP (development) cannot have it.
        self.cookie = "__Host-authgate_form" if config.cookie_secure else "authgate_form"

    def nonce(self, request: Request) -> str:
        """The request's nonce cookie when it holds one (several tabs share it), else a new
        one."""
        value = single_cookie(request, self.cookie)
        return value if value and _NONCE.fullmatch(value) else secrets.token_urlsafe(24)

    def field(self, nonce: str, purpose: str, token: str) -> str:
        """The hidden field's value for this nonce, purpose and token."""
        return self._mac(self._keys[0], nonce, purpose, token)

    def set_cookie(self, response: Response, nonce: str) -> None:
        response.set_cookie(
            self.cookie,
            nonce,
            max_age=_COOKIE_MAX_AGE,
            path="/",
            secure=self._secure,
            httponly=True,
            samesite="strict",
        )

    def check(self, request: Request, field: str, purpose: str, token: str) -> bool:
        """True when the request is not cross-site and `field` was made for its nonce cookie,
        this purpose and this token."""
        if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
            return False
        nonce = single_cookie(request, self.cookie)
        if not nonce or not _NONCE.fullmatch(nonce):
            return False
        given = field.encode("utf-8", "surrogatepass")
        return any(
            hmac.compare_digest(given, self._mac(key, nonce, purpose, token).encode())
            for key in self._keys
        )

    @staticmethod
    def _mac(key: bytes, nonce: str, purpose: str, token: str) -> str:
        token_digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        message = f"{nonce}|{purpose}|{token_digest}".encode()
        return hmac.new(key, message, hashlib.sha256).hexdigest()
