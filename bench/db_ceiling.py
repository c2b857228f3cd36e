"""The database's ceiling for refresh: authgate's own rotation statement, run by a minimal
asyncpg client with as many connections as authgate's pools hold.

The statement is not copied: `authgate.store.rotation_sql.rotation_statement()` is compiled
for the asyncpg dialect here, exactly as authgate sends it (one autocommitted statement per
rotation on PostgreSQL). Each connection prepares it once and then rotates its share of fresh
tokens (one session each, loaded by `common.load_refresh_tokens`) as fast as PostgreSQL
answers; digests and parameters are computed before the clock starts, so what is measured is
PostgreSQL (and one round trip per rotation), not this client. The ratio authgate / ceiling
then says how much authgate adds on top of the database on any machine.

`variant` builds the statement without a feature (`activity=False`: no last use of the session
recorded; `budget=False`: no per-session refresh limit), to measure what each costs the
database in the same run.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import common as c


def _pool_size() -> int:
    from authgate.config.operations import OperationsSettings

    size = OperationsSettings.model_fields["db_pool_size"].default
    assert isinstance(size, int)
    return size


#: authgate's default `AUTHGATE_DB_POOL_SIZE`: the connections one worker's pool holds.
POOL_SIZE = _pool_size()

VARIANTS: dict[str, dict[str, bool]] = {
    "full": {},
    "no-activity": {"activity": False},
    "no-budget": {"budget": False},
}


@dataclass(frozen=True)
class Statement:
    sql: str
    names: tuple[str, ...]
    #: The statement's own literal parameters (`refresh_count + 1`, …).
    literals: dict[str, Any]


def statement(variant: str = "full") -> Statement:
    """authgate's PostgreSQL rotation statement as its driver receives it: SQL with $n
    placeholders and the parameter names in their order."""
    from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg

    from authgate.store.rotation_sql import rotation_statement

    compiled = rotation_statement(**VARIANTS[variant]).compile(dialect=PGDialect_asyncpg())
    assert compiled.positiontup is not None
    return Statement(str(compiled), tuple(compiled.positiontup), dict(compiled.params))


def _params(stmt: Statement, token_digest: bytes, now: datetime) -> list[Any]:
    from authgate.tokens.keys import digest

    values: dict[str, Any] = stmt.literals | {
        "token_digest": token_digest,
        "new_digest": digest(secrets.token_urlsafe(32)),
        "now": now,
        "refresh_end": now + timedelta(days=14),
        "ip": c.HOST,
        "user_agent": "wrk",
        # authgate's default per-session limit (10/minute): one rotation per session here.
        "window_floor": now - timedelta(seconds=60),
        "burst": 10,
    }
    return [values[name] for name in stmt.names]


async def _run(
    database_url: str, stmt: Statement, digests: list[bytes], connections: int, seconds: float
) -> c.Measurement:
    now = datetime.now(UTC)
    params = [_params(stmt, d, now) for d in digests]
    conns = [await asyncpg.connect(database_url) for _ in range(connections)]
    latencies: list[float] = []
    errors = 0
    try:
        prepared = [await conn.prepare(stmt.sql) for conn in conns]
        start = asyncio.Event()
        deadline = 0.0

        async def rotate(k: int) -> None:
            nonlocal errors
            await start.wait()
            for args in params[k::connections]:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    return
                row = await prepared[k].fetchrow(*args)
                latencies.append(time.perf_counter() - t0)
                if row is None or not row["rotated"]:
                    errors += 1

        tasks = [asyncio.create_task(rotate(k)) for k in range(connections)]
        started = time.perf_counter()
        deadline = started + seconds
        start.set()
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
    finally:
        for conn in conns:
            await conn.close()
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    return c.Measurement(
        requests=len(latencies),
        seconds=elapsed,
        p50_ms=pct(0.5) if latencies else 0.0,
        p99_ms=pct(0.99) if latencies else 0.0,
        errors=errors,
        rss_mb=0.0,
        extra={"connections": connections, "ran_out": len(latencies) >= len(digests)},
    )


def measure(
    database_url: str,
    user_ids: list[int],
    *,
    connections: int,
    seconds: float,
    tokens: int,
    variant: str = "full",
) -> c.Measurement:
    """Load `tokens` fresh sessions, then rotate them for `seconds` on `connections`
    connections with the `variant` statement (the servers idle meanwhile)."""
    from authgate.tokens.keys import digest

    path = c.OUT / f"db-ceiling-{secrets.token_hex(4)}.txt"
    asyncio.run(c.load_refresh_tokens(database_url, user_ids, tokens, path))
    try:
        digests = [digest(t) for t in Path(path).read_text().split()]
    finally:
        path.unlink(missing_ok=True)
    c.wait_for_quiet(c.OWN_GROUPS)
    with c.ForeignCpu(c.OWN_GROUPS) as foreign:
        m = asyncio.run(_run(database_url, statement(variant), digests, connections, seconds))
    m.extra["foreign_cores"] = round(foreign.cores, 2)
    if m.extra["ran_out"]:
        print(f"  WARNING: the database ceiling ran out of tokens ({tokens}); raise the count")
    return m
