"""Where requests come from: the client address behind reverse proxies."""

from __future__ import annotations

import asyncio
from ipaddress import ip_network

import pytest

from authgate.transport import client_address
from tests.conftest import PASSWORD, AppFactory

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
