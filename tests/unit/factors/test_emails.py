"""Property tests (Hypothesis) of factors/emails.py: the email key accounts are unique by (one
key exactly for one mailbox under the documented rule, never wider than its column: issue 10,
F11 and F12). The same rule through HTTP: flows/test_auth.py (the email key section).

Bounded and reproducible: few examples, derandomized, no example database, no deadline.
Each property `note`s its inputs: schemathesis' pytest plugin (loaded in this session) turns
off Hypothesis' printing of the failing arguments, so a failure would otherwise not say which
input broke it.
"""

from __future__ import annotations

import string
import unicodedata

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from authgate.factors.emails import (
    MAX_EMAIL_LENGTH,
    EmailProblem,
    canonical_email,
    email_key,
    login_key,
)
from tests.helpers import (
    ADDRESSES,
    ANY_TEXT,
    DOMAIN,
    UNIT,
    case_round_trips,
    look_alike,
    mixed_case,
    nfkc_variant,
    normalised,
    same_mailbox,
)

LINE_BREAKS_AND_NUL = ("\r", "\n", "\x00")

# --- generated valid addresses ------------------------------------------------------------


def key_of(address: str) -> str:
    return canonical_email(address)[1]


@UNIT
@given(ADDRESSES)
def test_generated_addresses_are_valid_and_keys_are_stable(address: str) -> None:
    note(f"address={address!r}")
    stored, key = canonical_email(address)
    assert key == email_key(stored)
    assert key_of(stored) == key, "re-validating the stored address gives the same key"
    assert key_of(key) == key, "the key is itself an address with the same key"
    assert login_key(address) == key
    local, domain = key.rsplit("@", 1)
    assert domain.isascii(), "the key's domain is the IDNA (ASCII) form"
    assert domain == domain.lower()
    assert local == local.lower()


@UNIT
@given(st.data(), ADDRESSES)
def test_keys_ignore_case_by_str_lower(data: st.DataObject, address: str) -> None:
    note(f"address={address!r}")
    key = key_of(address)
    assert key_of(address.lower()) == key
    assert key_of(data.draw(mixed_case(address))) == key
    assert login_key(address.swapcase()) == email_key(address.swapcase())
    if all(case_round_trips(c) for c in address):
        assert key_of(address.upper()) == key
        assert login_key(address.swapcase()) == key


@UNIT
@given(st.data(), ADDRESSES)
def test_two_addresses_share_a_key_only_when_they_are_one_mailbox(
    data: st.DataObject, address: str
) -> None:
    """The property F12 is about: key(a) == key(b) exactly when a and b, normalised by
    email-validator, are equal after `str.lower()`; a look-alike never takes an account."""
    other = data.draw(look_alike(address))
    note(f"address={address!r} other={other!r}")
    other_key = login_key(other)
    if other_key is None:  # the edit made it invalid (a long s in a domain, say)
        return
    assert (other_key == key_of(address)) == same_mailbox(address, other)


@UNIT
@given(st.data(), ADDRESSES)
def test_new_addresses_with_compatibility_characters_are_refused(
    data: st.DataObject, address: str
) -> None:
    """A new address must be its own NFKC form (after NFC normalisation); login still finds
    such an address's key, for accounts registered before the rule."""
    variant = data.draw(nfkc_variant(address))
    note(f"address={address!r} variant={variant!r}")
    stored = normalised(variant)
    if unicodedata.normalize("NFKC", stored) == stored:
        # Fullwidth letters only in the domain (IDNA maps them) or only decomposed (NFD):
        # the same address.
        assert key_of(variant) == key_of(address)
    else:
        with pytest.raises(EmailProblem, match="compatibility characters"):
            canonical_email(variant)
        assert login_key(variant) == email_key(variant) != key_of(address)


def test_the_reported_look_alikes() -> None:
    """issue 10, F12: `sam@` with a fullwidth or a long s took `sam@`, `victim@straße.de` took
    `victim@strasse.de` (another registrable domain)."""
    sam = key_of("sam@example.com")
    assert key_of("SAM@example.com") == key_of("Sam@EXAMPLE.com") == sam
    for look_alike_sam in ("\uff53am@example.com", "\u017fam@example.com"):
        with pytest.raises(EmailProblem):
            canonical_email(look_alike_sam)
        assert login_key(look_alike_sam) not in (None, sam)
    assert key_of("victim@straße.de") == "victim@xn--strae-oqa.de"
    assert key_of("victim@strasse.de") == "victim@strasse.de"
    assert key_of("VICTIM@STRASSE.DE") == "victim@strasse.de"
    assert key_of("victim@xn--strae-oqa.de") == key_of("victim@STRAßE.de")
    assert key_of("straße@example.com") != key_of("strasse@example.com")  # ß is not ss


