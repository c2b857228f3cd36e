"""authgate.tokens.keys: access JWTs refuse every forgery the contract names (§4 Tokens), CSRF
values are bound to their session, opaque tokens are 256-bit and stored as SHA-256.

Forged tokens are signed with the Keys instance's own derived key (`keys._jwt_key`), so a
refusal is always the rule under test, never a bad signature by accident.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest

from authgate.principal import PASSWORD, Level
from authgate.tokens.keys import (
    AccessClaims,
    Keys,
    TokenError,
    digest,
    new_opaque_token,
    new_session_id,
)
from tests.helpers import TEST_SECRET, b64, b64json, sign

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TS = int(NOW.timestamp())
SID = "0123456789abcdef0123456789abcdef"
DROP = object()


@pytest.fixture
def keys() -> Keys:
    return Keys(TEST_SECRET.encode(), issuer="authgate", audience="authgate")


def claims(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sub": "42",
        "sid": SID,
        "iat": TS,
        "nbf": TS,
        "exp": TS + 900,
        "jti": "jti-1",
        "iss": "authgate",
        "aud": "authgate",
    }
    for name, value in changes.items():
        if value is DROP:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def refused(keys: Keys, token: str, now: datetime = NOW) -> None:
    with pytest.raises(TokenError):
        keys.verify_access(token, now=now)


# --- the valid token ------------------------------------------------------------------


def test_valid_token_round_trips(keys: Keys) -> None:
    token = keys.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900)
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "HS256", "typ": "at+jwt"}
    got = keys.verify_access(token, now=NOW)
    assert isinstance(got, AccessClaims)
    assert got.user_id == 42
    assert got.session_id == SID
    assert got.issued_at == TS
    assert got.expires_at == TS + 900
    assert isinstance(got.jti, str)
    assert got.jti
    raw = jwt.decode(token, options={"verify_signature": False})
    assert set(raw) >= {"sub", "sid", "iat", "exp", "jti", "iss", "aud"}
    assert raw["sub"] == "42"
    # Every issued token has its own jti.
    other = keys.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900)
    assert keys.verify_access(other, now=NOW).jti != got.jti


def test_hand_signed_valid_token_is_accepted(keys: Keys) -> None:
    """The forging helper is right: with nothing changed, its token passes."""
    got = keys.verify_access(sign(keys, claims()), now=NOW)
    assert got == AccessClaims(42, SID, TS, TS + 900, "jti-1")
    # nbf is optional.
    assert keys.verify_access(sign(keys, claims(nbf=DROP)), now=NOW).user_id == 42


# --- algorithm ------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
@pytest.mark.parametrize("signature", ["", "AAAA", "sig"])
def test_alg_none_is_refused(keys: Keys, alg: str, signature: str) -> None:
    token = f"{b64json({'alg': alg, 'typ': 'at+jwt'})}.{b64json(claims())}.{signature}"
    refused(keys, token)


def test_alg_none_with_a_real_signature_is_refused(keys: Keys) -> None:
    real = sign(keys, claims())
    _h, payload, signature = real.split(".")
    refused(keys, f"{b64json({'alg': 'none', 'typ': 'at+jwt'})}.{payload}.{signature}")


@pytest.mark.parametrize("alg", ["HS384", "HS512"])
def test_other_hmac_algorithms_with_the_same_key_are_refused(keys: Keys, alg: str) -> None:
    refused(keys, sign(keys, claims(), algorithm=alg))


@pytest.mark.parametrize("alg", ["RS256", "ES256", "PS256", "EdDSA", "hs256", "", None])
def test_header_alg_other_than_hs256_is_refused(keys: Keys, alg: str | None) -> None:
    real = sign(keys, claims())
    _h, payload, signature = real.split(".")
    header = {"typ": "at+jwt"} if alg is None else {"alg": alg, "typ": "at+jwt"}
    refused(keys, f"{b64json(header)}.{payload}.{signature}")


# --- signature and payload integrity ---------------------------------------------------


def test_stripped_signature_is_refused(keys: Keys) -> None:
    header, payload, _sig = sign(keys, claims()).split(".")
    refused(keys, f"{header}.{payload}.")
    refused(keys, f"{header}.{payload}")


def test_altered_signature_is_refused(keys: Keys) -> None:
    header, payload, sig = sign(keys, claims()).split(".")
    # Change a character in the middle: the last one may only carry padding bits.
    middle = len(sig) // 2
    flipped = "A" if sig[middle] != "A" else "B"
    refused(keys, f"{header}.{payload}.{sig[:middle]}{flipped}{sig[middle + 1 :]}")
    refused(keys, f"{header}.{payload}.{b64(bytes(32))}")


def test_altered_payload_is_refused(keys: Keys) -> None:
    header, _payload, sig = sign(keys, claims()).split(".")
    for changed in (claims(sub="1"), claims(sid="f" * 32), claims(exp=TS + 10**6)):
        refused(keys, f"{header}.{b64json(changed)}.{sig}")


def test_altered_header_is_refused(keys: Keys) -> None:
    _header, payload, sig = sign(keys, claims()).split(".")
    refused(keys, f"{b64json({'typ': 'at+jwt', 'alg': 'HS256', 'x': 1})}.{payload}.{sig}")


def test_token_of_another_secret_is_refused(keys: Keys) -> None:
    other = Keys(
        b"another-secret-key-also-long-enough-9876543210", issuer="authgate", audience="authgate"
    )
    refused(keys, other.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900))


@pytest.mark.parametrize(
    "token",
    ["", ".", "..", "a.b", "a.b.c", "not.a.jwt", "a.b.c.d", "x" * 5000, "\u00e9.\u00e9.\u00e9"],
)
def test_malformed_tokens_are_refused(keys: Keys, token: str) -> None:
    refused(keys, token)


# --- claims -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sub", "sid", "iat", "exp", "jti", "iss", "aud"])
def test_each_required_claim_is_required(keys: Keys, name: str) -> None:
    refused(keys, sign(keys, claims(**{name: DROP})))


@pytest.mark.parametrize("iss", ["other", "", "authgate ", "AUTHGATE"])
def test_wrong_issuer_is_refused(keys: Keys, iss: str) -> None:
    refused(keys, sign(keys, claims(iss=iss)))


@pytest.mark.parametrize("aud", ["other", "", ["other"], "AUTHGATE"])
def test_wrong_audience_is_refused(keys: Keys, aud: Any) -> None:
    refused(keys, sign(keys, claims(aud=aud)))


def test_issuer_and_audience_of_another_deployment_are_refused(keys: Keys) -> None:
    other = Keys(TEST_SECRET.encode(), issuer="elsewhere", audience="authgate")
    refused(keys, other.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900))
    other = Keys(TEST_SECRET.encode(), issuer="authgate", audience="elsewhere")
    refused(keys, other.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900))


def test_expired_token_is_refused(keys: Keys) -> None:
    token = sign(keys, claims())
    assert keys.verify_access(token, now=NOW + timedelta(seconds=899)).user_id == 42
    refused(keys, token, now=NOW + timedelta(seconds=900))
    refused(keys, token, now=NOW + timedelta(days=365))
    refused(keys, sign(keys, claims(exp=TS - 1)))


def test_not_yet_valid_token_is_refused(keys: Keys) -> None:
    refused(keys, sign(keys, claims(nbf=TS + 120)))
    refused(keys, sign(keys, claims(iat=TS + 3600, nbf=DROP)))


@pytest.mark.parametrize("sub", ["abc", "-1", "1.5", " 42", "42 ", "", "4" * 20, "٤٢"])
def test_non_numeric_subject_is_refused(keys: Keys, sub: str) -> None:
    refused(keys, sign(keys, claims(sub=sub)))


@pytest.mark.parametrize("sub", [42, 4.2, None, True, ["42"], {"id": 42}])
def test_non_string_subject_is_refused(keys: Keys, sub: Any) -> None:
    refused(keys, sign(keys, claims(sub=sub)))


@pytest.mark.parametrize("name", ["exp", "iat", "nbf"])
@pytest.mark.parametrize("value", [True, False, "9999999999", float(TS + 900), None, [TS + 900]])
def test_non_integer_time_claims_are_refused(keys: Keys, name: str, value: Any) -> None:
    refused(keys, sign(keys, claims(**{name: value})))


@pytest.mark.parametrize("sid", ["", "short", "a" * 31, "a" * 33, 12345, None])
def test_malformed_session_id_is_refused(keys: Keys, sid: Any) -> None:
    refused(keys, sign(keys, claims(sid=sid)))


@pytest.mark.parametrize("jti", [123, None, ["a"]])
def test_non_string_jti_is_refused(keys: Keys, jti: Any) -> None:
    refused(keys, sign(keys, claims(jti=jti)))


# --- header -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},  # PyJWT's default typ "JWT"
        {"typ": None},  # no typ at all
        {"typ": "JWT"},
        {"typ": "at+JWT "},
        {"typ": "application/at+jwt"},
        {"typ": "refresh"},
    ],
)
def test_typ_other_than_at_jwt_is_refused(keys: Keys, headers: dict[str, Any]) -> None:
    token = sign(keys, claims(), headers=headers or {"typ": "JWT"})
    assert jwt.get_unverified_header(token).get("typ") != "at+jwt"
    refused(keys, token)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("jku", "https://evil.example/jwks.json"),
        ("jwk", {"kty": "oct", "k": b64(b"k" * 32)}),
        ("x5u", "https://evil.example/cert.pem"),
        ("x5c", ["MIIB"]),
        ("crit", ["exp"]),
        ("kid", "1"),
        ("kid", ""),
    ],
)
def test_key_selecting_headers_are_refused(keys: Keys, name: str, value: Any) -> None:
    header = {"alg": "HS256", "typ": "at+jwt", name: value}
    _h, payload, _s = sign(keys, claims()).split(".")
    signing_input = f"{b64json(header)}.{payload}"
    import hmac

    mac = hmac.new(keys._jwt_key, signing_input.encode(), hashlib.sha256).digest()
    refused(keys, f"{signing_input}.{b64(mac)}")


# --- through HTTP ---------------------------------------------------------------------------


# --- CSRF -------------------------------------------------------------------------------------


def test_csrf_value_is_bound_to_its_session(keys: Keys) -> None:
    value = keys.issue_csrf(SID)
    assert keys.check_csrf(value, SID)
    assert not keys.check_csrf(value, "f" * 32)
    assert not keys.check_csrf(keys.issue_csrf("f" * 32), SID)
    # Fresh nonce each time, both valid.
    again = keys.issue_csrf(SID)
    assert again != value
    assert keys.check_csrf(again, SID)
    # Another secret's value is refused.
    other = Keys(b"another-secret-key-also-long-enough-9876543210", issuer="a", audience="a")
    assert not keys.check_csrf(other.issue_csrf(SID), SID)


def test_tampered_csrf_value_is_refused(keys: Keys) -> None:
    value = keys.issue_csrf(SID)
    nonce, mac = value.split(".")
    other_nonce = "x" + nonce[1:] if nonce[0] != "x" else "y" + nonce[1:]
    other_mac = ("0" if mac[10] != "0" else "1").join((mac[:10], mac[11:]))
    assert not keys.check_csrf(f"{other_nonce}.{mac}", SID)
    assert not keys.check_csrf(f"{nonce}.{other_mac}", SID)
    assert not keys.check_csrf(f"{nonce}.{mac.upper()}", SID)
    assert not keys.check_csrf(f"{nonce}.{mac}x", SID)
    assert not keys.check_csrf(f"{nonce}.{mac[:-1]}", SID)


@pytest.mark.parametrize(
    "value",
    [
        "",
        ".",
        "nodot",
        "abc.",
        ".abc",
        "a.b.c",
        "\u00e9.\u00e9",
        "\ud800.\ud800",
        "\x00.\x00",
        "é" * 100,
    ],
)
def test_malformed_csrf_values_are_refused(keys: Keys, value: str) -> None:
    assert keys.check_csrf(value, SID) is False


# --- opaque tokens and digests --------------------------------------------------------------


def test_digest_is_sha256() -> None:
    token = new_opaque_token()
    assert digest(token) == hashlib.sha256(token.encode()).digest()
    assert len(digest(token)) == 32
    assert digest("abc").hex() == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    # Any string, even one that is not valid UTF-8 text, digests without an error.
    assert len(digest("\ud800")) == 32


def test_opaque_tokens_carry_at_least_256_bits() -> None:
    tokens = [new_opaque_token() for _ in range(1000)]
    assert len(set(tokens)) == 1000
    for token in tokens:
        assert len(token) >= 43
        assert re.fullmatch(r"[A-Za-z0-9_-]+", token)
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert len(raw) >= 32


def test_session_ids_are_128_bit_hex() -> None:
    ids = {new_session_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{32}", sid) for sid in ids)


def test_keys_are_derived_per_purpose() -> None:
    keys = Keys(TEST_SECRET.encode(), issuer="authgate", audience="authgate")
    assert keys._jwt_key != keys._csrf_key
    assert TEST_SECRET.encode() not in (keys._jwt_key, keys._csrf_key)
    # A token signed with the raw secret (no derivation) is refused.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = jwt.encode(claims(), TEST_SECRET, algorithm="HS256", headers={"typ": "at+jwt"})
    refused(keys, raw)
    assert secrets.compare_digest(
        keys._jwt_key, Keys(TEST_SECRET.encode(), issuer="x", audience="y")._jwt_key
    )


# --- rotating the secret key: the previous key verifies, never signs ---------------------


OLD = "old-secret-key-that-is-long-enough-0123456789"
NEW = "new-secret-key-that-is-long-enough-9876543210"


def _keys(secret: str, previous: tuple[str, ...] = ()) -> Keys:
    return Keys(
        secret.encode(),
        issuer="authgate",
        audience="authgate",
        previous=[p.encode() for p in previous],
    )


def test_previous_key_verifies_access_tokens_and_csrf() -> None:
    old, rotated = _keys(OLD), _keys(NEW, previous=(OLD,))
    token = old.issue_access(user_id=1, session_id="a" * 32, now=NOW, ttl=60)
    assert rotated.verify_access(token, now=NOW).user_id == 1
    assert rotated.check_csrf(old.issue_csrf("a" * 32), "a" * 32)
    # New tokens are signed with the new key only.
    fresh = rotated.issue_access(user_id=1, session_id="a" * 32, now=NOW, ttl=60)
    with pytest.raises(TokenError):
        old.verify_access(fresh, now=NOW)
    # Once the previous key is dropped, its tokens are refused.
    with pytest.raises(TokenError):
        _keys(NEW).verify_access(token, now=NOW)
    assert not _keys(NEW).check_csrf(old.issue_csrf("a" * 32), "a" * 32)


# --- assurance claims (contract §9) -------------------------------------------------------


@pytest.mark.parametrize(
    "level",
    [
        PASSWORD,
        Level(1, ("pwd",), pending=True),
        Level(2, ("pwd", "otp")),
        Level(2, ("hwk", "user")),
    ],
)
def test_the_level_round_trips_as_aal_amr_and_mfa(keys: Keys, level: Level) -> None:
    token = keys.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900, level=level)
    raw = jwt.decode(token, options={"verify_signature": False})
    assert raw["aal"] == f"aal{level.aal}"
    assert raw["amr"] == list(level.amr)
    assert raw.get("mfa") == ("pending" if level.pending else None)
    assert keys.verify_access(token, now=NOW).level == level


def test_a_token_without_assurance_claims_is_a_password_session(keys: Keys) -> None:
    """Tokens issued before second factors existed stay valid until they expire."""
    assert keys.verify_access(sign(keys, claims()), now=NOW).level == PASSWORD


@pytest.mark.parametrize(
    "changes",
    [
        {"aal": "aal3", "amr": ["pwd"]},
        {"aal": "aal2", "amr": "pwd"},
        {"aal": "aal2", "amr": []},
        {"aal": "aal2", "amr": [1]},
        {"aal": "aal1", "amr": ["pwd"], "mfa": "done"},
        {"aal": "aal1", "amr": ["pwd"], "mfa": True},
        {"aal": 2, "amr": ["pwd"]},
        {"aal": "aal2"},
    ],
)
def test_malformed_assurance_claims_are_refused(keys: Keys, changes: dict[str, Any]) -> None:
    refused(keys, sign(keys, claims(**changes)))


# --- the verified-token cache (issue 16) ------------------------------------------------


def test_a_remembered_token_still_expires_and_is_not_valid_before_its_time(keys: Keys) -> None:
    token = keys.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900)
    first = keys.verify_access(token, now=NOW)
    # The second time it is the remembered claims, checked against the clock again.
    assert keys.verify_access(token, now=NOW + timedelta(seconds=899)) is first
    with pytest.raises(TokenError, match="expired"):
        keys.verify_access(token, now=NOW + timedelta(seconds=900))
    with pytest.raises(TokenError, match="not yet valid"):
        keys.verify_access(token, now=NOW - timedelta(seconds=120))


def test_only_verified_tokens_are_remembered_and_by_digest(keys: Keys) -> None:
    good = keys.issue_access(user_id=42, session_id=SID, now=NOW, ttl=900)
    forged = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    for _ in range(2):
        with pytest.raises(TokenError):
            keys.verify_access(forged, now=NOW)
    keys.verify_access(good, now=NOW)
    remembered = keys._verified
    assert list(remembered) == [hashlib.sha256(good.encode()).digest()]
    # A key of another instance (another secret) does not see this one's memory.
    other = Keys(b"another-secret-" * 4, issuer="authgate", audience="authgate")
    with pytest.raises(TokenError):
        other.verify_access(good, now=NOW)


def test_the_memory_is_bounded_oldest_first(keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    import authgate.tokens.keys as module

    monkeypatch.setattr(module, "VERIFIED_CACHE", 3)
    tokens = [keys.issue_access(user_id=i, session_id=SID, now=NOW, ttl=900) for i in range(1, 6)]
    for token in tokens:
        keys.verify_access(token, now=NOW)
    assert list(keys._verified) == [hashlib.sha256(t.encode()).digest() for t in tokens[2:]]
