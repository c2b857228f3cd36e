"""factors/recovery.py: the codes' shape and entropy, the forgiving normalisation of typed
input, and the digest that is all the database keeps."""

from __future__ import annotations

import math
import re

from authgate.factors import recovery

SHOWN = re.compile(r"[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}")


def test_a_set_is_ten_distinct_codes_of_80_bits() -> None:
    codes = recovery.new_codes()
    assert len(codes) == recovery.CODE_COUNT == 10
    assert len(set(codes)) == 10
    for code in codes:
        assert SHOWN.fullmatch(code), code
    # 16 symbols of a 32-symbol alphabet, drawn uniformly (secrets.choice).
    assert math.log2(32**16) >= 80
    assert len({c for code in recovery.new_codes(200) for c in code if c != "-"}) == 32


def test_sets_do_not_repeat() -> None:
    seen = [c for _ in range(20) for c in recovery.new_codes()]
    assert len(set(seen)) == len(seen)


def test_case_dashes_and_whitespace_are_ignored() -> None:
    code = "abcd-efgh-ijkl-mn23"
    digest = recovery.digest_code(code)
    for typed in (
        "ABCD-EFGH-IJKL-MN23",
        "abcdefghijklmn23",
        " abcd efgh ijkl mn23 ",
        "abcd-EFGH\tijkl-mn23",
    ):
        assert recovery.normalise(typed) == "abcdefghijklmn23"
        assert recovery.digest_code(typed) == digest, typed


def test_the_digest_is_32_bytes_and_tells_codes_apart() -> None:
    a, b = recovery.new_codes(2)
    assert len(recovery.digest_code(a)) == 32
    assert recovery.digest_code(a) != recovery.digest_code(b)
    assert recovery.digest_code(a) != recovery.digest_code(a[:-1])
    assert a.encode() not in recovery.digest_code(a)


def test_what_is_not_a_code_digests_without_error() -> None:
    for typed in ("", "\ud800", "x" * 64, "\uff11\uff12\uff13\uff14"):
        assert len(recovery.digest_code(typed)) == 32
