"""`AdminStore` on both backends: the email search matches a substring literally (LIKE's `%`,
`_` and `\\` are plain characters) and without regard to case, pages go by id after the
cursor's id, and a second factor is an app confirmed or any passkey (a pending app is none)."""

from __future__ import annotations

from authgate.store.admin import AdminStore, like_pattern
from authgate.store.db import Database
from authgate.store.models import Passkey, TotpFactor
from tests.helpers import FakeClock, new_user

KEYS = (
    "ann@example.com",
    "a_n@example.com",
    "a%n@example.com",
    "a\\n@example.com",
    "bob@example.org",
)


async def _emails(db: Database, query: str | None, after: int | None = None) -> list[str]:
    async with db.read() as s:
        rows = await AdminStore(s).page(query=query, after_id=after, limit=100)
    return [r.user.email_key for r in rows]


def test_like_pattern_escapes_the_wildcards_and_the_escape() -> None:
    assert like_pattern("a_b%c\\d") == "%a\\_b\\%c\\\\d%"


async def test_the_search_matches_a_substring_literally(db: Database, clock: FakeClock) -> None:
    for key in KEYS:
        await new_user(db, clock(), key)
    assert await _emails(db, None) == list(KEYS)
    assert await _emails(db, "_") == ["a_n@example.com"]
    assert await _emails(db, "%") == ["a%n@example.com"]
    assert await _emails(db, "\\") == ["a\\n@example.com"]
    assert await _emails(db, "EXAMPLE.ORG") == ["bob@example.org"]
    assert await _emails(db, "zzz") == []
    async with db.read() as s:
        first, second = await AdminStore(s).page(query="example.com", after_id=None, limit=2)
        rest = await AdminStore(s).page(query="example.com", after_id=second.user.id, limit=100)
    assert first.user.id < second.user.id < rest[0].user.id
    assert [r.user.email_key for r in rest] == ["a%n@example.com", "a\\n@example.com"]


async def test_a_second_factor_is_a_confirmed_app_or_a_passkey(
    db: Database, clock: FakeClock
) -> None:
    app, pending, passkey, none = [
        (await new_user(db, clock(), f"{n}@example.com")).user_id
        for n in ("app", "pending", "passkey", "none")
    ]
    async with db.write() as s:
        s.add(TotpFactor(user_id=app, secret_sealed=b"x", created_at=clock(), confirmed_at=clock()))
        s.add(TotpFactor(user_id=pending, secret_sealed=b"x", created_at=clock()))
        s.add(
            Passkey(
                user_id=passkey,
                credential_id=b"credential",
                public_key=b"key",
                sign_count=0,
                device_type="single_device",
                backed_up=False,
                name="key",
                created_at=clock(),
            )
        )
    async with db.read() as s:
        store = AdminStore(s)
        assert [await store.has_factor(u) for u in (app, pending, passkey, none, 999)] == [
            True,
            False,
            True,
            False,
            False,
        ]
        found = await store.user(passkey)
        assert found is not None
        assert found.has_factor
        assert await store.user(999) is None
        listed = {
            r.user.id: r.has_factor for r in await store.page(query=None, after_id=None, limit=9)
        }
    assert listed == {app: True, pending: False, passkey: True, none: False}
