"""factors/sealing.py: AES-GCM sealing of the TOTP secrets. A round trip; any change to a
sealed value, another row's context, another label or a key we do not hold refuses to open;
a previous key opens and says so (the caller seals again)."""

from __future__ import annotations

import pytest

from authgate.factors.sealing import Sealer, SealError

OLD = b"the-old-secret-key-0123456789-0123456789"
NEW = b"the-new-secret-key-9876543210-9876543210"
LABEL = b"authgate/totp-secret/v1"
SECRET = b"JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
CONTEXT = b"totp:7"


def test_round_trip_under_the_current_key() -> None:
    sealer = Sealer(NEW, label=LABEL)
    sealed = sealer.seal(SECRET, CONTEXT)
    assert SECRET not in sealed
    assert sealer.open(sealed, CONTEXT) == (SECRET, False)
    assert sealer.seal(SECRET, CONTEXT) != sealed  # a fresh nonce each time


def test_any_changed_byte_refuses_to_open() -> None:
    sealer = Sealer(NEW, label=LABEL)
    sealed = sealer.seal(SECRET, CONTEXT)
    for index in range(len(sealed)):
        tampered = bytearray(sealed)
        tampered[index] ^= 0x01
        with pytest.raises(SealError):
            sealer.open(bytes(tampered), CONTEXT)
    for cut in (0, 1, 13, len(sealed) - 1):
        with pytest.raises(SealError):
            sealer.open(sealed[:cut], CONTEXT)


def test_another_rows_context_refuses_to_open() -> None:
    sealer = Sealer(NEW, label=LABEL)
    with pytest.raises(SealError):
        sealer.open(sealer.seal(SECRET, CONTEXT), b"totp:8")


def test_another_label_or_an_unknown_key_refuses_to_open() -> None:
    sealed = Sealer(NEW, label=LABEL).seal(SECRET, CONTEXT)
    with pytest.raises(SealError):
        Sealer(NEW, label=b"another purpose").open(sealed, CONTEXT)
    with pytest.raises(SealError):
        Sealer(OLD, label=LABEL).open(sealed, CONTEXT)


def test_a_previous_key_opens_and_says_so() -> None:
    sealed_by_old = Sealer(OLD, label=LABEL).seal(SECRET, CONTEXT)
    rotated = Sealer(NEW, [OLD], label=LABEL)
    assert rotated.open(sealed_by_old, CONTEXT) == (SECRET, True)
    resealed = rotated.seal(SECRET, CONTEXT)
    assert rotated.open(resealed, CONTEXT) == (SECRET, False)
    assert Sealer(NEW, label=LABEL).open(resealed, CONTEXT) == (SECRET, False)
