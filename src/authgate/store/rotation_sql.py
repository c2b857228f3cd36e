"""The statements of refresh-token rotation (`rotation.py` runs them), built once on the Core
tables with bind parameters: building them per call cost more Python time than executing
them (bench/profiles/refresh-1w.txt).

PostgreSQL runs the whole rotation as one statement (`rotation_statement`); SQLite, which has
no DML in CTEs, runs `SPEND`, `COUNT_ROTATION`, `STATE_OF` and `INSERT_TOKEN` one by one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    LargeBinary,
    Table,
    bindparam,
    case,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)

from authgate.store.models import Base, RefreshToken, Session, User, UTCDateTime

__all__ = ["COUNT_ROTATION", "INSERT_TOKEN", "ROTATE", "SPEND", "STATE_OF", "rotation_statement"]

_tokens: Table = Base.metadata.tables[RefreshToken.__tablename__]
_sessions: Table = Base.metadata.tables[Session.__tablename__]
_users: Table = Base.metadata.tables[User.__tablename__]
_now = bindparam("now", type_=UTCDateTime())
_in_window = _sessions.c.refresh_window_start > bindparam("window_floor", type_=UTCDateTime())
#: A session that has rotated `burst` times in its current window (the per-session refresh
#: limit): its token is not spent, and the refresh answers 429.
_over_budget = (
    select(_sessions.c.id)
    .where(
        _sessions.c.id == _tokens.c.session_id,
        _in_window,
        _sessions.c.refresh_count >= bindparam("burst"),
    )
    .exists()
)


def _spend(budget: bool = True) -> Any:
    """Spend a live token (`used_at IS NULL`, not expired), unless its session is over the
    refresh budget; returns the token's session id."""
    conditions = [
        _tokens.c.digest == bindparam("token_digest"),
        _tokens.c.used_at.is_(None),
        _tokens.c.expires_at > bindparam("now"),
    ]
    if budget:
        conditions.append(~_over_budget)
    return (
        update(_tokens)
        .where(*conditions)
        .values(used_at=bindparam("now"))
        .returning(_tokens.c.session_id)
    )


def _counting(*, activity: bool = True, budget: bool = True) -> dict[str, Any]:
    """Count one rotation in the session's window (a new window once the last one is over),
    and note when and from where the session was last used (GET /sessions)."""
    values: dict[str, Any] = {}
    if budget:
        values["refresh_count"] = case((_in_window, _sessions.c.refresh_count + 1), else_=1)
        values["refresh_window_start"] = case(
            (_in_window, _sessions.c.refresh_window_start), else_=_now
        )
    if activity:
        values["last_active_at"] = _now
        values["ip"] = bindparam("ip")
        values["user_agent"] = bindparam("user_agent")
    return values


SPEND = _spend()
_STATE_COLUMNS = (
    _sessions.c.id,
    _sessions.c.user_id,
    _sessions.c.revoked_at,
    _sessions.c.expires_at,
    _users.c.is_active,
    # A session opened under older credentials (reset, deactivation since) cannot refresh.
    (_sessions.c.credentials_version == _users.c.credentials_version).label("current"),
    # The session's assurance: the successor's access token carries it on.
    _sessions.c.aal,
    _sessions.c.amr,
    _sessions.c.mfa_pending,
)

# --- SQLite: one statement at a time, inside the writer's transaction ---------------------
COUNT_ROTATION = (
    update(_sessions).where(_sessions.c.id == bindparam("spent_session_id")).values(_counting())
)
STATE_OF = (
    select(*_STATE_COLUMNS)
    .select_from(_sessions.join(_users, _users.c.id == _sessions.c.user_id))
    .where(_sessions.c.id == bindparam("spent_session_id"))
)
INSERT_TOKEN = insert(_tokens)


# --- PostgreSQL: the whole rotation as one statement --------------------------------------
def rotation_statement(*, activity: bool = True, budget: bool = True) -> Any:
    """The PostgreSQL rotation: spend the presented token, read its session and user, count
    the rotation, and insert the successor only if the session is live and the user active
    and current. One statement (data-modifying CTEs).

    `activity=False` leaves out the session's last use (time, address, user agent) and
    `budget=False` the per-session refresh limit: only `bench/db_ceiling.py` builds those,
    to measure what each feature costs the database; authgate runs the whole statement."""
    spent = _spend(budget).cte("spent")
    state = (
        select(*_STATE_COLUMNS)
        .select_from(
            spent.join(_sessions, _sessions.c.id == spent.c.session_id).join(
                _users, _users.c.id == _sessions.c.user_id
            )
        )
        .cte("state")
    )
    added = (
        insert(_tokens)
        .from_select(
            ["session_id", "digest", "created_at", "expires_at"],
            select(
                state.c.id,
                bindparam("new_digest", type_=LargeBinary()),
                _now,
                # The successor never outlives its session (LEAST ignores a NULL session end).
                func.least(bindparam("refresh_end", type_=UTCDateTime()), state.c.expires_at),
            ).where(
                state.c.revoked_at.is_(None),
                or_(state.c.expires_at.is_(None), state.c.expires_at > _now),
                state.c.is_active,
                state.c.current,
            ),
        )
        .returning(_tokens.c.session_id)
        .cte("added")
    )
    columns = [*state.c, exists(select(added.c.session_id)).label("rotated")]
    counting = _counting(activity=activity, budget=budget)
    if counting:
        counted = (
            update(_sessions)
            .where(_sessions.c.id.in_(select(spent.c.session_id)))
            .values(counting)
            .returning(_sessions.c.id)
            .cte("counted")
        )
        columns.append(exists(select(counted.c.id)).label("counted"))
    return select(*columns)


ROTATE = rotation_statement()
