"""Overload: password hashing sits behind a bounded admission queue. What cannot be served
within the wait budget is refused at once with 503 + Retry-After, never left to time out."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from sqlalchemy import func, select

from authgate import create_app
from authgate.store.db import Database
from authgate.store.models import User
from tests.conftest import PASSWORD, Backend, FakeClock, make_config, register, running


def _overloadable_app(backend: Backend, clock: FakeClock) -> FastAPI:
    """An app whose queue admits 4 hashes: a one-second budget at an assumed 0.5 s a hash on
    2 threads. Thirty requests at once then must see both answers, whatever the machine."""
    app = create_app(make_config(backend, hash_max_wait=1.0, hash_threads=2), clock=clock)
    app.state.authgate.services.hashing.seconds_per_hash = 0.5
    return app


async def test_logins_beyond_the_queue_get_503_busy(backend: Backend, clock: FakeClock) -> None:
    app = _overloadable_app(backend, clock)
    async with running(app) as client:
        await register(client)
        app.state.authgate.services.hashing.seconds_per_hash = 0.5  # after registering

        async def attempt(i: int) -> tuple[int, dict[str, str], dict[str, str]]:
            email = "ann@example.com" if i % 2 else f"ghost{i}@example.com"
            response = await client.post(
                "/auth/login", json={"email": email, "password": "wrong password"}
            )
            return response.status_code, dict(response.headers), response.json()

        async with asyncio.timeout(120):
            results = await asyncio.gather(*(attempt(i) for i in range(40)))
        codes = [code for code, _, _ in results]
        assert set(codes) == {401, 503}, codes
        for code, headers, body in results:
            if code == 503:
                assert headers["retry-after"] == "1"
                assert body == {"detail": "The service is busy; try again shortly.", "code": "busy"}
        # Unknown and known emails are refused alike: the queue does not look at the account.
        busy_known = sum(1 for i, r in enumerate(results) if r[0] == 503 and i % 2)
        busy_unknown = sum(1 for i, r in enumerate(results) if r[0] == 503 and not i % 2)
        assert busy_known > 0
        assert busy_unknown > 0
        # Once the burst is over, logins are served again.
        response = await client.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert response.status_code == 200


async def test_refused_registrations_store_nothing(backend: Backend, clock: FakeClock) -> None:
    async with running(_overloadable_app(backend, clock)) as client, asyncio.timeout(120):
        responses = await asyncio.gather(
            *(
                client.post(
                    "/auth/register", json={"email": f"u{i}@example.com", "password": PASSWORD}
                )
                for i in range(30)
            )
        )
    codes = [r.status_code for r in responses]
    assert set(codes) == {201, 503}, codes
    db = Database(make_config(backend))
    try:
        async with db.read() as s:
            stored = await s.scalar(select(func.count()).select_from(User))
    finally:
        await db.dispose()
    assert stored == codes.count(201)


def test_queue_bound_follows_the_measured_hash_time() -> None:
    from authgate.factors.hashing import PasswordHashing

    hashing = PasswordHashing(max_concurrency=2, max_wait=0.5)
    assert 0.001 <= hashing.seconds_per_hash <= 5.0
    # The bound is what two threads finish within half a second at the current speed…
    hashing.seconds_per_hash = 0.02
    assert hashing.max_pending == 50
    # …and shrinks when hashing slows down (another worker on the same cores, a noisy host).
    hashing.seconds_per_hash = 0.1
    assert hashing.max_pending == 10
    hashing.seconds_per_hash = 5.0
    assert hashing.max_pending == 2


async def test_the_average_follows_real_hash_times() -> None:
    from authgate.factors.hashing import PasswordHashing

    hashing = PasswordHashing(max_concurrency=1, max_wait=0.5)
    hashing.seconds_per_hash = 5.0  # as if the last hashes had been very slow
    for _ in range(30):
        await hashing.hash("correct horse battery")
    assert hashing.seconds_per_hash < 1.0  # it came down to what hashing costs now


async def test_hashes_run_on_the_hash_threads_and_a_cancelled_one_never_runs() -> None:
    import threading

    from authgate.factors.hashing import PasswordHashing

    hashing = PasswordHashing(max_concurrency=1, max_wait=30)
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    def slow(password: str) -> str:
        ran.append(threading.current_thread().name)
        started.set()
        release.wait(10)
        return password

    first = asyncio.ensure_future(hashing._admit(slow, "first"))
    queued = asyncio.ensure_future(hashing._admit(slow, "queued"))
    await asyncio.to_thread(started.wait, 10)  # the first hash holds the only thread
    queued.cancel()  # its client went away while it waited for a core
    # The cancel reaches the executor's queue in the loop's next iteration (asyncio chains
    # the futures with call_soon); only then may the busy thread move on.
    await asyncio.sleep(0)
    release.set()
    assert await first == "first"
    await asyncio.gather(queued, return_exceptions=True)
    assert queued.cancelled()
    assert await hashing._admit(slow, "after") == "after"
    assert ran == ["authgate-hash_0", "authgate-hash_0"]  # "queued" never ran
    assert hashing._pending == 0


def test_every_hash_runs_on_a_hash_thread_the_start_up_hash_too(monkeypatch: Any) -> None:
    # The event loop's thread never hashes, so its malloc arena never keeps a 19 MiB block.
    import threading

    from argon2 import PasswordHasher

    from authgate.factors.hashing import PasswordHashing

    threads: list[str] = []
    real = PasswordHasher.hash

    def spy(self: PasswordHasher, password: str | bytes, *, salt: bytes | None = None) -> str:
        threads.append(threading.current_thread().name)
        return real(self, password, salt=salt)

    monkeypatch.setattr(PasswordHasher, "hash", spy)
    hashing = PasswordHashing(max_concurrency=1)
    asyncio.run(hashing.hash("correct horse battery"))
    assert threads == ["authgate-hash_0", "authgate-hash_0"]


def test_all_hash_threads_start_with_the_gate() -> None:
    # Started now, each gets a malloc arena of its own instead of, under load, the event
    # loop's (see passwords._start_threads).
    from authgate.factors.hashing import PasswordHashing

    hashing = PasswordHashing(max_concurrency=3)
    names = sorted(t.name for t in hashing._pool._threads)
    assert names == ["authgate-hash_0", "authgate-hash_1", "authgate-hash_2"]
