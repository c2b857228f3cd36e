"""web/transport.py: the client address behind reverse proxies, and its rate-limit key."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from authgate.web.transport import client_address, rate_limit_address

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
