"""Where tokens travel: cookies, the Authorization header, and the CSRF double submit.

What a token *is* lives in `tokens.py`; this module only moves strings in and out of HTTP.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Sequence
from http.cookies import _unquote
from ipaddress import IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from starlette.requests import Request
from starlette.responses import Response

from authgate.config import AuthConfig
from authgate.errors import CsrfFailed
from authgate.services.sessions import IssuedTokens

__all__ = [
    "ACCESS_COOKIE",
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "REFRESH_COOKIE",
    "access_token_from",
    "clear_auth_cookies",
    "client_address",
    "cookie_pairs",
    "normalise_ip",
    "rate_limit_address",
    "require_csrf_header",
    "set_auth_cookies",
    "single_cookie",
    "trusted_networks",
]

ACCESS_COOKIE = "svc_access_token"
REFRESH_COOKIE = "svc_refresh_token"
CSRF_COOKIE = "svc_csrf_token"
CSRF_HEADER = "X-CSRF-Token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _refresh_path(config: AuthConfig) -> str:
    return config.prefix or "/"


def set_auth_cookies(response: Response, tokens: IssuedTokens, config: AuthConfig) -> None:
    common = {
        "secure": config.cookie_secure,
        "samesite": config.cookie_samesite,
        "domain": config.cookie_domain,
    }
    response.set_cookie(
        ACCESS_COOKIE,
        tokens.access_token,
        max_age=config.access_ttl,
        path="/",
        httponly=True,
        **common,  # type: ignore[arg-type]
    )
    response.set_cookie(
        REFRESH_COOKIE,
        tokens.refresh_token,
        max_age=config.refresh_ttl,
        path=_refresh_path(config),
        httponly=True,
        **common,  # type: ignore[arg-type]
    )
    # Readable by scripts on purpose: the page echoes it in the X-CSRF-Token header.
    response.set_cookie(
        CSRF_COOKIE,
        tokens.csrf_token,
        max_age=config.refresh_ttl,
        path="/",
        httponly=False,
        **common,  # type: ignore[arg-type]
    )


def clear_auth_cookies(response: Response, config: AuthConfig) -> None:
    for name, path, httponly in (
        (ACCESS_COOKIE, "/", True),
        (REFRESH_COOKIE, _refresh_path(config), True),
        (CSRF_COOKIE, "/", False),
    ):
        response.delete_cookie(
            name,
            path=path,
            domain=config.cookie_domain,
            secure=config.cookie_secure,
            httponly=httponly,
            samesite=config.cookie_samesite,
        )


def access_token_from(request: Request) -> tuple[str | None, bool]:
    """(access token, came from the cookie). The Authorization header wins over the cookie;
    a header that is present but not `Bearer <token>` yields no token rather than the cookie."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and value:
            return value, False
        return None, False
    cookie = single_cookie(request, ACCESS_COOKIE)
    return (cookie, True) if cookie else (None, False)


def single_cookie(request: Request, name: str) -> str | None:
    """The cookie's value, or None when absent, empty or sent more than once.

    Two cookies of one name is what cookie tossing looks like (a sibling subdomain planting a
    cookie with a narrower path): authgate then uses neither rather than guess. The count and
    the value come from one parser (`cookie_pairs`), so no spelling of a name (`name =v`,
    `name\xa0=v`, a second Cookie header) can be counted as another cookie and read as this one.
    """
    pairs = cookie_pairs(request.headers.getlist("cookie"))
    values = [value for key, value in pairs if key == name]
    if len(values) != 1:
        return None
    return values[0] or None


def cookie_pairs(headers: Sequence[str]) -> list[tuple[str, str]]:
    """Every (name, value) of the Cookie headers, in order, duplicates kept.

    Exactly Starlette's `cookie_parser` (what `request.cookies` holds), less the dict: split
    on `;`, then on the first `=`, strip both sides (Python's `str.strip`, so U+00A0 and U+0085
    go too), unquote the value; a chunk without `=` is a value with an empty name.
    """
    pairs: list[tuple[str, str]] = []
    for header in headers:
        for chunk in header.split(";"):
            if "=" in chunk:
                key, value = chunk.split("=", 1)
            else:
                key, value = "", chunk
            key, value = key.strip(), value.strip()
            if key or value:
                pairs.append((key, _unquote(value)))
    return pairs


