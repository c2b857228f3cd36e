"""The rate-limit counters on both backends: the database's (store/limits.py), and Redis' on the
PostgreSQL + Redis backend (cache/counters.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from authgate.app import AuthGate
from authgate.cache.counters import RedisCounters
from authgate.store.limits import SqlCounters
from tests.helpers import Backend, FakeClock, make_config


@contextlib.asynccontextmanager
async def gate_for(backend: Backend, clock: FakeClock) -> AsyncIterator[AuthGate]:
    gate = AuthGate(make_config(backend, rate_limits=True), clock=clock)
    async with gate.lifespan():
        yield gate


def stores_of(gate: AuthGate, backend: Backend) -> list[Any]:
    stores: list[Any] = [SqlCounters(gate.services.db)]
    if backend.name == "postgres":
        stores.append(RedisCounters(gate.cache.client, prefix=backend.settings["cache_prefix"]))  # type: ignore[attr-defined]
    return stores


async def test_store_counts_concurrent_hits_exactly_and_gives_back_to_its_window(
    backend: Backend, clock: FakeClock
) -> None:
    async with gate_for(backend, clock) as gate:
        for store in stores_of(gate, backend):
            now = clock()
            hits = await asyncio.gather(
                *(store.hit("t:burst", limit=10, window=60, now=now) for _ in range(40))
            )
            assert sum(h.allowed for h in hits) == 10, type(store).__name__
            assert sorted(h.hits for h in hits if h.allowed) == list(range(1, 11))
            refused = [h for h in hits if not h.allowed]
            assert {h.retry_after(now) for h in refused} == {60}
            assert await store.count("t:burst", now) == 10
            first = next(h for h in hits if h.allowed)
            await store.give_back("t:burst", first.window_end)
            assert await store.count("t:burst", now) == 9
            # A new window: a slot taken in the old one is not given back to it.
            later = now + timedelta(hours=1)
            fresh = await store.hit("t:burst", limit=10, window=60, now=later)
            assert fresh.allowed
            assert fresh.hits == 1
            await store.give_back("t:burst", first.window_end)
            assert await store.count("t:burst", later) == 1
            await store.clear("t:burst")
            assert await store.count("t:burst", later) == 0
