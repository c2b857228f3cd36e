"""Invalidation across workers (cache/invalidation.py, cache/sweep.py) against a real Redis and
PostgreSQL: every worker's copy drops a revoked session before the revocation answers, or
within the sweep's bound when Redis cannot be reached; lagging or lost subscriptions are not
trusted."""

from __future__ import annotations

import asyncio
import logging
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from authgate.app import AuthGate
from authgate.cache.invalidation import SUBSCRIBER_NAME
from authgate.cache.state import StateCache
from authgate.cache.sweep import SWEEP_LEASE
from authgate.store.sessions import SessionStore
from authgate.store.users import UserStore
from tests.helpers import (
    REDIS_HOST,
    REDIS_PORT,
    REDIS_URL,
    Backend,
    FakeClock,
    Forwarder,
    PgTemplate,
    bearer,
    clean_env,
    delete_redis_prefix,
    gate_and_app,
    login,
    make_config,
    postgres_backend,
    principal,
    register,
    require_backend,
    running,
    state_cache,
    wait_live,
    warm,
)

# --- the per-worker copy and its invalidation --------------------------------------------


async def test_two_workers_copies_are_invalidated_before_logout_answers(
    pg_backend: Backend, clock: FakeClock
) -> None:
    # Two applications on one database and Redis prefix: two workers.
    gate_a, app_a = gate_and_app(pg_backend, clock)
    gate_b, app_b = gate_and_app(pg_backend, clock)
    async with running(app_a) as a, running(app_b) as b:
        await wait_live(gate_b)
        tokens, auth, sid, uid, local_a = await warm(gate_a, a, clock)
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
    gate_a, app_a = gate_and_app(pg_backend, clock)
    # The operator's side: no lifespan, no subscription (like `authgate users deactivate`).
    operator = AuthGate(make_config(pg_backend), clock=clock)
    async with running(app_a) as a:
        _tokens, auth, sid, uid, local_a = await warm(gate_a, a, clock)
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
    gate, app = gate_and_app(pg_backend, clock)
    async with running(app) as client:
        _tokens, auth, sid, uid, local = await warm(gate, client, clock)
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
        await silent.subscribe(cache.channel)  # receives, never acknowledges
        with caplog.at_level(logging.WARNING, logger="authgate"):
            await cache.revoke(["a" * 32])
        assert "1 of 1 worker(s) did not confirm" in caplog.text
        assert await client.get(f"{prefix}session:{'a' * 32}") == b"revoked"
    finally:
        await silent.aclose()
        await client.aclose()


# --- durable invalidation: retries and the database sweep (F3) ---------------------------


async def _until_status(
    client: httpx.AsyncClient, headers: dict[str, str], status: int, tries: int = 100
) -> int:
    """GET /me until it answers `status`, at most `tries` times 0.1 s apart; the tries used."""
    last = None
    for attempt in range(1, tries + 1):
        last = (await client.get("/auth/me", headers=headers)).status_code
        if last == status:
            return attempt
        await asyncio.sleep(0.1)
    raise AssertionError(f"GET /me never answered {status} in {tries} tries (last {last})")


