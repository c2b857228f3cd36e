"""Property tests (Hypothesis) of the two pieces of text handling everything else rests on: the
email key accounts are unique by, and the password rules (interface.md §8, contract.md §4).
Plus two HTTP properties on both backends: an NFKC-equivalent password logs in, and no
password text makes registration answer anything but 201/409/422.

Bounded and reproducible: few examples, derandomized, no example database, no deadline.
Each property `note`s its inputs: schemathesis' pytest plugin (loaded in this session) turns
off Hypothesis' printing of the failing arguments, so a failure would otherwise not say which
input broke it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import string
import unicodedata
from collections.abc import Coroutine
from typing import Any

import httpx
from hypothesis import given, note, settings
from hypothesis import strategies as st

from authgate import create_app
from authgate.emails import EmailProblem, canonical_email, email_key, login_key
from authgate.passwords import (
    MAX_PASSWORD_BYTES,
    MIN_PASSWORD_CHARS,
    common_passwords,
    normalise,
    password_problem,
)
from authgate.schemas import PasswordResetConfirm, RegisterRequest
from tests.conftest import Backend, make_config, running

UNIT = settings(max_examples=200, deadline=None, derandomize=True, database=None)
HTTP = settings(max_examples=10, deadline=None, derandomize=True, database=None)

#: Any text at all, lone surrogates included: JSON can carry them ("\ud800").
ANY_TEXT = st.text(st.characters(exclude_categories=()))
LINE_BREAKS_AND_NUL = ("\r", "\n", "\x00")

# --- generated valid addresses ------------------------------------------------------------

#: Letters with and without case, one (ß) whose upper case is two letters, final sigma.
UNICODE_LETTERS = "äöüßéñçøåæœαβγδλσςжпр文字日本"
ASCII_ATOM = st.text(string.ascii_letters + string.digits + "_+-", min_size=1, max_size=6)
UNICODE_ATOM = st.text(
    string.ascii_letters + string.digits + UNICODE_LETTERS, min_size=1, max_size=6
)
LOCAL_PART = st.lists(st.one_of(ASCII_ATOM, UNICODE_ATOM), min_size=1, max_size=3).map(".".join)
LABEL = st.one_of(
    st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12),
    st.text(string.ascii_lowercase + "äöüßéñ", min_size=1, max_size=12),
)
DOMAIN = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(LABEL, min_size=1, max_size=2),
    st.sampled_from(["com", "org", "net", "de", "io", "info"]),
)
ADDRESSES = st.builds(lambda local, domain: f"{local}@{domain}", LOCAL_PART, DOMAIN)


def fullwidth(char: str) -> str:
    """The fullwidth form of an ASCII letter or digit (NFKC maps it back)."""
    return chr(ord(char) + 0xFEE0) if char.isascii() and char.isalnum() else char


@st.composite
def mixed_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if flip else c.lower() for c, flip in zip(text, flips, strict=True))


@st.composite
def nfkc_variant(draw: st.DrawFn, text: str) -> str:
    """`text` with some ASCII letters and digits fullwidth and possibly decomposed (NFD):
    a different string with the same NFKC form."""
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    out = "".join(fullwidth(c) if flip else c for c, flip in zip(text, flips, strict=True))
    if draw(st.booleans()):
        out = unicodedata.normalize("NFD", out)
    return out


def key_of(address: str) -> str:
    return canonical_email(address)[1]


@UNIT
@given(ADDRESSES)
def test_generated_addresses_are_valid_and_keys_are_idempotent(address: str) -> None:
    note(f"address={address!r}")
    stored, key = canonical_email(address)
    assert key == email_key(stored)
    assert email_key(key) == key
    assert key_of(stored) == key, "re-validating the stored address gives the same key"
    assert key_of(key) == key, "the key is itself an address with the same key"
    assert login_key(address) == key


@UNIT
@given(st.data(), ADDRESSES)
def test_keys_are_case_insensitive(data: st.DataObject, address: str) -> None:
    note(f"address={address!r}")
    key = key_of(address)
    assert key_of(address.upper()) == key
    assert key_of(address.lower()) == key
    assert key_of(data.draw(mixed_case(address))) == key
    assert login_key(address.swapcase()) == key


@UNIT
@given(st.data(), ADDRESSES)
def test_keys_are_stable_under_nfkc_variants(data: st.DataObject, address: str) -> None:
    note(f"address={address!r}")
    variant = data.draw(nfkc_variant(address))
    assert unicodedata.normalize("NFKC", variant) == unicodedata.normalize("NFKC", address)
    assert key_of(variant) == key_of(address)
    assert login_key(variant) == login_key(address)


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
        assert login_key(text) is None
        return
    for char in LINE_BREAKS_AND_NUL:
        assert char not in stored
        assert char not in key
    assert login_key(text) == key


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
        assert login_key(tampered) is None
        return
    assert char not in stored
    assert char not in key


# --- password rules -------------------------------------------------------------------------


def acceptable(normalised: str) -> bool:
    """The rules, restated: judged on the NFKC form, 8 characters to 72 bytes of UTF-8 (no
    truncation), encodable, not a common password (case-folded)."""
    try:
        size = len(normalised.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return (
        len(normalised) >= MIN_PASSWORD_CHARS
        and size <= MAX_PASSWORD_BYTES
        and normalised.casefold() not in common_passwords()
    )


#: Characters whose NFKC form is longer (ligatures, fractions, squared units), shorter
#: (a letter and a combining mark compose; Hangul jamo compose) or just different (fullwidth).
COMPATIBILITY = (
    "ﬀﬁﬂﬃﬄ½¼㎏㎞™" + "".join(map(fullwidth, "ABcd12")) + "\u0301\u0308\u1100\u1161\u11a8"
)
#: Length around the limits, multi-byte characters included.
NEAR_THE_LIMITS = st.text(
    st.sampled_from(string.ascii_letters + string.digits + " éß€文😀" + COMPATIBILITY),
    min_size=0,
    max_size=80,
)
PASSWORDS = st.one_of(ANY_TEXT, NEAR_THE_LIMITS, st.sampled_from(sorted(common_passwords())))


@UNIT
@given(PASSWORDS)
def test_password_rules_on_arbitrary_text(raw: str) -> None:
    note(f"raw={raw!r}")
    normalised = normalise(raw)
    problem = password_problem(normalised)  # never raises
    assert (problem is None) == acceptable(normalised)
    if problem is None:
        assert len(normalised) >= MIN_PASSWORD_CHARS
        assert len(normalised.encode()) <= MAX_PASSWORD_BYTES
        assert normalised.casefold() not in common_passwords()


@UNIT
@given(st.text(st.characters(exclude_categories=()), max_size=MIN_PASSWORD_CHARS + 8))
def test_shorter_than_eight_characters_after_nfkc_is_refused(raw: str) -> None:
    note(f"raw={raw!r}")
    normalised = normalise(raw)
    if len(normalised) < MIN_PASSWORD_CHARS:
        assert password_problem(normalised) is not None


@UNIT
@given(st.text(st.sampled_from("aé€😀ﬃ½"), min_size=19, max_size=80))
def test_over_seventy_two_bytes_is_refused_not_truncated(raw: str) -> None:
    note(f"raw={raw!r}")
    normalised = normalise(raw)
    if len(normalised.encode()) > MAX_PASSWORD_BYTES:
        assert password_problem(normalised) is not None
        # Not truncated anywhere on the way in either: the model refuses it too.
        assert not _model_accepts(raw)


@UNIT
@given(PASSWORDS)
def test_normalise_is_idempotent(raw: str) -> None:
    note(f"raw={raw!r}")
    assert normalise(normalise(raw)) == normalise(raw)


@UNIT
@given(st.text(st.sampled_from(string.ascii_lowercase + COMPATIBILITY), max_size=40))
def test_rules_are_applied_to_the_nfkc_form(raw: str) -> None:
    """Register and reset judge (and keep) the NFKC form, whatever its length in the raw text."""
    note(f"raw={raw!r}")
    normalised = normalise(raw)
    assert (password_problem(normalised) is None) == acceptable(normalised)
    assert _model_accepts(raw) == acceptable(normalised)
    if acceptable(normalised):
        request = RegisterRequest(email="ann@example.com", password=raw)
        assert request.password == normalised
        confirm = PasswordResetConfirm(token="t", new_password=raw)
        assert confirm.new_password == normalised


def test_nfkc_changes_the_length_both_ways() -> None:
    """The two directions `test_rules_are_applied_to_the_nfkc_form` relies on, pinned."""
    expands = "ﬃ" * 3  # 3 characters; NFKC "ffiffiffi", 9
    assert len(expands) < MIN_PASSWORD_CHARS <= len(normalise(expands))
    assert _model_accepts(expands)
    shrinks = "e\u0301" * 4  # 8 code points; NFKC "éééé", 4
    assert len(normalise(shrinks)) < MIN_PASSWORD_CHARS <= len(shrinks)
    assert not _model_accepts(shrinks)


def _model_accepts(raw: str) -> bool:
    try:
        RegisterRequest(email="ann@example.com", password=raw)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return False
    return True


# --- HTTP -------------------------------------------------------------------------------------
# Hypothesis drives from a worker thread; each request runs on the test's event loop, where the
# app (and its lifespan) lives.


def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, httpx.Response]) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


async def post_json(client: httpx.AsyncClient, path: str, body: dict[str, str]) -> httpx.Response:
    client.cookies.clear()
    # ASCII JSON, so lone surrogates travel as \u escapes as any JSON client would send them.
    return await client.post(
        path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )


PLAIN_PASSWORDS = st.text(
    st.sampled_from(string.ascii_letters + string.digits + "éüñ"), min_size=8, max_size=24
).filter(lambda p: password_problem(normalise(p)) is None)


async def test_login_with_an_nfkc_equivalent_password(backend: Backend) -> None:
    app = create_app(make_config(backend, rate_limits=False))
    emails = (f"nfkc{n}@example.com" for n in itertools.count())
    async with running(app) as client:
        loop = asyncio.get_running_loop()

        @HTTP
        @given(st.data(), PLAIN_PASSWORDS, st.booleans())
        def prop(data: st.DataObject, password: str, variant_first: bool) -> None:
            variant = data.draw(nfkc_variant(password).filter(lambda v: v != password))
            note(f"password={password!r} variant={variant!r} variant_first={variant_first}")
            at_register, at_login = (variant, password) if variant_first else (password, variant)
            email = next(emails)
            body = {"email": email, "password": at_register}
            registered = on_loop(loop, post_json(client, "/auth/register", body))
            assert registered.status_code == 201, registered.text
            body = {"email": email, "password": at_login}
            logged_in = on_loop(loop, post_json(client, "/auth/login", body))
            assert logged_in.status_code == 200, logged_in.text

        await asyncio.to_thread(prop)


async def test_register_answers_201_409_or_422_to_any_password(backend: Backend) -> None:
    app = create_app(make_config(backend, rate_limits=False))
    emails = (f"anypw{n}@example.com" for n in itertools.count())
    async with running(app) as client:
        loop = asyncio.get_running_loop()

        @HTTP
        @given(st.one_of(st.text(), ANY_TEXT))
        def prop(password: str) -> None:
            note(f"password={password!r}")
            body = {"email": next(emails), "password": password}
            response = on_loop(loop, post_json(client, "/auth/register", body))
            assert response.status_code in (201, 409, 422), response.text
            # A fresh email each time: never 409, and 201 exactly when the rules accept it.
            expected = 201 if len(password) <= 1024 and acceptable(normalise(password)) else 422
            assert response.status_code == expected, response.text

        await asyncio.to_thread(prop)
