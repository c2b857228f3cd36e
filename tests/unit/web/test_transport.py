"""Where requests come from: the client address behind reverse proxies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from ipaddress import ip_network
from typing import Any

import httpx
import pytest

from authgate import AuthConfig, create_app
from authgate.web.transport import client_address, rate_limit_address
from tests.conftest import PASSWORD, AppFactory, Backend, make_config

PROXIES = (ip_network("10.0.0.0/8"), ip_network("::1/128"))


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # No trusted proxy: the socket peer, whatever the header says.
        ("203.0.113.9", ["198.51.100.1"], "203.0.113.9"),
        # Through one trusted proxy.
        ("10.0.0.2", ["198.51.100.1"], "198.51.100.1"),
        # The client wrote a fake first entry; the proxy appended the real one.
        ("10.0.0.2", ["1.2.3.4, 198.51.100.1"], "198.51.100.1"),
        # Two trusted proxies in a row.
        ("10.0.0.2", ["198.51.100.1, 10.0.0.7"], "198.51.100.1"),
        # Several headers are one list, in order.
        ("10.0.0.2", ["1.2.3.4", "198.51.100.1"], "198.51.100.1"),
        # A trusted proxy without the header: the proxy itself.
        ("10.0.0.2", [], "10.0.0.2"),
        # Garbage stops the walk at the last address a trusted hop vouched for.
        ("10.0.0.2", ["198.51.100.1, not-an-ip"], "10.0.0.2"),
        ("::1", ["2001:db8::5"], "2001:db8::5"),
        (None, ["198.51.100.1"], "unknown"),
    ],
)
def test_client_address(peer: str | None, forwarded: list[str], expected: str) -> None:
    assert client_address(peer, forwarded, PROXIES) == expected


def test_no_trusted_proxies_means_the_peer() -> None:
    assert client_address("10.0.0.2", ["198.51.100.1"], ()) == "10.0.0.2"


async def _login_attempts(client: object, spoof: bool) -> list[int]:
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    codes = []
    for i in range(32):  # the per-IP login budget is 30 a minute
        headers = {"X-Forwarded-For": f"198.51.100.{i}"} if spoof else {}
        response = await client.post(
            "/auth/login",
            json={"email": f"user{i}@example.com", "password": PASSWORD},
            headers=headers,
        )
        codes.append(response.status_code)
    return codes


async def test_rotating_forwarded_for_from_an_untrusted_peer_changes_nothing(
    make_client: AppFactory,
) -> None:
    async with make_client(rate_limits=True) as client, asyncio.timeout(120):
        codes = await _login_attempts(client, spoof=True)
    assert codes[:30] == [401] * 30
    assert codes[30:] == [429, 429]


async def test_trusted_proxy_forwarded_for_is_the_client(make_client: AppFactory) -> None:
    # The test client connects from 127.0.0.1: trust it as the proxy.
    async with make_client(rate_limits=True, trusted_proxies="127.0.0.1") as client:
        async with asyncio.timeout(120):
            codes = await _login_attempts(client, spoof=True)
    assert set(codes) == {401}


# --- IPv4-mapped addresses and IPv6 prefixes (issue 10, F7) -------------------------------


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # `--host ::`: an IPv4 proxy arrives mapped and must still be trusted.
        ("::ffff:10.0.0.2", ["198.51.100.1"], "198.51.100.1"),
        # A mapped hop is the IPv4 client it names, and a mapped trusted hop is skipped.
        ("10.0.0.2", ["::ffff:198.51.100.1"], "198.51.100.1"),
        ("10.0.0.2", ["198.51.100.1, ::ffff:10.0.0.7"], "198.51.100.1"),
        # An untrusted mapped peer is the client, in IPv4 form.
        ("::ffff:203.0.113.9", ["198.51.100.1"], "203.0.113.9"),
        # IPv6 text forms are canonicalised.
        ("::1", ["2001:DB8:0::5"], "2001:db8::5"),
    ],
)
def test_ipv4_mapped_addresses_are_normalised_before_trust(
    peer: str, forwarded: list[str], expected: str
) -> None:
    assert client_address(peer, forwarded, PROXIES) == expected


@pytest.mark.parametrize(
    ("ip", "prefix", "key"),
    [
        ("203.0.113.9", 64, "203.0.113.9"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:3::1", 64, "2001:db8:1:3::/64"),
        ("2001:db8:1:2::1", 48, "2001:db8:1::/48"),
        ("2001:db8:1:2::1", 128, "2001:db8:1:2::1/128"),
        ("::ffff:203.0.113.9", 64, "203.0.113.9"),
        ("fe80::1%eth0", 64, "fe80::/64"),
        ("unknown", 64, "unknown"),
    ],
)
def test_rate_limit_address(ip: str, prefix: int, key: str) -> None:
    assert rate_limit_address(ip, prefix) == key


def test_mapped_trusted_proxy_entries_are_ipv4() -> None:
    config = AuthConfig(trusted_proxies="::ffff:10.0.0.0/104, 10.1.2.3, ::1")
    assert config.trusted_networks() == (
        ip_network("10.0.0.0/8"),
        ip_network("10.1.2.3/32"),
        ip_network("::1/128"),
    )


async def test_ipv6_clients_of_one_64_share_the_per_ip_limits(make_client: AppFactory) -> None:
    """25 registrations from 25 addresses of one /64 are one client: 20 pass (20/hour), the
    rest get 429; another /64 is another client. Events keep the full address."""
    codes = []
    async with make_client(rate_limits=True, trusted_proxies="127.0.0.1") as client:
        async with asyncio.timeout(120):
            for i in range(25):
                response = await client.post(
                    "/auth/register",
                    json={"email": f"user{i}@example.com", "password": PASSWORD},
                    headers={"X-Forwarded-For": f"2001:db8:1:2:{i:x}:{i:x}::{i + 1:x}"},
                )
                codes.append(response.status_code)
            other = await client.post(
                "/auth/register",
                json={"email": "other@example.com", "password": PASSWORD},
                headers={"X-Forwarded-For": "2001:db8:1:3::1"},
            )
    assert codes == [201] * 20 + [429] * 5
    assert other.status_code == 201, other.text


@contextlib.asynccontextmanager
async def _client_from(
    backend: Backend, peer: str, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """An app on `backend` whose every request comes from the socket address `peer`."""
    app = create_app(make_config(backend, **overrides))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=(peer, 50000))
        async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as c:
            yield c


def _login_failed_ips(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.authgate["client_ip"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "authgate.events" and r.getMessage() == "login_failed"
    ]


async def test_mapped_ipv4_peer_matches_an_ipv4_trusted_proxy(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """With `--host ::` an IPv4 proxy connects as `::ffff:10.0.0.1`: it is still the trusted
    proxy, so each client behind it is itself, not the proxy (one bucket for everyone)."""
    caplog.set_level(logging.INFO, logger="authgate.events")
    login = {"email": "nobody@example.com", "password": PASSWORD}
    async with _client_from(
        backend, "::ffff:10.0.0.1", trusted_proxies="10.0.0.1", rate_limits=True
    ) as client:
        for forwarded in ("198.51.100.7", "::ffff:198.51.100.8"):
            response = await client.post(
                "/auth/login", json=login, headers={"X-Forwarded-For": forwarded}
            )
            assert response.status_code == 401
    assert _login_failed_ips(caplog) == ["198.51.100.7", "198.51.100.8"]


async def test_mapped_ipv4_peer_is_an_ipv4_client(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    login = {"email": "nobody@example.com", "password": PASSWORD}
    async with _client_from(backend, "::ffff:203.0.113.5") as client:
        response = await client.post(
            "/auth/login", json=login, headers={"X-Forwarded-For": "198.51.100.7"}
        )
        assert response.status_code == 401
    assert _login_failed_ips(caplog) == ["203.0.113.5"]