async def test_logout_that_cannot_reach_redis_still_reaches_other_workers(
    pg_backend: Backend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker cut off from Redis revokes: the other worker's warm copy and the Redis entry
    it fills from are corrected by its database sweep within SWEEP_LEASE, and the cut-off
    worker's retry queue re-sends the tombstone once Redis is back."""
    forwarder = Forwarder(REDIS_HOST, REDIS_PORT)
    await forwarder.open()
    prefix = pg_backend.settings["cache_prefix"]
    gate_a, app_a = gate_and_app(pg_backend, clock, cache_url=forwarder.redis_url)
    gate_b, app_b = gate_and_app(pg_backend, clock)
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with running(app_a) as a, running(app_b) as b:
            await wait_live(gate_a)
            tokens, auth, sid, uid, local_b = await warm(gate_b, b, clock)
            assert await admin.get(f"{prefix}session:{sid}") != b"revoked"  # a live entry

            await forwarder.shut()  # A loses Redis; B keeps it
            with caplog.at_level(logging.ERROR, logger="authgate"):
                out = await a.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
            assert out.status_code == 200
            assert "could not record 1 revocation(s)" in caplog.text
            cache_a = state_cache(gate_a)
            assert cache_a.pending == 1

            # B heard nothing over Redis, but finds the revocation in the database.
            tries = await _until_status(b, auth, 401, tries=100)
            assert tries * 0.1 < 10  # bounded polling, not a timing claim
            assert local_b.get(sid, uid) is None
            assert await admin.get(f"{prefix}session:{sid}") == b"revoked"
            # A worker that reads Redis is refused too (the entry was overwritten).
            _gate_c, app_c = gate_and_app(pg_backend, clock)
            async with running(app_c) as c:
                assert (await c.get("/auth/me", headers=auth)).status_code == 401

            # Nothing changed since: B's sweeps drop nothing more (no work when idle).
            cache_b = state_cache(gate_b)
            generation = local_b.generation
            assert await cache_b.maintain_once()
            assert await cache_b.maintain_once()
            assert local_b.generation == generation

            # Redis comes back for A: its retry queue empties.
            await forwarder.open()
            for _ in range(100):
                if cache_a.pending == 0:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("A's retry queue never emptied")
            assert (await a.get("/auth/me", headers=auth)).status_code == 401
    finally:
        await forwarder.shut()
        await admin.aclose()


async def test_failed_invalidation_is_retried_until_redis_takes_it(
    pg_backend: Backend,
) -> None:
    """The retry queue on its own (no database sweep): the tombstone is written and the
    revocation published to the other workers once Redis is reachable again."""
    prefix = pg_backend.settings["cache_prefix"]
    forwarder = Forwarder(REDIS_HOST, REDIS_PORT)
    await forwarder.open()
    client = aioredis.Redis.from_url(forwarder.redis_url)
    admin = aioredis.Redis.from_url(REDIS_URL)
    cache = StateCache(client, prefix=prefix, op_timeout=0.5)
    listener = admin.pubsub()
    sid = "c" * 32
    try:
        await listener.subscribe(cache.channel)
        await cache.start()
        await forwarder.shut()
        await cache.revoke([sid])
        await cache.forget_user(5)
        assert cache.pending == 2
        # Meanwhile this worker answers the session as revoked without asking Redis.
        state = await cache.get(sid, 5)
        assert state is not None
        assert state.revoked

        await forwarder.open()
        for _ in range(100):
            if await admin.get(f"{prefix}session:{sid}") == b"revoked":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the tombstone was never written")
        heard: list[bytes] = []
        for _ in range(100):
            message = await listener.get_message(ignore_subscribe_messages=True, timeout=0.1)
            if message is not None:
                heard.append(message["data"])
            if any(sid.encode() in m for m in heard) and any(m.startswith(b"u ") for m in heard):
                break
        else:
            raise AssertionError(f"the revocation was never published: {heard}")
        assert cache.pending == 0
    finally:
        await cache.stop()
        await listener.aclose()
        await forwarder.shut()
        await client.aclose()
        await admin.aclose()


@pytest.fixture(params=["sqlite", "postgres"])
async def redis_backend(
    request: pytest.FixtureRequest, tmp_path: Path, pg_template: PgTemplate
) -> AsyncIterator[Backend]:
    """Either database, always with Redis (a state cache needs it): a SQLite file named by
    DATABASE_URL, or PostgreSQL."""
    if request.param == "postgres":
        async with postgres_backend(tmp_path / "data", pg_template) as pg:
            yield pg
        return
    require_backend()
    prefix = f"authgate-test-{secrets.token_hex(6)}:"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    try:
        yield Backend(
            "sqlite",
            data_dir,
            {
                "database_url": f"sqlite:///{data_dir / 'shared.db'}",
                "cache_url": REDIS_URL,
                "cache_prefix": prefix,
            },
        )
    finally:
        await delete_redis_prefix(prefix)


@pytest.mark.subprocess
async def test_operator_deactivation_without_a_cache_reaches_a_warm_copy(
    redis_backend: Backend, clock: FakeClock
) -> None:
    """`authgate users deactivate` run with DATABASE_URL but no CACHE_URL: it warns, and a
    worker whose copy holds the session refuses it within its sweep bound."""
    gate, app = gate_and_app(redis_backend, clock)
    cache = state_cache(gate)
    async with running(app) as client:
        _tokens, auth, sid, uid, local = await warm(gate, client, clock)
        # The registration itself is a user change the sweeps pass on: let it settle, then
        # warm the copy again, so that only the deactivation can take the session out of it.
        assert await cache.maintain_once()
        assert (await client.get("/auth/me", headers=auth)).status_code == 200
        assert local.get(sid, uid) is not None
        env = clean_env(
            {
                "AUTHGATE_DATA_DIR": str(redis_backend.data_dir),
                "DATABASE_URL": redis_backend.settings["database_url"],
            }
        )
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "authgate", "users", "deactivate", "ann@example.com"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "deactivated" in result.stdout
        assert "warning: CACHE_URL is not set" in result.stderr
        assert f"within {SWEEP_LEASE:.0f} s" in result.stderr

        await _until_status(client, auth, 401, tries=100)
        # The sweep also overwrote what Redis held (a worker reading Redis would refill from
        # it); polled, since the 401 may have come from the database before that sweep.
        admin = aioredis.Redis.from_url(REDIS_URL)
        try:
            prefix = redis_backend.settings["cache_prefix"]
            for _ in range(100):
                if await admin.get(f"{prefix}session:{sid}") == b"revoked":
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the Redis entry was never overwritten")
            assert await admin.get(f"{prefix}user:{uid}") is None
        finally:
            await admin.aclose()
        assert local.get(sid, uid) is None


async def test_copy_is_not_trusted_after_a_resubscribe_until_the_replay_completed(
    pg_backend: Backend, clock: FakeClock
) -> None:
    """A revocation committed while the subscription was down (and never published) is
    replayed from the database before the copy is used again."""
    gate, app = gate_and_app(pg_backend, clock)
    cache = state_cache(gate)
    changes = cache.sweeper.changes
    assert changes is not None
    held = asyncio.Event()
    release = asyncio.Event()
    real_since = changes.since

    async def gated_since(since: datetime) -> Any:
        if not release.is_set():
            held.set()
            await release.wait()
        return await real_since(since)

    async with running(app) as client:
        _tokens, auth, sid, _uid, local = await warm(gate, client, clock)
        admin = aioredis.Redis.from_url(REDIS_URL)
        try:
            changes.since = gated_since  # type: ignore[method-assign]
            # The session is revoked in the database only (as by a worker without Redis).
            async with gate.services.db.write() as s:
                assert await SessionStore(s).revoke(sid, clock(), "logout")
            for cid in [
                c["id"] for c in await admin.client_list() if c.get("name") == SUBSCRIBER_NAME
            ]:
                await admin.client_kill_filter(_id=cid)
            async with asyncio.timeout(10):
                await held.wait()  # a sweep is under way, the subscription may be back
            for _ in range(20):
                assert not local.live
                await asyncio.sleep(0.05)
            release.set()
            await wait_live(gate)
            assert (await client.get("/auth/me", headers=auth)).status_code == 401
        finally:
            release.set()
            await admin.aclose()


async def test_a_lagging_subscription_does_not_keep_a_copy_live(
    pg_backend: Backend, clock: FakeClock
) -> None:
    """Worker A's subscription delivers everything 3 s late (pongs included): A must not
    serve from its copy, so a logout on B is refused on A as soon as it answers."""
    forwarder = Forwarder(REDIS_HOST, REDIS_PORT, lag=3.0)
    await forwarder.open()
    _gate_a, app_a = gate_and_app(pg_backend, clock, cache_url=forwarder.redis_url)
    gate_b, app_b = gate_and_app(pg_backend, clock)
    try:
        async with running(app_a) as a, running(app_b) as b:
            await wait_live(gate_b)
            await register(b)
            tokens = await login(b)
            b.cookies.clear()
            auth = bearer(tokens["access_token"])
            await asyncio.sleep(4.0)  # setup: the lagging stream is flowing by now
            assert (await a.get("/auth/me", headers=auth)).status_code == 200
            assert (await a.get("/auth/me", headers=auth)).status_code == 200
            out = await b.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
            assert out.status_code == 200
            assert (await a.get("/auth/me", headers=auth)).status_code == 401
    finally:
        await forwarder.shut()


# --- one channel per Redis database (I6) ------------------------------------------------


async def test_deployments_on_different_redis_databases_do_not_hear_each_other(
    pg_backend: Backend,
) -> None:
    prefix = pg_backend.settings["cache_prefix"]
    base = REDIS_URL.rsplit("/", 1)[0]
    client0 = aioredis.Redis.from_url(f"{base}/0")
    client1 = aioredis.Redis.from_url(f"{base}/1")
    cache0 = StateCache(client0, prefix=prefix)
    cache1 = StateCache(client1, prefix=prefix)
    assert cache0.channel != cache1.channel
    sid = "d" * 32
    try:
        await cache0.start()
        await cache1.start()
        for _ in range(200):
            if cache0.local.live and cache1.local.live:
                break
            await asyncio.sleep(0.025)
        else:
            raise AssertionError("the subscriptions did not come up within 5 s")
        for cache in (cache0, cache1):
            cache.local.put(cache.local.generation, sid, principal(), None)
            assert cache.local.get(sid, 7) is not None
        await cache0.revoke([sid])
        assert cache0.local.get(sid, 7) is None
        assert cache1.local.get(sid, 7) is not None  # another deployment's session
        assert await client0.get(f"{prefix}session:{sid}") == b"revoked"
        assert await client1.get(f"{prefix}session:{sid}") is None
    finally:
        await cache0.stop()
        await cache1.stop()
        for client in (client0, client1):
            keys = [k async for k in client.scan_iter(match=prefix + "*", count=500)]
            if keys:
                await client.delete(*keys)
            await client.aclose()
