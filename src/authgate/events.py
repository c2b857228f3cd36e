"""Security events: one structured log record per security-relevant step.

Every record goes to the `authgate.events` logger with the message set to the event name and
`record.authgate` set to a flat dict of fixed keys:

    event       one of `EVENT_NAMES` (a failed self-service step is its own event with
                outcome "failure")
    outcome     success | failure
    user_id     the account concerned, when known
    session_id  the token family, when one is concerned (an identifier, not a credential)
    reason      a fixed word for failures (unknown_email, wrong_password, inactive, ...)
    factor      the second factor concerned: totp, recovery_code or passkey
    actor       who did an admin action: "user:<id>" (a superuser) or "admin_token"
    request_id, client_ip, user_agent   from the HTTP request, when there is one

No value is ever a password, token or token digest: callers pass only the fields above.
`JsonFormatter` writes each record as one JSON line, `TextFormatter` as one readable line (for a
terminal); neither writes a traceback, only the exception's type.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from authgate.event_names import EVENT_NAMES

__all__ = [
    "EVENT_NAMES",
    "AccessLogFilter",
    "JsonFormatter",
    "RequestContext",
    "Sink",
    "TextFormatter",
    "emit",
    "log_config",
    "redact_query",
    "request_context",
]

logger = logging.getLogger("authgate.events")


#: Receives every record `emit` makes in a context that lists it (the audit log, metrics).
#: Called synchronously, so it must be quick and must not raise (an exception is logged by
#: type and swallowed: an audit sink never fails the request it records).
Sink = Callable[[Mapping[str, Any]], None]


class RequestContext:
    """Who a step is done for (a request, or a CLI command) and where its records go.

    `sinks` is the application's own list (`AuthGate.event_sinks`), not a copy: sinks added
    after the application was built still hear its requests. Several applications in one
    process (tests, two mounted gates) each reach only their own sinks."""

    __slots__ = ("client_ip", "request_id", "sinks", "user_agent")

    def __init__(
        self,
        request_id: str,
        client_ip: str | None,
        user_agent: str | None,
        sinks: Sequence[Sink] = (),
    ) -> None:
        self.request_id = request_id
        self.client_ip = client_ip
        self.user_agent = user_agent
        self.sinks = sinks


request_context: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "authgate_request_context", default=None
)


def emit(
    event: str,
    *,
    outcome: str = "success",
    user_id: int | None = None,
    session_id: str | None = None,
    reason: str | None = None,
    factor: str | None = None,
    actor: str | None = None,
) -> None:
    if event not in EVENT_NAMES:
        raise ValueError(f"unknown event {event!r}")
    record: dict[str, Any] = {"event": event, "outcome": outcome}
    if user_id is not None:
        record["user_id"] = user_id
    if session_id is not None:
        record["session_id"] = session_id
    if reason is not None:
        record["reason"] = reason
    if factor is not None:
        record["factor"] = factor
    if actor is not None:
        record["actor"] = actor
    ctx = request_context.get()
    if ctx is not None:
        record["request_id"] = ctx.request_id
        record["client_ip"] = ctx.client_ip
        record["user_agent"] = (ctx.user_agent or "")[:256]
    level = logging.INFO if outcome == "success" else logging.WARNING
    logger.log(level, event, extra={"authgate": record})
    if ctx is not None:
        for sink in ctx.sinks:
            try:
                sink(record)
            except Exception as exc:  # a sink never fails the step it records
                logger.error("event sink failed: %s", type(exc).__name__)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `authgate` fields; an
    access line of uvicorn's also as client, method, path (query values redacted), status."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
        }
        out.update(_fields(record))
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """One readable line per record, for a terminal: local time, level, logger, message, then
    any fields as `key=value`. Control characters are escaped: a request's text cannot move
    the cursor or fake a line."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S")
        message = _message(record)
        fields = " ".join(
            f"{key}={_quoted(value)}"
            for key, value in _fields(record, access=False).items()
            if not (key == "event" and value == message)
        )
        line = f"{when} {record.levelname:<7} {record.name}: {message}"
        return _CONTROL.sub(_escape, f"{line}  {fields}" if fields else line)


#: uvicorn's access line: `(client, method, target, http version, status)` as `args`.
_ACCESS_FORMAT = '%s - "%s %s HTTP/%s" %d'
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _access_args(record: logging.LogRecord) -> tuple[Any, ...] | None:
    args = record.args
    if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
        return (*args[:2], redact_query(str(args[2])), *args[3:])
    return None


def _message(record: logging.LogRecord) -> str:
    # The target is redacted here too, for a handler that lacks `AccessLogFilter`.
    access = _access_args(record)
    if access is not None and record.msg == _ACCESS_FORMAT:
        return _ACCESS_FORMAT % access
    return record.getMessage()


