"""`TokenStore.status`: what a one-time token is (live, expired, used, invalid), read-only, on
both backends. The pages a mailed link opens ask it on GET, which mail scanners send."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from authgate.store.db import Database
from authgate.store.models import OneTimeToken
from authgate.store.one_time import TokenStatus, TokenStore
from tests.helpers import FakeClock, new_digest, new_user


async def status(db: Database, purpose: str, digest: bytes, clock: FakeClock) -> TokenStatus:
    async with db.read() as s:
        return await TokenStore(s).status(purpose, digest, clock())


async def test_status_tells_live_expired_used_and_invalid(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    live, expiring, spent = new_digest(), new_digest(), new_digest()
    async with db.write() as s:
        tokens = TokenStore(s)
        for digest, ttl in ((live, 3600), (expiring, 60), (spent, 60)):
            await tokens.add(
                user_id=user.user_id,
                purpose="reset",
                digest=digest,
                now=clock(),
                expires_at=clock() + timedelta(seconds=ttl),
            )
        assert await tokens.spend("reset", spent, clock()) == user.user_id
    assert await status(db, "reset", live, clock) == "live"
    assert await status(db, "reset", expiring, clock) == "live"
    assert await status(db, "reset", spent, clock) == "used"
    assert await status(db, "verify", live, clock) == "invalid"  # another purpose's token
    assert await status(db, "reset", new_digest(), clock) == "invalid"
    clock.advance(61)
    assert await status(db, "reset", expiring, clock) == "expired"
    assert await status(db, "reset", spent, clock) == "used"  # spent stays used past expiry
    clock.advance(3600)
    assert await status(db, "reset", live, clock) == "expired"


async def test_status_changes_nothing(db: Database, clock: FakeClock) -> None:
    user = await new_user(db, clock())
    digest = new_digest()
    async with db.write() as s:
        await TokenStore(s).add(
            user_id=user.user_id,
            purpose="verify",
            digest=digest,
            now=clock(),
            expires_at=clock() + timedelta(seconds=600),
        )

    async def row() -> tuple[object, ...]:
        async with db.read() as s:
            found = await s.execute(select(OneTimeToken).where(OneTimeToken.digest == digest))
            token = found.scalar_one()
            return (token.used_at, token.expires_at, token.created_at, token.user_id)

    before = await row()
    for _ in range(3):
        assert await status(db, "verify", digest, clock) == "live"
    assert await row() == before
    async with db.write() as s:
        assert await TokenStore(s).spend("verify", digest, clock()) == user.user_id
