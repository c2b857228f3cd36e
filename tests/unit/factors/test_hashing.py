"""factors/hashing.py: the argon2 executor, its threads and its admission bound. What the
bound does to requests under load: processes/test_overload.py."""

from __future__ import annotations

import asyncio
from typing import Any


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
