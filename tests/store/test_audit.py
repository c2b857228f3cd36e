"""`AuditStore` on both backends: rows are written in one batch with only the record's fixed
keys (cut to their widths), pages come newest first by user, event, time and cursor without a
row seen twice or skipped, and `purge` trims exactly the events older than the retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from authgate.store.audit import AuditRow, AuditStore, row_values
from authgate.store.db import Database
from authgate.store.models import AuditEvent
from authgate.store.purge import purge
from tests.helpers import FakeClock


async def _write(db: Database, clock: FakeClock, *records: dict[str, Any]) -> None:
    async with db.write() as s:
        await AuditStore(s).add_many([row_values(clock(), r) for r in records])


async def _page(db: Database, **kw: Any) -> list[AuditRow]:
    args: dict[str, Any] = {
        "user_id": None,
        "event": None,
        "since": None,
        "before_id": None,
        "limit": 100,
    }
    args.update(kw)
    async with db.read() as s:
        return await AuditStore(s).page(**args)


async def test_a_record_is_stored_with_its_fixed_keys_only(db: Database, clock: FakeClock) -> None:
    await _write(
        db,
        clock,
        {
            "event": "login_failed",
            "outcome": "failure",
            "user_id": 7,
            "reason": "wrong_password",
            "client_ip": "127.0.0.1",
            "user_agent": "u" * 400,
            "request_id": "req-1",
            "password": "never-stored",  # not a column: dropped
        },
    )
    [row] = await _page(db)
    assert (row.event, row.outcome, row.user_id, row.reason) == (
        "login_failed",
        "failure",
        7,
        "wrong_password",
    )
    assert row.session_id is None
    assert row.factor is None
    assert row.actor is None
    assert row.client_ip == "127.0.0.1"
    assert row.request_id == "req-1"
    assert row.user_agent == "u" * 256
    assert row.time == clock()
    assert "never-stored" not in repr(row)


async def test_pages_are_newest_first_and_filtered(db: Database, clock: FakeClock) -> None:
    for i in range(10):
        clock.advance(60)
        await _write(
            db,
            clock,
            {"event": "login_succeeded", "outcome": "success", "user_id": 1 + i % 2},
            {"event": "refreshed", "outcome": "success", "user_id": 1 + i % 2},
        )
    everything = await _page(db)
    assert len(everything) == 20
    ids = [r.id for r in everything]
    assert ids == sorted(ids, reverse=True)
    assert len(set(ids)) == 20
    mine = await _page(db, user_id=1)
    assert len(mine) == 10
    assert {r.user_id for r in mine} == {1}
    logins = await _page(db, event="login_succeeded", user_id=2)
    assert len(logins) == 5
    assert {(r.event, r.user_id) for r in logins} == {("login_succeeded", 2)}
    recent = await _page(db, since=clock() - timedelta(seconds=120))
    assert len(recent) == 6
    assert all(r.time >= clock() - timedelta(seconds=120) for r in recent)
    assert await _page(db, user_id=3) == []
    assert await _page(db, event="logged_out") == []


async def test_the_cursor_visits_every_row_once_while_rows_are_added(
    db: Database, clock: FakeClock
) -> None:
    for i in range(7):
        await _write(db, clock, {"event": "registered", "outcome": "success", "user_id": i})
    seen: list[int] = []
    before: int | None = None
    for _ in range(20):  # bounded: 7 rows in pages of 3 take 3 pages
        page = await _page(db, before_id=before, limit=3)
        seen += [r.id for r in page]
        # New events arrive between pages: newer than the cursor, never in a later page.
        await _write(db, clock, {"event": "refreshed", "outcome": "success"})
        if len(page) < 3:
            break
        before = page[-1].id
    assert len(seen) == 7
    assert len(set(seen)) == 7
    assert seen == sorted(seen, reverse=True)


async def test_purge_trims_events_older_than_the_retention(db: Database, clock: FakeClock) -> None:
    for _ in range(5):
        await _write(db, clock, {"event": "login_succeeded", "outcome": "success"})
    clock.advance(86400 * 10)
    for _ in range(3):
        await _write(db, clock, {"event": "logged_out", "outcome": "success"})
    clock.advance(86400 * 80 + 1)  # the first five are 90 days and a second old
    assert (await purge(db, clock(), batch_size=2)).audit_events == 0  # no retention given
    result = await purge(db, clock(), batch_size=2, audit_retention_days=90)
    assert result.audit_events == 5
    assert {r.event for r in await _page(db)} == {"logged_out"}
    assert (await purge(db, clock(), audit_retention_days=90)).audit_events == 0
    # 0 days: the audit log is off, nothing is kept.
    result = await purge(db, clock(), batch_size=2, audit_retention_days=0)
    assert result.audit_events == 3
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(AuditEvent)) == 0
