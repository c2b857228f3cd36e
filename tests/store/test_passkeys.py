"""`PasskeyStore` on both backends: a challenge is taken once (also by racing requests) and
never after it expired; a counter only grows, once per value under concurrency; a user's
passkeys are the user's alone; `purge` removes the challenges of unfinished ceremonies."""

from __future__ import annotations

import asyncio
import secrets

from sqlalchemy import func, select

from authgate.store.db import Database
from authgate.store.models import WebAuthnChallenge
from authgate.store.passkeys import PasskeyInfo, PasskeyStore
from authgate.store.purge import purge
from tests.helpers import FakeClock, new_digest, new_user


async def _challenge(db: Database, clock: FakeClock, purpose: str = "login") -> bytes:
    binding = new_digest()
    async with db.write() as s:
        await PasskeyStore(s).put_challenge(
            binding=binding, purpose=purpose, user_id=None, challenge=b"c" * 64, now=clock()
        )
    return binding


async def _take(
    db: Database, binding: bytes, clock: FakeClock, purpose: str = "login"
) -> tuple[int | None, bytes] | None:
    async with db.write() as s:
        return await PasskeyStore(s).take_challenge(binding, purpose, clock())


async def _add(db: Database, user_id: int, clock: FakeClock, name: str = "key") -> PasskeyInfo:
    async with db.write() as s:
        added = await PasskeyStore(s).add(
            user_id,
            credential_id=secrets.token_bytes(16),
            public_key=b"k" * 77,
            sign_count=0,
            device_type="single_device",
            backed_up=False,
            transports="internal",
            name=name,
            now=clock(),
        )
    assert added is not None
    return added


async def test_a_challenge_is_taken_once_even_by_racing_requests(
    db: Database, clock: FakeClock
) -> None:
    binding = await _challenge(db, clock)
    assert await _take(db, binding, clock, "register") is None  # another purpose: not it
    results = await asyncio.gather(*(_take(db, binding, clock) for _ in range(8)))
    assert [r for r in results if r is not None] == [(None, b"c" * 64)]


async def test_an_expired_challenge_is_refused_and_gone(db: Database, clock: FakeClock) -> None:
    live = await _challenge(db, clock)
    stale = await _challenge(db, clock)
    clock.advance(299)
    assert await _take(db, live, clock) is not None
    clock.advance(1)  # 300 s after it was made: over
    assert await _take(db, stale, clock) is None
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(WebAuthnChallenge)) == 0


async def test_purge_removes_expired_challenges_only(db: Database, clock: FakeClock) -> None:
    old = [await _challenge(db, clock) for _ in range(3)]
    clock.advance(200)
    fresh = await _challenge(db, clock)
    clock.advance(150)
    result = await purge(db, clock(), batch_size=2)
    assert result.webauthn_challenges == 3
    for binding in old:
        assert await _take(db, binding, clock) is None
    assert await _take(db, fresh, clock) is not None


async def test_the_counter_only_grows_once_per_value(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    passkey = await _add(db, user.user_id, clock)

    async def advance(count: int) -> bool:
        async with db.write() as s:
            return await PasskeyStore(s).advance(passkey.id, count, clock())

    assert await advance(0)  # no counter (0 then 0): accepted, and again
    assert await advance(0)
    results = await asyncio.gather(*(advance(7) for _ in range(6)))
    assert results.count(True) == 1
    assert not await advance(7)
    assert not await advance(3)
    assert not await advance(0)  # a counter back to 0 after it counted: refused
    assert await advance(8)


async def test_a_users_passkeys_are_theirs_alone(db: Database, clock: FakeClock) -> None:
    ann = await new_user(db, clock(), "ann@example.com")
    bob = await new_user(db, clock(), "bob@example.com")
    mine = await _add(db, ann.user_id, clock, "mine")
    theirs = await _add(db, bob.user_id, clock, "theirs")
    async with db.write() as s:
        store = PasskeyStore(s)
        assert await store.rename(ann.user_id, theirs.id, "stolen") is None
        assert not await store.remove(ann.user_id, theirs.id)
        assert [p.name for p in await store.listing(ann.user_id)] == ["mine"]
        renamed = await store.rename(ann.user_id, mine.id, "renamed")
        assert renamed is not None
        assert renamed.name == "renamed"
        assert await store.remove(ann.user_id, mine.id)
        assert await store.listing(ann.user_id) == []
        assert [p.name for p in await store.listing(bob.user_id)] == ["theirs"]


async def test_a_credential_id_is_registered_once(db: Database, clock: FakeClock) -> None:
    ann = await new_user(db, clock(), "ann@example.com")
    bob = await new_user(db, clock(), "bob@example.com")
    credential_id = secrets.token_bytes(16)
    for user_id, expected in ((ann.user_id, True), (bob.user_id, False)):
        async with db.write() as s:
            added = await PasskeyStore(s).add(
                user_id,
                credential_id=credential_id,
                public_key=b"k",
                sign_count=0,
                device_type="single_device",
                backed_up=False,
                transports=None,
                name="x",
                now=clock(),
            )
        assert (added is not None) is expected
    async with db.read() as s:
        found = await PasskeyStore(s).by_credential(credential_id)
    assert found is not None
    assert found.user_id == ann.user_id
