"""`authgate users …`: create, deactivate, activate and list accounts.

The commands run through `authgate.cli._run` (a gate on the configured database, audited),
imported when a command runs: `authgate.cli` registers this group at import.
"""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = ["users"]


@click.group()
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

    from authgate.cli import _run

    user = _run(work)
    click.echo(f"created user {user.id} <{user.email}>")


def _set_active(email: str, active: bool) -> None:
    from authgate.cli import _run

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
    from authgate.cli import _run

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
