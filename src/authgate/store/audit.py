"""The audit log's table (`authgate_audit_events`): batches written, pages read, old rows trimmed.

Pages are newest first and keyed by the row id (descending), never by an offset: rows added
while someone pages get higher ids than any page already read, so no row is seen twice or
skipped. Ids are never reused (AUTOINCREMENT on SQLite, a sequence on PostgreSQL). The indexes
(user_id, id) and (event, id) serve the filtered pages; (time) serves `since` and the trim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, String, Table, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from authgate.store.db import Database
from authgate.store.models import AuditEvent

__all__ = ["COLUMNS", "AuditRow", "AuditStore", "row_values", "trim_audit"]

#: The record keys stored (`events.emit`'s fixed keys; nothing else a record could carry).
COLUMNS = (
    "event",
    "outcome",
    "user_id",
    "session_id",
    "reason",
    "factor",
    "actor",
    "client_ip",
    "user_agent",
    "request_id",
)
#: Column widths: a longer value is cut, never refused (an audit write must not fail).
_table: Table = AuditEvent.metadata.tables[AuditEvent.__tablename__]
_WIDTHS = {c: t.length or 256 for c in COLUMNS if isinstance(t := _table.c[c].type, String)}


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One stored event, as `authgate audit` and `GET /admin/audit` show it."""

    id: int
    time: datetime
    event: str
    outcome: str
    user_id: int | None
    session_id: str | None
    reason: str | None
    factor: str | None
    actor: str | None
    client_ip: str | None
    user_agent: str | None
    request_id: str | None


def row_values(time: datetime, record: Mapping[str, Any]) -> dict[str, Any]:
    """The column values of one event record: only the fixed keys, strings cut to width."""
    values: dict[str, Any] = {"time": time}
    for column in COLUMNS:
        value = record.get(column)
        if column == "user_id":
            values[column] = value if isinstance(value, int) else None
        elif value is None or value == "":
            values[column] = None
        else:
            values[column] = str(value)[: _WIDTHS[column]]
    return values


class AuditStore:
    def __init__(self, s: AsyncSession) -> None:
        self.s = s

    async def add_many(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert rows made by `row_values`, in one multi-row statement."""
        if rows:
            await self.s.execute(insert(_table), list(rows))

    async def page(
        self,
        *,
        user_id: int | None,
        event: str | None,
        since: datetime | None,
        before_id: int | None,
        limit: int,
    ) -> list[AuditRow]:
        """Up to `limit` events with an id below `before_id` (all when None), newest first;
        only the user's / the event's when given, only those at or after `since`."""
        condition: list[ColumnElement[bool]] = []
        if user_id is not None:
            condition.append(_table.c.user_id == user_id)
        if event is not None:
            condition.append(_table.c.event == event)
        if since is not None:
            condition.append(_table.c.time >= since)
        if before_id is not None:
            condition.append(_table.c.id < before_id)
        result = await self.s.execute(
            select(_table).where(*condition).order_by(_table.c.id.desc()).limit(max(limit, 0))
        )
        return [AuditRow(**row._mapping) for row in result.all()]


async def trim_audit(db: Database, before: datetime, batch_size: int) -> tuple[int, int]:
    """Delete the events older than `before`, `batch_size` at a time (each batch its own short
    transaction, found through the time index); (rows deleted, batches)."""
    deleted = batches = 0
    while True:
        async with db.write() as s:
            doomed = list(
                (
                    await s.scalars(
                        select(_table.c.id)
                        .where(_table.c.time < before)
                        .order_by(_table.c.time)
                        .limit(batch_size)
                    )
                ).all()
            )
            if doomed:
                await s.execute(delete(_table).where(_table.c.id.in_(doomed)))
        deleted += len(doomed)
        batches += 1
        if len(doomed) < batch_size:
            return deleted, batches
