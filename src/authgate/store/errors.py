"""What the edges (the HTTP error handlers, the command line) need to know about database
errors, so that nothing outside store/ imports SQLAlchemy.

Only class names ever leave this module for a log or a message: a driver's message may quote
a statement's parameters (password hashes, token digests).
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

__all__ = ["DATABASE_ERROR", "DATABASE_UNAVAILABLE", "driver_error", "refused_by_database"]

#: The database away: connection refused or lost, the pool exhausted (503, never 500).
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    PoolTimeoutError,
)
#: The base of every error the driver raises, the unavailable ones too.
DATABASE_ERROR: type[Exception] = DBAPIError


def refused_by_database(exc: BaseException) -> bool:
    """`exc` is a driver error that is no outage: a statement the database refused on a
    connection that is still good (a bug, so 500, not 503)."""
    return (
        isinstance(exc, DBAPIError)
        and not isinstance(exc, OperationalError | InterfaceError)
        and not exc.connection_invalidated
    )


def driver_error(exc: BaseException) -> str | None:
    """The class name of the driver's own exception when `exc` is a database error (the
    wrapper's when the driver gave none), else None."""
    if not isinstance(exc, DBAPIError):
        return None
    return type(exc.orig).__name__ if exc.orig else type(exc).__name__
