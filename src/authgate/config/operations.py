"""Operating settings, a part of `AuthConfig`: the HTTP server's limits, the database pool
and PgBouncer, metrics, the audit log and the admin API."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

__all__ = ["MIN_ADMIN_TOKEN_LENGTH", "OperationsSettings"]

#: A shorter `AUTHGATE_ADMIN_TOKEN` is refused at start: it must not be guessable.
MIN_ADMIN_TOKEN_LENGTH = 32


class OperationsSettings(BaseSettings):
    # `authgate serve` only (uvicorn's HTTP server): limits against slow or idle clients.
    #: Seconds a client has to send a whole request (line, headers and body), counted from
    #: the connection's opening or the first byte of the next request on a kept-alive one.
    read_timeout: float = Field(default=10.0, gt=0)
    #: Seconds an idle kept-alive connection stays open between requests.
    keep_alive_timeout: int = Field(default=5, gt=0)
    #: Largest request line plus headers, in bytes; more gets 431 and the connection closes.
    max_header_bytes: int = Field(default=32_768, ge=1024)
    #: Connections (and requests in progress) per worker beyond which requests get 503.
    max_connections: int = Field(default=1000, gt=0)
    #: Seconds a stopping worker waits for requests in progress before closing them.
    shutdown_timeout: int = Field(default=10, ge=0)
    #: Apply pending migrations when the application starts.
    auto_migrate: bool = True
    #: SQLAlchemy pool for PostgreSQL, per worker process.
    #: A fixed pool: overflow connections are closed on return, a new backend each (README).
    db_pool_size: int = Field(default=15, gt=0)
    db_max_overflow: int = Field(default=0, ge=0)
    db_timeout: float = Field(default=5.0, gt=0)
    #: DATABASE_URL points at PgBouncer in transaction pooling mode: no prepared statement
    #: outlives its statement, and every statement runs inside a transaction (`store/db.py`).
    db_pgbouncer: bool = False

    #: `GET /metrics` (Prometheus text format) at the root.
    metrics: bool = True
    #: When set, `GET /metrics` needs `Authorization: Bearer <this token>`.
    metrics_token: SecretStr | None = None
    #: Days the audit log keeps an event (`authgate purge` trims older ones); 0: no audit
    #: table is written at all.
    audit_retention_days: int = Field(default=90, ge=0)
    #: A bearer token for the admin API (compared in constant time, stored nowhere); unset:
    #: only superusers' access tokens reach it.
    admin_token: SecretStr | None = None

    @field_validator("admin_token", "metrics_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value():
            return None
        if value is not None and len(value.get_secret_value()) < MIN_ADMIN_TOKEN_LENGTH:
            # The message names the rule, never the value.
            raise ValueError(
                f"must be at least {MIN_ADMIN_TOKEN_LENGTH} characters; generate one with: "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return value