# --- the key fits its column (F11) ------------------------------------------------------------

#: Characters that grow under the key's steps: `İ` lower-cases to two characters, `ﷺ` (NFKC: 18
#: characters) and the fullwidth letters are refused as new addresses but keyed at login,
#: IDN labels grow into punycode.
WIDE_LOCAL = st.text(
    st.sampled_from(string.ascii_letters + "İßæ文😀ﷺ\uff41\u017f"), min_size=1, max_size=90
)
WIDE_LABEL = st.text(st.sampled_from(string.ascii_lowercase + "äöüß文😀"), min_size=1, max_size=63)
WIDE_DOMAIN = st.builds(
    lambda labels: ".".join([*labels, "com"]), st.lists(WIDE_LABEL, min_size=1, max_size=6)
)


@UNIT
@given(st.builds(lambda local, domain: f"{local}@{domain}", WIDE_LOCAL, WIDE_DOMAIN))
def test_no_key_is_wider_than_its_column(address: str) -> None:
    note(f"address={address!r}")
    key = login_key(address)
    if key is not None:
        assert len(key) <= MAX_EMAIL_LENGTH
    try:
        stored, key = canonical_email(address)
    except EmailProblem:
        return
    assert len(stored) <= MAX_EMAIL_LENGTH
    assert len(key) <= MAX_EMAIL_LENGTH


def test_lower_case_never_has_more_characters_than_utf8_bytes() -> None:
    """Why no key can be wider than 320: email-validator caps the address (local part and
    IDNA domain) at 254 UTF-8 bytes, and, checked here for every code point, no character's
    `str.lower()` has more characters than the character has UTF-8 bytes."""
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        assert len(char.lower()) <= len(char.encode("utf-8")), hex(code)


def test_the_reported_overflow() -> None:
    """issue 10, F11: NFKC made this a 372-character key for a 320-character column."""
    address = "\ufdfa" * 20 + "@example.com"
    with pytest.raises(EmailProblem):
        canonical_email(address)
    key = login_key(address)
    assert key is not None
    assert len(key) <= MAX_EMAIL_LENGTH


@UNIT
@given(
    st.one_of(
        ANY_TEXT,
        st.builds(lambda a, b: f"{a}@{b}", ANY_TEXT, ANY_TEXT),
        st.builds(lambda a, b: f"{a}@{b}", ANY_TEXT, DOMAIN),
    )
)
def test_arbitrary_text_is_an_address_or_an_email_problem(text: str) -> None:
    note(f"text={text!r}")
    try:
        stored, key = canonical_email(text)
    except EmailProblem:
        assert_refused_as_new(text)
        return
    for char in LINE_BREAKS_AND_NUL:
        assert char not in stored
        assert char not in key
    assert login_key(text) == key


def assert_refused_as_new(text: str) -> None:
    """`text` was refused as a new address: it is no address at all (no login key either), or
    a valid one with compatibility characters (keyed at login, free of line breaks)."""
    key = login_key(text)
    if key is None:
        return
    stored = normalised(text)
    assert unicodedata.normalize("NFKC", stored) != stored
    assert not any(c in key for c in LINE_BREAKS_AND_NUL)


@UNIT
@given(ANY_TEXT)
def test_login_key_never_raises(text: str) -> None:
    note(f"text={text!r}")
    key = login_key(text)
    assert key is None or not any(c in key for c in LINE_BREAKS_AND_NUL)


@UNIT
@given(ADDRESSES, st.sampled_from(LINE_BREAKS_AND_NUL), st.integers(min_value=0))
def test_no_key_carries_a_line_break_or_nul(address: str, char: str, position: int) -> None:
    """A valid address with a CR, LF or NUL spliced in anywhere is refused outright."""
    note(f"address={address!r} char={char!r} position={position}")
    at = position % (len(address) + 1)
    tampered = address[:at] + char + address[at:]
    try:
        stored, key = canonical_email(tampered)
    except EmailProblem:
        assert_refused_as_new(tampered)
        return
    assert char not in stored
    assert char not in key
