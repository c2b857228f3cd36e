"""`services/admin.Cursors` on its own: a cursor round-trips to its id, says nothing readable,
and every altered byte, another listing, other filters, another secret key and any text that
is not one are `BadRequest` (a 400), never an id."""

from __future__ import annotations

import base64

import pytest

from authgate.errors import BadRequest
from authgate.services.admin import MAX_ID, Cursors

SECRET = b"k" * 32


@pytest.mark.parametrize("last_id", [1, 42, 2**31, MAX_ID])
def test_a_cursor_round_trips_to_its_id(last_id: int) -> None:
    cursors = Cursors(SECRET)
    cursor = cursors.encode("users", "ann", last_id)
    assert cursors.decode("users", "ann", cursor) == last_id
    assert str(last_id) not in cursor
    assert "ann" not in cursor
    assert len(cursor) == 32  # 24 bytes in base64url, unpadded


def test_every_altered_byte_is_refused() -> None:
    cursors = Cursors(SECRET)
    raw = bytearray(base64.urlsafe_b64decode(cursors.encode("users", "", 7) + "=="))
    for index in range(len(raw)):
        for bit in (0x01, 0x80):
            altered = bytearray(raw)
            altered[index] ^= bit
            text = base64.urlsafe_b64encode(bytes(altered)).rstrip(b"=").decode()
            with pytest.raises(BadRequest):
                cursors.decode("users", "", text)


def test_stray_characters_in_a_cursor_are_refused() -> None:
    cursors = Cursors(SECRET)
    cursor = cursors.encode("users", "", 7)
    for text in (cursor + "!", "!" + cursor, cursor[:16] + "\n" + cursor[16:], cursor + "=="):
        with pytest.raises(BadRequest):
            cursors.decode("users", "", text)


def test_a_cursor_belongs_to_its_listing_filters_and_key() -> None:
    cursor = Cursors(SECRET).encode("users", "ann", 7)
    with pytest.raises(BadRequest):
        Cursors(SECRET).decode("audit", "ann", cursor)
    with pytest.raises(BadRequest):
        Cursors(SECRET).decode("users", "bob", cursor)
    with pytest.raises(BadRequest):
        Cursors(b"another secret key, 32 bytes....").decode("users", "ann", cursor)


@pytest.mark.parametrize(
    "text",
    ["", "A", "!!!!", "é" * 8, "A" * 31, "A" * 33, "A" * 64, "AAAA====", "\x00" * 32, "A!" * 16],
)
def test_text_that_is_no_cursor_is_refused(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        Cursors(SECRET).decode("users", "", text)
    assert refused.value.status_code == 400
    assert refused.value.detail == "Invalid cursor."