def require_csrf_header(request: Request) -> str:
    """The double-submitted CSRF value: the header, equal to the cookie, else `CsrfFailed`.

    The caller still checks that the value is bound to the session it is about to act on.
    """
    header = request.headers.get(CSRF_HEADER)
    cookie = single_cookie(request, CSRF_COOKIE)
    if not header or not cookie:
        raise CsrfFailed()
    if not hmac.compare_digest(
        header.encode("latin-1", "replace"), cookie.encode("latin-1", "replace")
    ):
        raise CsrfFailed()
    return header


def client_address(
    peer: str | None,
    forwarded_for: Sequence[str],
    trusted: Sequence[IPv4Network | IPv6Network],
) -> str:
    """The client's IP address, believing `X-Forwarded-For` only from trusted proxies.

    Walks the forwarding chain from the nearest hop outwards and stops at the first address
    that is not a trusted proxy: entries further left were written by the client itself and
    prove nothing. A peer that is not a trusted proxy is the client, whatever it sends.
    The peer and every hop are normalised first (`normalise_ip`): an IPv4 client reaching a
    dual-stack socket (`--host ::`) arrives as `::ffff:a.b.c.d` and must match IPv4 proxies
    and share its IPv4 rate-limit bucket.
    """
    if peer is None:
        return "unknown"
    peer = normalise_ip(peer) or peer
    if not trusted or not _is_trusted(peer, trusted):
        return peer
    hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
    client = peer
    for hop in reversed(hops):
        address = normalise_ip(hop)
        if address is None:
            break
        client = address
        if not _is_trusted(address, trusted):
            break
    return client


@functools.lru_cache(maxsize=4096)
def normalise_ip(value: str) -> str | None:
    """The address in its canonical text form, an IPv4-mapped IPv6 address (`::ffff:1.2.3.4`)
    as the IPv4 address it is; None when `value` is no IP address. Every request asks it of
    its peer, and parsing was 2 % of a refresh (bench/RESULTS.md, issue 16): a pure function
    of the text, remembered for the last 4,096 texts."""
    try:
        address = ip_address(value)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def rate_limit_address(ip: str, v6_prefix: int) -> str:
    """The key a per-IP rate limit counts `ip` under.

    An IPv4 address is itself. An IPv6 address counts as its /`v6_prefix` network (default
    /64, the smallest block a site is given): one host holds a whole /64 and could otherwise
    take a fresh bucket for every request. Anything that is not an address ("unknown") is
    returned as it is. The full address still goes into events.
    """
    try:
        address = ip_address(ip)
    except ValueError:
        return ip
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        host_bits = 128 - v6_prefix
        network = (int(address) >> host_bits) << host_bits
        return str(IPv6Network((network, v6_prefix)))
    return str(address)


def _is_trusted(address: str, trusted: Sequence[IPv4Network | IPv6Network]) -> bool:
    try:
        ip = ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


_MAPPED_V4 = IPv6Network("::ffff:0:0/96")


def trusted_networks(config: AuthConfig) -> tuple[IPv4Network | IPv6Network, ...]:
    """The networks of `AUTHGATE_TRUSTED_PROXIES` (validated by the configuration)."""
    networks = (
        ip_network(part.strip(), strict=False)
        for part in config.trusted_proxies.split(",")
        if part.strip()
    )
    # Client addresses are compared in IPv4 form (`::ffff:10.0.0.1` is 10.0.0.1), so an
    # IPv4-mapped entry is taken as the IPv4 network it names.
    return tuple(_unmapped(network) for network in networks)


def _unmapped(network: IPv4Network | IPv6Network) -> IPv4Network | IPv6Network:
    if isinstance(network, IPv6Network) and network.subnet_of(_MAPPED_V4):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None
        return IPv4Network((mapped, network.prefixlen - 96))
    return network
