"""Property tests (Hypothesis) of factors/password_rules.py (interface.md §8, contract.md §4):
8 characters to 72 bytes of UTF-8 after NFKC, never truncated, not a common password.

Bounded and reproducible: few examples, derandomized, no example database, no deadline.
Each property `note`s its inputs: schemathesis' pytest plugin (loaded in this session) turns
off Hypothesis' printing of the failing arguments, so a failure would otherwise not say which
input broke it.
"""

from __future__ import annotations

import string

from hypothesis import given, note
from hypothesis import strategies as st

from authgate.errors import PasswordRejected
from authgate.factors.password_rules import (
    MAX_PASSWORD_BYTES,
    MIN_PASSWORD_CHARS,
    check_new_password,
    common_passwords,
    normalise,
    password_problem,
)
from tests.helpers import ANY_TEXT, UNIT, acceptable, fullwidth

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
        # Not truncated anywhere on the way in either: what the services call refuses it too.
        assert not _rules_accept(raw)


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
    assert _rules_accept(raw) == acceptable(normalised)
    if acceptable(normalised):
        # What register and reset confirm store a hash of (both call check_new_password).
        assert check_new_password(raw) == normalised


def test_nfkc_changes_the_length_both_ways() -> None:
    """The two directions `test_rules_are_applied_to_the_nfkc_form` relies on, pinned."""
    expands = "ﬃ" * 3  # 3 characters; NFKC "ffiffiffi", 9
    assert len(expands) < MIN_PASSWORD_CHARS <= len(normalise(expands))
    assert _rules_accept(expands)
    shrinks = "e\u0301" * 4  # 8 code points; NFKC "éééé", 4
    assert len(normalise(shrinks)) < MIN_PASSWORD_CHARS <= len(shrinks)
    assert not _rules_accept(shrinks)


def _rules_accept(raw: str) -> bool:
    """What register and reset confirm accept: both call `check_new_password`."""
    try:
        check_new_password(raw)
    except PasswordRejected:
        return False
    return True
