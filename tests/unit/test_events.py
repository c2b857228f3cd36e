"""events.py on its own: the JSON log lines, and the redaction of database and cache URLs."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from authgate import events
from authgate.events import JsonFormatter


def test_json_formatter_writes_one_json_line_per_record() -> None:
    formatter = JsonFormatter()
    logger = logging.getLogger("authgate.events")
    records = [
        logger.makeRecord(
            "authgate.events",
            logging.INFO,
            __file__,
            1,
            "login_succeeded",
            (),
            None,
            extra={
                "authgate": {
                    "event": "login_succeeded",
                    "outcome": "success",
                    "user_id": 7,
                    "session_id": "s" * 32,
                    "request_id": "req-1",
                    "client_ip": "127.0.0.1",
                    "user_agent": 'evil\r\n{"event": "forged"}',
                }
            },
        ),
        logger.makeRecord(
            "authgate", logging.WARNING, __file__, 1, "two\nlines %s", ("and\nmore",), None
        ),
    ]
    try:
        raise ValueError("the message of a driver error, which may quote a value")
    except ValueError:
        records.append(
            logger.makeRecord(
                "authgate", logging.ERROR, __file__, 1, "unhandled", (), sys.exc_info()
            )
        )
    for record in records:
        line = formatter.format(record)
        assert "\n" not in line
        assert "\r" not in line
        out = json.loads(line)
        assert out["logger"] == record.name
        assert out["level"] == record.levelname.lower()
        assert out["message"] == record.getMessage()
        assert isinstance(out["time"], str)
    first = json.loads(formatter.format(records[0]))
    assert first["event"] == "login_succeeded"
    assert first["user_id"] == 7
    assert first["user_agent"] == 'evil\r\n{"event": "forged"}'
    last = json.loads(formatter.format(records[2]))
    assert last["exception"] == "ValueError"
    assert "driver error" not in formatter.format(records[2])


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # Userinfo, with and without a user name, with `@ / ? # :` left unescaped in it.
        ("postgresql://admin:hunter2@db:5432/app", "postgresql://***@db:5432/app"),
        ("postgresql://admin:hun@ter2@db/app", "postgresql://***@db/app"),
        ("redis://:hunter2@cache:6379/0", "redis://***@cache:6379/0"),
        (
            "rediss://default:hunter2@cache.example.com:6380/1",
            "rediss://***@cache.example.com:6380/1",
        ),
        ("postgresql://admin:hunt/er2@db/app", "postgresql://***@db/app"),
        ("postgresql://admin:hunt#er2@db/app", "postgresql://***"),
        ("unix://:hunter2@/run/redis.sock?db=0", "unix://***@/run/redis.sock?db=***"),
        # Query parameters: every value, whatever its name.
        ("postgresql://db/app?password=hunter2", "postgresql://db/app?password=***"),
        (
            "postgresql://admin@db/app?sslmode=verify-full&sslpassword=hunter2",
            "postgresql://***@db/app?sslmode=***&sslpassword=***",
        ),
        ("postgres://admin:hunter2@db/app?sslmode=require", "postgres://***@db/app?sslmode=***"),
        ("redis://cache:6379/0?password=hunter2", "redis://cache:6379/0?password=***"),
        (
            "redis://cache/0?username=u&password=hunter2",
            "redis://cache/0?username=***&password=***",
        ),
        ("postgresql://admin:hunter2@/app?host=/run/pg", "postgresql://***@/app?host=***"),
        ("postgresql://db/app?hunter2", "postgresql://db/app?***"),
        ("postgresql://db/app;password=x?user=a@b&password=hunter2", "postgresql://***"),
        (
            "postgresql://db/app?user=a@b&password=hunter2",
            "postgresql://db/app?user=***&password=***",
        ),
        # Where the userinfo ends is undecidable: only the scheme is shown.
        ("postgresql://u:p@db/app?password=hunter2@x", "postgresql://***"),
        ("redis://:hun?ter2@cache:6379/0", "redis://***"),
        ("postgresql://u:p#w@h1:5432,h2:5432/app?sslpassword=hunter2", "postgresql://***"),
        ("postgresql://db/app#hunter2", "postgresql://db/app"),
        ("sqlite:////var/lib/app.db", "sqlite:////var/lib/app.db"),
        ("no scheme hunter2", "<unparseable url>"),
    ],
)
def test_redact_url_hides_every_credential(url: str, shown: str) -> None:
    from authgate.events import redact_url as _redact_url

    assert _redact_url(url) == shown
    assert "hunter2" not in shown
    assert "ter2" not in shown


# --- sinks (the audit log and the metrics hear every event of their application) --------


def test_sinks_of_the_context_get_every_record_and_a_failing_one_is_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[dict[str, object]] = []

    def broken(record: object) -> None:
        raise RuntimeError("secret-looking text that must not be logged")

    sinks: list[events.Sink] = [lambda record: heard.append(dict(record)), broken]
    token = events.request_context.set(events.RequestContext("rid-1", "10.0.0.1", "ua", sinks))
    try:
        with caplog.at_level(logging.INFO):
            events.emit("logged_out", user_id=7, session_id="s" * 32, actor="admin_token")
    finally:
        events.request_context.reset(token)
    assert heard == [
        {
            "event": "logged_out",
            "outcome": "success",
            "user_id": 7,
            "session_id": "s" * 32,
            "actor": "admin_token",
            "request_id": "rid-1",
            "client_ip": "10.0.0.1",
            "user_agent": "ua",
        }
    ]
    assert "event sink failed: RuntimeError" in caplog.text
    assert "secret-looking" not in caplog.text
    # Outside a context that names them, no sink hears anything.
    events.emit("logged_out", user_id=8)
    assert len(heard) == 1
