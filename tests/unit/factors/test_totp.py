"""factors/totp.py: RFC 6238 codes (the RFC's own test vectors), one step of drift, the
typed forms a code may take, the otpauth URI and the QR code's SVG."""

from __future__ import annotations

import hmac
import re
from datetime import UTC, datetime
from urllib.parse import parse_qs, unquote, urlsplit
from xml.etree import ElementTree

import pyotp
import pytest

from authgate.factors import totp

#: RFC 6238 appendix B: the SHA-1 seed "12345678901234567890", here in base32.
RFC_SECRET = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
#: (Unix time, the 8-digit code of appendix B); a 6-digit code is its last six digits.
RFC_VECTORS = [(59, "94287082"), (1111111109, "07081804"), (1234567890, "89005924")]


def at(unix: int) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


@pytest.mark.parametrize(("unix", "eight"), RFC_VECTORS)
def test_the_rfc_vectors_match_at_their_own_step(unix: int, eight: str) -> None:
    assert totp.matching_step(RFC_SECRET, eight[-6:], at(unix)) == unix // 30


@pytest.mark.parametrize(("unix", "eight"), RFC_VECTORS)
def test_one_step_of_drift_either_way_and_no_more(unix: int, eight: str) -> None:
    code, step = eight[-6:], unix // 30
    assert totp.matching_step(RFC_SECRET, code, at(unix + 30)) == step
    assert totp.matching_step(RFC_SECRET, code, at(unix - 30)) == step
    assert totp.matching_step(RFC_SECRET, code, at(unix + 60)) is None
    assert totp.matching_step(RFC_SECRET, code, at(unix - 60)) is None


def test_spaces_are_dropped_and_anything_else_is_no_match() -> None:
    now = at(59)
    for typed in ("287 082", " 287082 ", "287\t082", "28 70 82"):
        assert totp.matching_step(RFC_SECRET, typed, now) == 1, typed
    for typed in (
        "",
        "28708",
        "2870820",
        "287-082",
        "\uff12\uff18\uff17\uff10\uff18\uff12",
        "abcdef",
        "287082x",
    ):
        assert totp.matching_step(RFC_SECRET, typed, now) is None, typed


def test_every_candidate_is_compared_with_no_early_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[bytes] = []
    original = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    now = at(1111111109)
    earliest = pyotp.TOTP(RFC_SECRET).at(at(1111111109 - 30))
    for typed in (earliest, "000000", "nope"):
        compared.clear()
        totp.matching_step(RFC_SECRET, typed, now)
        assert len(compared) == 3, typed


def test_a_new_secret_is_160_random_bits_of_base32() -> None:
    secrets = {totp.new_secret() for _ in range(20)}
    assert len(secrets) == 20
    for secret in secrets:
        assert re.fullmatch(r"[A-Z2-7]{32}", secret)  # 32 x 5 bits = 160 bits


def test_the_otpauth_uri_names_the_issuer_and_the_account() -> None:
    uri = totp.otpauth_uri(RFC_SECRET, "ann+x@example.com", "Acme Cloud")
    parts = urlsplit(uri)
    assert (parts.scheme, parts.netloc) == ("otpauth", "totp")
    assert unquote(parts.path) == "/Acme Cloud:ann+x@example.com"
    query = parse_qs(parts.query)
    assert query["secret"] == [RFC_SECRET]
    assert query["issuer"] == ["Acme Cloud"]
    parsed = pyotp.parse_uri(uri)
    assert isinstance(parsed, pyotp.TOTP)
    assert (parsed.digits, parsed.interval) == (6, 30)
    assert parsed.at(at(59)) == "287082"


def test_the_qr_code_is_an_svg_without_script_style_or_links() -> None:
    svg = totp.qr_svg(totp.otpauth_uri(RFC_SECRET, "ann@example.com", "authgate"))
    root = ElementTree.fromstring(svg)  # noqa: S314 - our own output, parsed to be checked
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    for element in root.iter():
        local = element.tag.rsplit("}", 1)[-1]
        assert local in ("svg", "path"), local
        for name in element.attrib:
            assert name != "style", name
            assert "href" not in name, name
            assert not name.startswith("on"), name
    assert not svg.startswith("<?xml")


def test_step_at_is_unix_time_over_thirty() -> None:
    assert totp.step_at(at(59)) == 1
    assert totp.step_at(at(60)) == 2
