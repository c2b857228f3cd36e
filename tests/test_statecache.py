"""The Redis session-state cache never outvotes the database on a revocation."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from authgate import create_app
from authgate.app import AuthGate
from authgate.models import User
from authgate.statecache import SUBSCRIBER_NAME, LocalState, StateCache
from authgate.stores import UserStore
from tests.conftest import (
    REDIS_URL,
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


# --- the per-worker copy and its invalidation --------------------------------------------


async def _wait_live(*gates: AuthGate) -> None:
    """Until every gate's invalidation subscription is confirmed (bounded)."""
    for _ in range(200):
        if all(g.services.state_cache and g.services.state_cache.local.live for g in gates):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the invalidation subscription did not come up within 5 s")


async def _warm(
    gate: AuthGate, client: httpx.AsyncClient, clock: FakeClock
) -> tuple[dict[str, str], dict[str, str], str, int, LocalState]:
    """Register and log in through `client`, then GET /me once so the worker's copy holds the
    session: (tokens, bearer header, session id, user id, that copy)."""
    await _wait_live(gate)
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    auth = bearer(tokens["access_token"])
    claims = gate.services.keys.verify_access(tokens["access_token"], now=clock())
    assert (await client.get("/auth/me", headers=auth)).status_code == 200
    local = gate.services.state_cache.local  # type: ignore[union-attr]
    assert local.get(claims.session_id, claims.user_id) is not None
    return tokens, auth, claims.session_id, claims.user_id, local


async def test_two_workers_copies_are_invalidated_before_logout_answers(
    pg_backend: Backend, clock: FakeClock
) -> None:
    # Two applications on one database and Redis prefix: two workers.
    gate_a, app_a = _app(pg_backend, clock)
    gate_b, app_b = _app(pg_backend, clock)
    async with running(app_a) as a, running(app_b) as b:
        await _wait_live(gate_b)
        tokens, auth, sid, uid, local_a = await _warm(gate_a, a, clock)
        assert (await b.get("/auth/me", headers=auth)).status_code == 200

        # The copy answers on its own: Redis emptied, the database untouched.
        await delete_redis_prefix(pg_backend.settings["cache_prefix"])
        assert (await a.get("/auth/me", headers=auth)).status_code == 200

        # Logout on B: by the time it answers, A has dropped the session (pub/sub + ack).
        out = await b.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        assert out.status_code == 200
        assert local_a.get(sid, uid) is None
        assert (await a.get("/auth/me", headers=auth)).status_code == 401
        assert (await b.get("/auth/me", headers=auth)).status_code == 401


async def test_deactivation_elsewhere_reaches_a_warm_copy_at_once(
    pg_backend: Backend, clock: FakeClock
) -> None:
    gate_a, app_a = _app(pg_backend, clock)
    # The operator's side: no lifespan, no subscription (like `authgate users deactivate`).
    operator = AuthGate(make_config(pg_backend), clock=clock)
    async with running(app_a) as a:
        _tokens, auth, sid, uid, local_a = await _warm(gate_a, a, clock)
        try:
            # A flag change (as confirm_verification makes it) drops the cached user...
            async with operator.services.db.write() as s:
                await UserStore(s).set_flags(uid, clock(), email_verified=True)
            await operator.services.user_changed(uid)
            assert local_a.get(sid, uid) is None
            me = await a.get("/auth/me", headers=auth)
            assert me.json()["email_verified"] is True
            assert local_a.get(sid, uid) is not None
            # ...and a deactivation revokes the sessions.
            await operator.accounts.set_active("ann@example.com", False)
        finally:
            await operator.cache.aclose()
            await operator.services.db.dispose()
        assert local_a.get(sid, uid) is None
        assert (await a.get("/auth/me", headers=auth)).status_code == 401