def _fields(record: logging.LogRecord, *, access: bool = True) -> dict[str, Any]:
    """The record's fields: an access line's parts (`access`), authgate's, the exception."""
    out: dict[str, Any] = {}
    parts = _access_args(record) if access else None
    if parts is not None:
        client, method, path, version, status = parts
        out.update(client=client, method=method, path=path, http_version=version, status=status)
    fields = getattr(record, "authgate", None)
    if isinstance(fields, dict):
        out.update(fields)
    if record.exc_info and record.exc_info[0] is not None:
        # Only the exception's type: messages of driver errors may quote SQL values.
        out["exception"] = record.exc_info[0].__name__
    return out


def _quoted(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if not text or re.search(r'[\s"=]', text) else text


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def log_config(level: int, *, json_stderr: bool, json_stdout: bool) -> dict[str, Any]:
    """`logging.config.dictConfig` for the command line and uvicorn: authgate's lines (from
    `level`), uvicorn's and any other warning on stderr, uvicorn's access lines on stdout
    (query values redacted before any handler sees them); JSON or text, per stream."""

    def handler(stream: str, as_json: bool, *filters: str) -> dict[str, Any]:
        return {
            "class": "logging.StreamHandler",
            "stream": f"ext://sys.{stream}",
            "formatter": "json" if as_json else "text",
            "filters": list(filters),
        }

    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}, "text": {"()": TextFormatter}},
        "filters": {"redact_query": {"()": AccessLogFilter}},
        "handlers": {
            "stderr": handler("stderr", json_stderr),
            "access": handler("stdout", json_stdout, "redact_query"),
        },
        "loggers": {
            "authgate": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.access": {
                "handlers": ["access"],
                "level": "INFO",
                "propagate": False,
                "filters": ["redact_query"],
            },
        },
        "root": {"handlers": ["stderr"], "level": "WARNING"},
    }


def redact_query(target: str) -> str:
    """`target` (a request path) with every query value replaced by `***`, names kept.

    `/reset-password?token=abc&next=/x` becomes `/reset-password?token=***&next=***`; a part
    without `=` is all value (`?abc` becomes `?***`). The fragment, never sent by browsers,
    goes the same way.
    """
    path, sep, query = target.partition("?")
    if not sep:
        path, sep, _fragment = target.partition("#")
        return path + ("#***" if sep else "")
    query = query.partition("#")[0]
    parts = (part.partition("=") for part in re.split("[&;]", query))
    return path + "?" + "&".join(f"{n}=***" if eq else ("***" if n else "") for n, eq, _ in parts)


class AccessLogFilter(logging.Filter):
    """On `uvicorn.access`: the request target of each record with its query values redacted.

    uvicorn logs `"GET /reset-password?token=… HTTP/1.1" 200`: the link a reset mail carries,
    token and all. Its records carry `(client, method, target, http version, status)` as
    `args`; the target is rewritten before any handler formats it. A record of another shape
    is redacted in every string argument with a `?` or `#`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(
                redact_query(arg) if isinstance(arg, str) and ("?" in arg or "#" in arg) else arg
                for arg in args
            )
        return True


# What may follow the userinfo's `@`: a host list and a path (neither with `@ ? # = & ;`),
# a query, a fragment. Secrets can only be in the userinfo, the query values, the fragment.
_AFTER_USERINFO = re.compile(
    r"(?P<host>[^@/?#=&;\s]*)(?P<path>/[^@?#=;&]*)?(?:\?(?P<query>[^#]*))?(?:#.*)?"
)


def redact_url(url: str) -> str:
    """The URL less everything that can carry a credential: the userinfo, the value of every
    query parameter and the fragment (`postgresql://***@db:5432/app?sslpassword=***`).

    Passwords are often written unescaped, with `@ / ? #` in them, so where the userinfo ends
    is not always decidable. Every `@` (and none) is tried; when more than one reading is a
    valid URL the host itself might be part of a secret, and only the scheme is shown.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<unparseable url>"
    readings = []
    for at in [-1, *(i for i, char in enumerate(rest) if char == "@")]:
        match = _AFTER_USERINFO.fullmatch(rest, at + 1)
        if match is not None:
            readings.append((at >= 0, match))
    if len(readings) != 1:
        return f"{scheme}://***"
    has_userinfo, match = readings[0]
    out = f"{scheme}://{'***@' if has_userinfo else ''}{match['host']}{match['path'] or ''}"
    if match["query"] is not None:
        names = (part.partition("=") for part in re.split("[&;]", match["query"]))
        out += "?" + "&".join(f"{name}=***" if eq else "***" for name, eq, _ in names)
    return out
