"""`rotation_statement`: the bench's variants of the PostgreSQL rotation (bench/db_ceiling.py
measures each) still rotate, and leave out exactly the feature they name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from authgate.store.db import Database
from authgate.store.models import RefreshToken, Session
from authgate.store.rotation_sql import ROTATE, rotation_statement
from tests.helpers import FakeClock, new_digest, new_session, new_user


def _params(clock: FakeClock, token: bytes) -> dict[str, Any]:
    now = clock()
    return {
        "token_digest": token,
        "new_digest": new_digest(),
        "now": now,
        "refresh_end": now + timedelta(hours=1),
        "ip": "192.0.2.7",
        "user_agent": "agent/1",
        "window_floor": now - timedelta(seconds=60),
        "burst": 10,
    }


@pytest.mark.parametrize(
    ("options", "activity", "counted"),
    [({}, True, True), ({"activity": False}, False, True), ({"budget": False}, True, False)],
)
async def test_each_variant_rotates_and_leaves_out_only_its_feature(
    pg_db: Database,
    clock: FakeClock,
    options: dict[str, bool],
    activity: bool,
    counted: bool,
) -> None:
    user = await new_user(pg_db, clock())
    session_id, token = await new_session(pg_db, user, clock())
    clock.advance(60)  # the session's last use at opening is a minute older than the rotation
    statement = rotation_statement(**options) if options else ROTATE
    params = _params(clock, token)
    if not activity:
        # Keys named like a column of an UPDATE would be taken as values to SET: a statement
        # without the activity is given none (the bench binds only the statement's own).
        del params["ip"], params["user_agent"]
    async with pg_db.autocommit() as conn:
        row = (await conn.execute(statement, params)).one()
    assert row.rotated
    assert row.id == session_id
    async with pg_db.read() as s:
        session = (await s.execute(select(Session).where(Session.id == session_id))).scalar_one()
        tokens = (
            await s.execute(
                select(RefreshToken.used_at).where(RefreshToken.session_id == session_id)
            )
        ).all()
    assert len(tokens) == 2
    assert sum(used is not None for (used,) in tokens) == 1
    assert (session.ip == "192.0.2.7") is activity
    assert (session.last_active_at == clock()) is activity
    assert (session.refresh_count == 1) is counted
