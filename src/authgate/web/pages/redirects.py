"""Where `?next=` may send a browser after sign-in (contract §6): a path on this origin, or a
URL on an origin listed in `AUTHGATE_ALLOWED_REDIRECT_ORIGINS` (or `AUTHGATE_PUBLIC_URL`'s).
Anything else lands on `/account`: an open redirect on a sign-in page is a phishing tool.

Browsers parse URLs more loosely than Python (WHATWG: `\\` is `/`, tabs and newlines are
dropped, `//host` is another origin), so anything that could be read two ways is refused
before parsing: control characters, spaces, backslashes, non-ASCII. What is returned is
rebuilt from its parsed parts, with the origin in canonical form.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

__all__ = ["DEFAULT_NEXT", "RedirectPolicy"]

DEFAULT_NEXT = "/account"
_MAX_LENGTH = 2048
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> str | None:
    """`scheme://host[:port]` in canonical form (lower case, default port dropped), or None
    when `url` is no http(s) URL with a host and without credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return (
        f"{scheme}://{host}"
        if port in (None, _DEFAULT_PORTS[scheme])
        else f"{scheme}://{host}:{port}"
    )


class RedirectPolicy:
    """Decides a `?next=` value: `target(value)` is always safe to send the browser to."""

    def __init__(self, public_url: str, allowed_origins: Iterable[str]) -> None:
        origins = [public_url, *(o.strip() for o in allowed_origins if o.strip())]
        self.origins = frozenset(o for o in map(_origin, origins) if o is not None)

    @classmethod
    def from_setting(cls, public_url: str, allowed_origins: str) -> RedirectPolicy:
        return cls(public_url, allowed_origins.split(","))

    def target(self, value: str | None) -> str:
        if not value or len(value) > _MAX_LENGTH or not _unambiguous(value):
            return DEFAULT_NEXT
        if value.startswith("/"):
            # `//host` and `/\host` are other origins to a browser; `\` is refused above.
            return value if not value.startswith("//") else DEFAULT_NEXT
        origin = _origin(value)
        if origin is None or origin not in self.origins:
            return DEFAULT_NEXT
        parts = urlsplit(value)
        return origin + urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment))


def _unambiguous(value: str) -> bool:
    """Printable ASCII without space or backslash: what every URL parser reads alike."""
    return value.isascii() and all(0x20 < ord(c) < 0x7F and c != "\\" for c in value)
