"""The Redis session-state cache never outvotes the database on a revocation."""

from __future__ import annotations

from fastapi import FastAPI

from authgate import create_app
from authgate.app import AuthGate
from authgate.stores import UserStore
from tests.conftest import (
    Backend,
    FakeClock,
    bearer,
    delete_redis_prefix,
    login,
    make_config,
    register,
    running,
)


def _app(backend: Backend, clock: FakeClock, **overrides: object) -> tuple[AuthGate, FastAPI]:
    app = create_app(make_config(backend, **overrides), clock=clock)
    return app.state.authgate, app


async def test_cache_is_used_and_revocation_wins_over_a_stale_fill(
    pg_backend: Backend, clock: FakeClock
) -> None:
    gate, app = _app(pg_backend, clock)
    cache = gate.services.state_cache
    assert cache is not None
    async with running(app) as client:
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200
        claims = gate.services.keys.verify_access(tokens["access_token"], now=clock())
        cached = await cache.get(claims.session_id, claims.user_id)
        assert cached is not None
        assert cached.user is not None
        assert not cached.revoked

        # A reader that loaded the session just before the logout fills the cache after it:
        # SET NX cannot overwrite the tombstone.
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        await cache.put(claims.session_id, cached.user, None)
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 401


async def test_redis_emptied_does_not_revive_a_revoked_session(
    pg_backend: Backend, clock: FakeClock
) -> None:
    _gate, app = _app(pg_backend, clock)
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
    gate, app = _app(pg_backend, clock)
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
    _gate, app = _app(pg_backend, clock, cache_url="redis://127.0.0.1:1/0", rate_limits=False)
    async with running(app) as client:
        await register(client)
        tokens = await login(client)
        client.cookies.clear()
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 401
