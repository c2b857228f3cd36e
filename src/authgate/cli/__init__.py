"""The `authgate` command: serve | db upgrade | users … | purge | audit.

Exit codes: 0 success, 1 a failure the user can act on (one line on stderr, no traceback),
2 usage. Every command reads the same configuration as `serve` (the environment).
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TextIO, TypeVar

import click
from pydantic import ValidationError

from authgate.cli.audit import audit, audited
from authgate.cli.users import users
from authgate.config import AuthConfig, ConfigError
from authgate.datadir import ensure_secret_key
from authgate.mail.render import check_templates

__all__ = ["main"]

T = TypeVar("T")


def _config() -> AuthConfig:
    try:
        config = ensure_secret_key(AuthConfig())
        # A broken AUTHGATE_TEMPLATES_DIR is one line here, not a traceback in every worker.
        check_templates(config.templates_dir)
        if config.pages:
            from authgate.web.pages import check_page_templates  # the web stack: only then

            check_page_templates(config.templates_dir)
        return config
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in exc.errors()
        )
        raise click.ClickException(f"invalid configuration: {problems}") from None
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot prepare the data directory: {exc.strerror}") from None


def _run(work: Callable[[Any], Awaitable[T]]) -> T:
    """Build authgate's services, apply migrations, run `work(gate)`, close everything."""
    from authgate.app import AuthGate
    from authgate.store.db import upgrade_schema

    async def runner() -> T:
        gate = AuthGate(_config())
        try:
            await upgrade_schema(gate.services.db)
            async with audited(gate):  # its steps are audit events too
                return await work(gate)
        finally:
            await gate.cache.aclose()
            await gate.services.db.dispose()

    return _run_async(runner)


def _run_async(runner: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run(runner()), with database trouble turned into one line for the user."""
    try:
        return asyncio.run(runner())
    except click.ClickException:
        raise
    except (OSError, TimeoutError) as exc:
        raise click.ClickException(f"cannot reach the database: {type(exc).__name__}") from None
    except Exception as exc:
        from authgate.store.errors import driver_error

        if (driver := driver_error(exc)) is not None:
            raise click.ClickException(f"database error: {driver}") from None
        if isinstance(exc, ValueError):
            raise click.ClickException(str(exc)) from None
        raise


@click.group()
@click.version_option(package_name="authgate")
def main() -> None:
    """authgate: email-and-password authentication service."""
    # Before anything logs (the generated-key warning); `serve` then shows INFO lines too.
    logging.config.dictConfig(_log_config(logging.WARNING))
    logging.captureWarnings(True)


def _migrate(config: AuthConfig) -> None:
    """Apply pending migrations before any worker starts: one SELECT here, the upgrade as
    `authgate db upgrade` in a child process (one worker serves from this very process, which
    would keep Alembic and the migration's allocations: 8 MB, bench/RESULTS.md, issue 16)."""
    import subprocess  # nosec B404 (this interpreter's own command)

    from authgate.store.db import Database, schema_at_head

    async def pending() -> bool:
        db = Database(config)
        try:
            return not await schema_at_head(db)
        finally:
            await db.dispose()

    if _run_async(pending):
        argv = [sys.executable, "-m", "authgate", "db", "upgrade"]
        # Its log lines (stderr) are serve's format; its "up to date" line is not a log line.
        done = subprocess.run(argv, check=False, stdout=subprocess.DEVNULL)  # noqa: S603  # nosec B603
        if done.returncode != 0:
            raise click.ClickException("the database migration failed (see above)")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
def serve(host: str, port: int, workers: int) -> None:
    """Start the HTTP service (migrates the database first)."""
    import uvicorn

    from authgate.cli.serve_metrics import per_run_directory

    logging.config.dictConfig(_log_config(logging.INFO))
    config = _config()
    _migrate(config)  # once, before any worker starts
    if config.hash_threads is None:
        # argon2 is CPU-bound: the workers of this machine share its cores between them.
        os.environ["AUTHGATE_HASH_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    logging.getLogger("authgate").info("serving with %s", config.describe())
    with per_run_directory(workers):  # the workers' metrics, summed (serve_metrics.py)
        uvicorn.run(
            "authgate.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=_log_config(logging.INFO),  # each worker configures its own
            proxy_headers=False,
            server_header=False,
            ws="none",  # no WebSocket routes: no upgrade handling either
            timeout_keep_alive=config.keep_alive_timeout,
            limit_concurrency=config.max_connections,
            timeout_graceful_shutdown=config.shutdown_timeout,
            **_http_protocol(config),
        )


def _http_protocol(config: AuthConfig) -> dict[str, Any]:
    """uvicorn's httptools protocol with a read timeout and a head limit (`http_server`); on
    a platform without httptools, h11, whose only limit is the size of an incomplete head."""
    try:
        from authgate.web.server import protocol_factory
    except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard]
        logging.getLogger("authgate").warning(
            "httptools is not installed: serving with h11, without a read timeout; "
            "keep a reverse proxy with header and body timeouts in front"
        )
        return {"http": "h11", "h11_max_incomplete_event_size": config.max_header_bytes}
    return {
        "http": protocol_factory(
            read_timeout=config.read_timeout, max_header_bytes=config.max_header_bytes
        )
    }


def _log_config(level: int) -> dict[str, Any]:
    """One format per stream: JSON, or one readable line on a terminal;
    `AUTHGATE_LOG_FORMAT=json|text` picks one for both (a setting of the command only)."""
    from authgate.events import log_config

    chosen = os.environ.get("AUTHGATE_LOG_FORMAT", "").strip().lower()
    if chosen not in ("", "json", "text"):
        raise click.ClickException("AUTHGATE_LOG_FORMAT must be json or text")

    def as_json(stream: TextIO) -> bool:
        return chosen == "json" if chosen else not stream.isatty()

    return log_config(level, json_stderr=as_json(sys.stderr), json_stdout=as_json(sys.stdout))


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply pending schema migrations."""
    from authgate.store.db import upgrade_schema

    async def work(gate: Any) -> bool:
        return await upgrade_schema(gate.services.db)

    _run(work)
    click.echo("database schema is up to date")


@main.command()
def purge() -> None:
    """Delete expired and spent tokens and finished sessions."""

    import time

    async def work(gate: Any) -> Any:
        return await gate.accounts.purge()

    started = time.perf_counter()
    result = _run(work)
    elapsed = time.perf_counter() - started
    click.echo(
        f"purged {result.sessions} sessions, {result.refresh_tokens} refresh tokens, "
        f"{result.one_time_tokens} one-time tokens and {result.audit_events} audit events "
        f"in {result.batches} batches, "
        f"{elapsed:.1f} s ({result.total / max(elapsed, 1e-9):,.0f} rows/s)"
    )


main.add_command(audit)
main.add_command(users)
