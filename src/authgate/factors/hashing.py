"""argon2id hashing, off the event loop: the executor every hash and verify runs on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from authgate.errors import Busy

T = TypeVar("T")

__all__ = ["ARGON2_MEMORY_KIB", "ARGON2_PARALLELISM", "ARGON2_TIME_COST", "PasswordHashing"]

# OWASP Password Storage Cheat Sheet, argon2id minimum: m=19 MiB, t=2, p=1.
ARGON2_MEMORY_KIB = 19_456
ARGON2_TIME_COST = 2
ARGON2_PARALLELISM = 1


def _start_threads(pool: concurrent.futures.ThreadPoolExecutor, n: int) -> None:
    """Start all `n` threads of `pool` now, and only ever hash on them.

    argon2 takes a 19 MiB block from malloc for every hash, and glibc keeps a freed block in
    the arena it came from. A thread started now, while the process has few threads, gets a
    malloc arena of its own (a new one, or a dead thread's); started on demand under load, it
    may be given the main arena, shared with the event loop, where the blocks fragment and
    pile up (measured: the main heap grew by two blocks, 161 MB after a login run instead of
    142). So each hash thread keeps exactly one block, reused by every hash it makes, and a
    worker holds at most one block per hash thread. (A process-wide cap on arenas would also
    bound them, but it is global: it would squeeze a host application's own threads.
    Pinning the mmap threshold keeps nothing, but costs a third of the hash rate: the kernel
    zeroes 19 MiB of fresh pages for every hash.)
    """
    barrier = threading.Barrier(n)
    for started in [pool.submit(barrier.wait, 30) for _ in range(n)]:
        started.result()


def _ignore(*_: float) -> None:
    return None


def _seconds_since(started: float) -> float:
    """A hash's duration for the moving average, kept within 1 ms .. 5 s."""
    return min(max(time.perf_counter() - started, 0.001), 5.0)


class PasswordHashing:
    """argon2id with fixed parameters; every hash and verify runs in a worker thread.

    At most one hash per core runs at once (argon2 at these parameters is CPU- and memory-
    bound; more threads than cores only add latency). In front of that sits a bounded
    admission queue: when more hashes are already waiting than can be done within `max_wait`
    seconds, the next one is refused at once with `Busy` (503 + Retry-After) instead of
    joining a queue that would turn overload into minute-long answers. The bound follows the
    time a hash really takes right now (a moving average, measured in the worker thread, so
    CPU contention from other workers or processes counts), not a figure from an idle start-
    up. Unknown-email logins pass the same gate, so a refusal says nothing about which
    accounts exist.
    """

    def __init__(
        self,
        *,
        memory_cost: int = ARGON2_MEMORY_KIB,
        time_cost: int = ARGON2_TIME_COST,
        parallelism: int = ARGON2_PARALLELISM,
        max_concurrency: int | None = None,
        max_wait: float = 0.5,
    ) -> None:
        self._hasher = PasswordHasher(
            time_cost=time_cost, memory_cost=memory_cost, parallelism=parallelism
        )
        concurrency = max_concurrency or os.cpu_count() or 1
        # One thread per core, each pulling the next hash from the pool's queue the moment it
        # finishes the last: no round trip through the event loop between two hashes, so a
        # busy event loop never delays the next hash.
        self._pool = concurrent.futures.ThreadPoolExecutor(
            concurrency, thread_name_prefix="authgate-hash"
        )
        _start_threads(self._pool, concurrency)
        # A real hash of a random password: login for an unknown email verifies against it,
        # so it costs exactly what a wrong password for a known email costs. Made on a hash
        # thread, like every other hash (see _start_threads).
        self._dummy_hash, took = self._pool.submit(self._measured_hash).result()
        self.seconds_per_hash = took
        #: Durations of the latest hashes at the current parameters (see `verify`).
        self._recent: deque[float] = deque([took], maxlen=64)
        self._concurrency = concurrency
        self._max_wait = max_wait
        self._pending = 0
        # What the metrics hear (`metrics.Metrics.connect`); nothing until then. `on_wait`
        # is called on a hash thread: what it is given must be thread-safe.
        self.on_wait: Callable[[float], None] = _ignore
        self.on_busy: Callable[[], None] = _ignore
        self.on_pending: Callable[[float], None] = _ignore

    @property
    def max_pending(self) -> int:
        """How many hashes may be running or waiting: what `concurrency` threads finish
        within `max_wait` at the current speed."""
        return max(
            self._concurrency, int(self._max_wait * self._concurrency / self.seconds_per_hash)
        )

    async def hash(self, password: str) -> str:
        return await self._admit(self._hasher.hash, password)

    async def verify(self, stored_hash: str | None, password: str) -> bool:
        """True when `password` matches; with `stored_hash=None` does the same work, False.

        A hash made with other (older, cheaper) parameters verifies faster than the current
        ones; when such a verification fails, the answer waits out the difference to the
        current cost, so a wrong password for an account with an old hash takes as long as
        one for an unknown email. (On success the caller re-hashes at the current cost.)
        """
        if stored_hash is None:
            await self._admit(self._verify, self._dummy_hash, password)
            return False
        if not self.needs_rehash(stored_hash):
            return await self._admit(self._verify, stored_hash, password)
        # Not representative of the current cost: kept out of the moving average.
        ok, took = await self._admit(self._verify_timed, stored_hash, password, measure=False)
        if not ok:
            # As long as a hash at the current parameters takes: one of the latest such
            # durations drawn at random, so the answer times follow their distribution
            # (under load a mean or a median would not).
            current = random.choice(self._recent)  # noqa: S311  # nosec B311 (no secret)
            await asyncio.sleep(max(0.0, current - took))
        return ok

    def check_admission(self) -> None:
        """Refuse now (`Busy`) what the queue would refuse later: called before the database
        work that precedes a hash, so an overloaded login costs nothing but this check."""
        if self._pending >= self.max_pending:
            self.on_busy()
            raise Busy()

    async def _admit(self, fn: Callable[..., T], *args: str, measure: bool = True) -> T:
        self.check_admission()
        self._pending += 1
        self.on_pending(self._pending)
        queued = time.perf_counter()
        try:
            # Cancelled while still queued (the client went away), the hash never runs.
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, self._timed, queued, measure, fn, *args
            )
        finally:
            self._pending -= 1
            self.on_pending(self._pending)

    def _timed(self, queued: float, measure: bool, fn: Callable[..., T], *args: str) -> T:
        started = time.perf_counter()
        self.on_wait(started - queued)
        if started - queued > self._max_wait:
            # Waited past the budget after all (the estimate was too hopeful): give the
            # core to a request that can still be answered in time.
            self.on_busy()
            raise Busy()
        try:
            return fn(*args)
        finally:
            if measure:
                took = _seconds_since(started)
                # Exponential moving average; a lost update between two threads is harmless.
                self.seconds_per_hash = 0.8 * self.seconds_per_hash + 0.2 * took
                self._recent.append(took)

    def _measured_hash(self) -> tuple[str, float]:
        started = time.perf_counter()
        value = self._hasher.hash(secrets.token_urlsafe(16))
        return value, _seconds_since(started)

    def needs_rehash(self, stored_hash: str) -> bool:
        try:
            return self._hasher.check_needs_rehash(stored_hash)
        except InvalidHashError:
            return True

    def _verify_timed(self, stored_hash: str, password: str) -> tuple[bool, float]:
        started = time.perf_counter()
        ok = self._verify(stored_hash, password)
        return ok, time.perf_counter() - started

    def _verify(self, stored_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(stored_hash, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