async def test_lost_subscription_clears_the_copy_until_it_is_back(
    pg_backend: Backend, clock: FakeClock
) -> None:
    gate, app = _app(pg_backend, clock)
    async with running(app) as client:
        _tokens, auth, sid, uid, local = await _warm(gate, client, clock)
        generation = local.generation

        # Redis drops the subscriber (as on a restart or a full output buffer).
        admin = aioredis.Redis.from_url(REDIS_URL)
        try:
            clients = await admin.client_list()
            ids = [c["id"] for c in clients if c.get("name") == SUBSCRIBER_NAME]
            assert ids
            for cid in ids:
                await admin.client_kill_filter(_id=cid)
        finally:
            await admin.aclose()
        for _ in range(200):
            if local.generation > generation + 1 and local.live:
                break  # cleared when lost, cleared again when subscribed anew
            await asyncio.sleep(0.025)
        else:
            raise AssertionError("the subscription did not come back within 5 s")
        assert local.get(sid, uid) is None  # nothing survived the gap
        assert (await client.get("/auth/me", headers=auth)).status_code == 200
        assert local.get(sid, uid) is not None


async def test_a_receiver_that_never_confirms_delays_a_revocation_only_boundedly(
    pg_backend: Backend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = pg_backend.settings["cache_prefix"]
    client = aioredis.Redis.from_url(REDIS_URL)
    silent = client.pubsub()
    cache = StateCache(client, prefix=prefix, ack_timeout=0.2)
    try:
        await silent.subscribe(f"{prefix}invalidate")  # receives, never acknowledges
        with caplog.at_level(logging.WARNING, logger="authgate"):
            await cache.revoke(["a" * 32])
        assert "1 of 1 worker(s) did not confirm" in caplog.text
        assert await client.get(f"{prefix}session:{'a' * 32}") == b"revoked"
    finally:
        await silent.aclose()
        await client.aclose()


# --- LocalState on its own ----------------------------------------------------------------


class _Monotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _user(user_id: int = 7) -> User:
    now = datetime.now(UTC)
    return User(
        id=user_id,
        email="ann@example.com",
        email_key="ann@example.com",
        password_hash="$argon2id$secret-hash",
        is_active=True,
        is_superuser=False,
        email_verified=False,
        created_at=now,
        updated_at=now,
    )


def test_local_state_answers_only_within_its_lease() -> None:
    t = _Monotonic()
    local = LocalState(ttl=60, lease=1.5, clock=t)
    assert local.get("s" * 32, 7) is None
    local.put(local.generation, "s" * 32, _user(), None)
    assert local.get("s" * 32, 7) is None  # not subscribed: nothing is stored
    local.reset(live=True)
    local.put(local.generation, "s" * 32, _user(), None)
    hit = local.get("s" * 32, 7)
    assert hit is not None
    assert hit[0].password_hash == ""  # the copy never holds the hash
    assert local.get("s" * 32, 8) is None  # another user's token for that session id
    t.t += 1.6  # the subscription went quiet (pings every 0.5 s)
    assert local.get("s" * 32, 7) is None
    local.heard()
    assert local.get("s" * 32, 7) is not None
    t.t += 61  # and entries expire with the ttl
    local.heard()
    assert local.get("s" * 32, 7) is None


def test_local_state_discards_a_fill_that_raced_an_invalidation() -> None:
    local = LocalState(ttl=60, clock=_Monotonic())
    local.reset(live=True)
    generation = local.generation  # a reader starts loading the session...
    local.drop_sessions(["s" * 32])  # ...the session is revoked meanwhile...
    local.put(generation, "s" * 32, _user(), None)  # ...and the reader's fill arrives
    assert local.get("s" * 32, 7) is None
    generation = local.generation
    local.drop_user(7)
    local.put(generation, "s" * 32, _user(), None)
    assert local.get("s" * 32, 7) is None


def test_local_state_is_bounded() -> None:
    local = LocalState(ttl=60, max_entries=3, clock=_Monotonic())
    local.reset(live=True)
    for i in range(5):
        local.put(local.generation, f"{i:032d}", _user(i), None)
    assert local.get(f"{0:032d}", 0) is None
    assert local.get(f"{4:032d}", 4) is not None
