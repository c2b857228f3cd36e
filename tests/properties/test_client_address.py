"""The client address through HTTP, on both backends: X-Forwarded-For counts only from
trusted proxies, IPv4-mapped peers are IPv4 clients, and per-IP limits count an IPv6 client by
its /64 (issue 10, F7). The address rules on their own: unit/web/test_transport.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from authgate import create_app
from tests.helpers import PASSWORD, AppFactory, Backend, make_config


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
