"""The session-state tiers (cache/state.py) against a real Redis and PostgreSQL: the cache is
used, never outvotes the database on a revocation, and every tier answers alike."""

from __future__ import annotations

import json
from datetime import timedelta

import redis.asyncio as aioredis

from authgate.cache.state import StateCache
from authgate.principal import SessionState
from authgate.store.users import UserStore
from tests.helpers import (
    REDIS_URL,
    Backend,
    FakeClock,
    bearer,
    delete_redis_prefix,
    gate_and_app,
    login,
    principal,
    register,
    running,
    state_cache,
    wait_live,
)


async def test_cache_is_used_and_revocation_wins_over_a_stale_fill(
    pg_backend: Backend, clock: FakeClock
) -> None:
    gate, app = gate_and_app(pg_backend, clock)
    cache = state_cache(gate)
    async with running(app) as client:
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200
        claims = gate.services.keys.verify_access(tokens["access_token"], now=clock())
        cached = await cache.get(claims.session_id, claims.user_id)
        assert cached is not None
        assert cached.principal is not None
        assert not cached.revoked

        # A reader that loaded the session just before the logout fills the cache after it:
        # SET NX cannot overwrite the tombstone.
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        await cache.put(claims.session_id, cached.principal, None)
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 401


async def test_redis_emptied_does_not_revive_a_revoked_session(
    pg_backend: Backend, clock: FakeClock
) -> None:
    _gate, app = gate_and_app(pg_backend, clock)
    async with running(app) as client:
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        await delete_redis_prefix(pg_backend.settings["cache_prefix"])
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 401


async def test_user_changes_reach_cached_users_at_once(
    pg_backend: Backend, clock: FakeClock
) -> None:
    gate, app = gate_and_app(pg_backend, clock)
    async with running(app) as client:
        user = await register(client)
        tokens = await login(client)
        client.cookies.clear()
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.json()["is_active"] is True  # now cached
        await gate.accounts.set_active("ann@example.com", False)
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 401

        await gate.accounts.set_active("ann@example.com", True)
        fresh = await login(client)
        client.cookies.clear()
        me = await client.get("/auth/me", headers=bearer(fresh["access_token"]))
        assert me.json()["email_verified"] is False  # cached now
        # What confirm_verification does: change the row, then drop the cached user.
        async with gate.services.db.write() as s:
            await UserStore(s).set_flags(user["id"], clock(), email_verified=True)
        await gate.services.user_changed(user["id"])
        me = await client.get("/auth/me", headers=bearer(fresh["access_token"]))
        assert me.json()["email_verified"] is True


async def test_unreachable_cache_falls_back_to_the_database(
    pg_backend: Backend, clock: FakeClock
) -> None:
    # Rate limits off, so the state cache is the only user of the closed Redis port.
    _gate, app = gate_and_app(
        pg_backend, clock, cache_url="redis://127.0.0.1:1/0", rate_limits=False
    )
    async with running(app) as client:
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 401


async def test_every_tier_answers_get_me_with_the_same_bytes(
    pg_backend: Backend, clock: FakeClock
) -> None:
    """The database, Redis and the worker's copy each answer GET /me, byte for byte alike,
    and the Redis entry rebuilds the principal faithfully (`updated_at` included)."""
    gate, app = gate_and_app(pg_backend, clock)
    cache = state_cache(gate)
    async with running(app) as client:
        await wait_live(gate)
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        auth = bearer(tokens["access_token"])
        claims = gate.services.keys.verify_access(tokens["access_token"], now=clock())
        sid, uid = claims.session_id, claims.user_id
        async with gate.services.db.write() as s:  # updated_at moves past created_at
            await UserStore(s).set_flags(uid, clock() + timedelta(seconds=90), is_superuser=True)
        await gate.services.user_changed(uid)
        assert await cache.maintain_once()  # the sweeps have passed these changes on

        from_database = await client.get("/auth/me", headers=auth)
        assert from_database.status_code == 200
        state = cache.peek(sid, uid)
        assert state is not None
        from_copy = await client.get("/auth/me", headers=auth)
        cache.local.reset(live=True)  # the copy forgets: Redis answers
        from_redis = await client.get("/auth/me", headers=auth)
        assert cache.local.get(sid, uid) is not None  # refilled from Redis
        assert from_database.content == from_copy.content == from_redis.content
        assert from_database.json()["is_superuser"] is True

        cached = await cache.get(sid, uid)
        assert cached is not None
        assert cached.principal == state.principal
        assert cached.principal.updated_at > cached.principal.created_at


async def test_a_user_entry_without_updated_at_is_a_miss(pg_backend: Backend) -> None:
    """An entry an older version wrote (no `updated`) is not rebuilt with a guessed value:
    the database answers until it expires."""
    prefix = pg_backend.settings["cache_prefix"]
    client = aioredis.Redis.from_url(REDIS_URL)
    cache = StateCache(client, prefix=prefix)
    sid = "e" * 32
    try:
        await client.set(f"{prefix}session:{sid}", "7:", ex=60)
        old = {"email": "a@b.c", "active": True, "superuser": False, "verified": False}
        await client.set(f"{prefix}user:7", json.dumps({**old, "created": 1.5e9}), ex=60)
        cached = await cache.get(sid, 7)
        assert cached is not None
        assert not cached.revoked
        assert cached.principal is None
        loads: list[str] = []

        async def load(session_id: str, user_id: int) -> SessionState | None:
            loads.append(session_id)
            return SessionState(principal(user_id), False, None)

        state = await cache.lookup(sid, 7, load=load)
        assert state is not None
        assert state.principal == principal(7)
        assert loads == [sid]
    finally:
        await client.delete(f"{prefix}session:{sid}", f"{prefix}user:7")
        await client.aclose()
