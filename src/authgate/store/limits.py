"""Fixed-window counters for the rate limits, shared by every worker and host.

The database backend of the counters' protocol (`cache.counters.CounterStore`; the Redis one
is `cache.counters.RedisCounters`):

- `SqlCounters`: the `authgate_rate_limits` table, when there is no `CACHE_URL`. Every
  worker and host on that database counts together. A hit is one atomic
  `INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING` (SQLite >= 3.35, PostgreSQL):
  the row lock serialises concurrent hits, and a hit over the limit updates nothing and
  returns no row, so of N concurrent hits on a budget of B exactly B are allowed.
A hit given back (`give_back`) only ever returns to the window it was taken from (windows are
named by their ends; `cache.counters`).

Keys are opaque digests made by `ratelimit.py`: no email or address is stored. Expired rows
stay until `authgate purge` deletes them (`purge.py`); an expired row is simply
restarted by the next hit on its key.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Table, bindparam, case, delete, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from authgate.cache.counters import Hit, fresh_end
from authgate.store.db import Database
from authgate.store.models import Base, RateLimitCounter, UTCDateTime

__all__ = ["SqlCounters"]

_table: Table = Base.metadata.tables[RateLimitCounter.__tablename__]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SqlCounters:
    """Counters in the database (the embedded setup and any deployment without a cache)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        insert = sqlite_insert if db.is_sqlite else pg_insert
        fresh = insert(_table).values(
            key=bindparam("key"), hits=bindparam("amount"), window_end=bindparam("fresh_end")
        )
        over = _table.c.window_end <= bindparam("now", type_=UTCDateTime())
        self._hit = fresh.on_conflict_do_update(
            index_elements=[_table.c.key],
            set_={
                "hits": case(
                    (over, fresh.excluded.hits), else_=_table.c.hits + fresh.excluded.hits
                ),
                "window_end": case((over, fresh.excluded.window_end), else_=_table.c.window_end),
            },
            # Over the limit: no update, so no row comes back.
            where=or_(
                over,
                _table.c.hits + fresh.excluded.hits <= bindparam("limit", type_=Integer()),
            ),
        ).returning(_table.c.hits, _table.c.window_end)
        self._current = select(_table.c.hits, _table.c.window_end).where(
            _table.c.key == bindparam("key")
        )
        self._give_back = (
            update(_table)
            .where(
                # Not "key": an UPDATE reserves the column names for its SET parameters.
                _table.c.key == bindparam("counter"),
                _table.c.window_end == bindparam("end", type_=UTCDateTime()),
                _table.c.hits > 0,
            )
            .values(hits=_table.c.hits - 1)
        )

    async def _returning(self, statement: Any, params: dict[str, Any]) -> list[Any]:
        """One statement with RETURNING, committed: on SQLite in a write transaction (the
        process's writers queue on the database's lock), on PostgreSQL autocommitted."""
        if self._db.is_sqlite:
            async with self._db.write() as s:
                return list((await s.execute(statement, params)).all())
        async with self._db.autocommit() as conn:
            return list((await conn.execute(statement, params)).all())

    async def hit(self, key: str, *, limit: int, window: float, now: datetime) -> Hit:
        rows = await self._returning(
            self._hit,
            {
                "key": key,
                "amount": 1,
                "fresh_end": fresh_end(now, window),
                "now": now,
                "limit": limit,
            },
        )
        if rows:
            return Hit(True, rows[0].hits, rows[0].window_end)
        async with self._db.read() as s:
            row = (await s.execute(self._current, {"key": key})).one_or_none()
        if row is None or row.window_end <= now:  # cleared or over meanwhile: try again soon
            return Hit(False, 0, now + timedelta(seconds=1))
        return Hit(False, row.hits, row.window_end)

    async def give_back(self, key: str, window_end: datetime) -> None:
        if self._db.is_sqlite:
            async with self._db.write() as s:
                await s.execute(self._give_back, {"counter": key, "end": window_end})
        else:
            async with self._db.autocommit() as conn:
                await conn.execute(self._give_back, {"counter": key, "end": window_end})

    async def count(self, key: str, now: datetime) -> int:
        if self._db.is_sqlite:
            async with self._db.read() as s:
                row = (await s.execute(self._current, {"key": key})).one_or_none()
        else:
            async with self._db.autocommit() as conn:
                row = (await conn.execute(self._current, {"key": key})).one_or_none()
        return int(row.hits) if row is not None and row.window_end > now else 0

    async def clear(self, *keys: str) -> None:
        statement = delete(_table).where(_table.c.key.in_(keys))
        if self._db.is_sqlite:
            async with self._db.write() as s:
                await s.execute(statement)
        else:
            async with self._db.autocommit() as conn:
                await conn.execute(statement)
