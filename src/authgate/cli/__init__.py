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
    """Apply pending migrations with nothing but a database connection (no gate: `serve` with
    one worker serves from this very process, and keeps what it allocated)."""
    from authgate.store.db import Database, upgrade_schema

    async def runner() -> None:
        db = Database(config)
        try:
            await upgrade_schema(db)
        finally:
            await db.dispose()

    _run_async(runner)


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


@main.group()
def users() -> None:
    """Manage user accounts."""


@users.command("create")
@click.argument("email")
@click.option("--superuser", is_flag=True, help="Grant is_superuser.")
@click.option("--verified", is_flag=True, help="Mark the email as verified.")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
def users_create(email: str, superuser: bool, verified: bool, password_stdin: bool) -> None:
    """Create a user (prompts for the password)."""
    from authgate.errors import EmailTaken, PasswordRejected
    from authgate.factors.emails import EmailProblem, canonical_email
    from authgate.factors.password_rules import check_new_password

    try:
        canonical_email(email)
    except EmailProblem as exc:
        raise click.ClickException(f"invalid email address: {exc}") from None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif not sys.stdin.isatty():
        # click would fall back to an echoing prompt: refuse rather than show a password.
        raise click.ClickException("no terminal to ask for the password; use --password-stdin")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    try:
        # The service checks it again; asked here too, so a refusal comes before any database.
        check_new_password(password)
    except PasswordRejected as exc:
        raise click.ClickException(exc.detail) from None

    async def work(gate: Any) -> Any:
        try:
            return await gate.accounts.register(
                email, password, is_superuser=superuser, email_verified=verified
            )
        except EmailTaken:
            raise click.ClickException("a user with this email already exists") from None

    user = _run(work)
    click.echo(f"created user {user.id} <{user.email}>")


def _set_active(email: str, active: bool) -> None:
    async def work(gate: Any) -> Any:
        return await gate.accounts.set_active(email, active), gate.config

    user, config = _run(work)
    if user is None:
        raise click.ClickException(f"no user with email {email}")
    state = "activated" if active else "deactivated (all sessions revoked)"
    click.echo(f"user {user.id} <{user.email}> {state}")
    if config.cache_url is None and config.database_url is not None:
        from authgate.cache.sweep import SWEEP_INTERVAL, SWEEP_LEASE

        # Workers with a cache were not told; they find the change in the database.
        click.echo(
            "warning: CACHE_URL is not set, so workers that use a cache were not told of this "
            f"change: each applies it from the database within {SWEEP_LEASE:.0f} s (they sweep "
            f"every {SWEEP_INTERVAL:.0f} s). Set CACHE_URL here to apply it before this "
            "command returns.",
            err=True,
        )


@users.command("deactivate")
@click.argument("email")
def users_deactivate(email: str) -> None:
    """Deactivate a user and revoke all of their sessions."""
    _set_active(email, False)


@users.command("activate")
@click.argument("email")
def users_activate(email: str) -> None:
    """Re-activate a user."""
    _set_active(email, True)


@users.command("list")
def users_list() -> None:
    """Print a table of users."""

    async def work(gate: Any) -> Any:
        return await gate.accounts.list_users()

    rows = [
        (
            str(u.id),
            u.email,
            _yn(u.is_active),
            _yn(u.is_superuser),
            _yn(u.email_verified),
            u.created_at.strftime("%Y-%m-%d %H:%M"),
        )
        for u in _run(work)
    ]
    header = ("ID", "EMAIL", "ACTIVE", "SUPERUSER", "VERIFIED", "CREATED (UTC)")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _yn(flag: bool) -> str:
    return "yes" if flag else "no"


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
