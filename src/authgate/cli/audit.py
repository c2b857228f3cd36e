"""`authgate audit`: print the audit log, newest first; and `audited`, which makes every other
command's steps audit events too (a CLI `deactivate` is on the record like an HTTP one).

Exit codes as for every command: 1 for an unknown `--user` (one line), 2 for usage (an unknown
`--event`, a `--since` that is not ISO 8601).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import click

from authgate import events

__all__ = ["audit", "audited"]

_HEADER = ("TIME (UTC)", "EVENT", "OUTCOME", "USER", "SESSION", "DETAIL", "IP")


@contextlib.asynccontextmanager
async def audited(gate: Any) -> AsyncIterator[None]:
    """Run a command's steps in an events context that reaches the gate's sinks (its audit
    log among them), and write the buffered events before the command ends."""
    token = events.request_context.set(
        events.RequestContext(f"cli-{secrets.token_hex(4)}", None, None, gate.event_sinks)
    )
    try:
        yield
    finally:
        events.request_context.reset(token)
        if gate.audit is not None:
            await gate.audit.close()


def _event(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and value not in events.EVENT_NAMES:
        names = ", ".join(sorted(events.EVENT_NAMES))
        raise click.BadParameter(f"unknown event {value!r}; one of: {names}")
    return value


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            "not an ISO 8601 time (e.g. 2026-11-23 or 2026-11-23T14:00:00+01:00)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@click.command("audit")
@click.option(
    "--user",
    "user",
    metavar="EMAIL|ID",
    help="Only this account's events (an id also finds a deleted account's).",
)
@click.option("--event", metavar="NAME", callback=_event, help="Only events of this name.")
@click.option(
    "--since",
    metavar="ISO-8601",
    callback=_since,
    help="Only events at or after this time (UTC when no offset is given).",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def audit(
    user: str | None, event: str | None, since: datetime | None, limit: int, as_json: bool
) -> None:
    """Print the audit log, newest first."""
    from authgate.cli import _run
    from authgate.factors.emails import login_key
    from authgate.store.audit import AuditStore
    from authgate.store.users import UserStore

    async def work(gate: Any) -> Any:
        async with gate.services.db.read() as s:
            user_id: int | None = None
            if user is not None and user.isdigit():
                user_id = int(user)
            elif user is not None:
                key = login_key(user)
                found = None if key is None else await UserStore(s).by_email_key(key)
                if found is None:
                    raise click.ClickException(f"no user with email {user}")
                user_id = found.id
            return await AuditStore(s).page(
                user_id=user_id, event=event, since=since, before_id=None, limit=limit
            )

    rows = _run(work)
    if as_json:
        for row in rows:
            fields = {name: getattr(row, name) for name in row.__slots__}
            fields["time"] = row.time.isoformat()
            click.echo(json.dumps(fields))
        return
    cells = [
        tuple(
            _printable(v)
            for v in (
                row.time.strftime("%Y-%m-%d %H:%M:%S"),
                row.event,
                row.outcome,
                row.user_id,
                row.session_id,
                _detail(row),
                row.client_ip,
            )
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in [_HEADER, *cells]) for i in range(len(_HEADER))]
    for line in [_HEADER, *cells]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def _detail(row: Any) -> str | None:
    """The reason of a failure, the second factor concerned, who acted (admin actions)."""
    parts = [row.reason, row.factor and f"factor={row.factor}", row.actor and f"by={row.actor}"]
    return " ".join(p for p in parts if p) or None


def _printable(value: object) -> str:
    """A cell: '-' for nothing; a control character never reaches the terminal."""
    text = "-" if value is None else str(value)
    return "".join(c if c.isprintable() else "?" for c in text)
