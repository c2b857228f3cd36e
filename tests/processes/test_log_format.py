"""One log format per stream (issue 12, item 8): what `authgate serve` prints, from the
generated-key warning to uvicorn's shutdown lines, is JSON when the stream is not a terminal
and one readable line when it is (a pty); AUTHGATE_LOG_FORMAT=json|text picks one for both.

Servers run on loopback in their own process group and are always stopped in a `finally`;
every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from authgate.events import JsonFormatter, TextFormatter
from tests.helpers import clean_env

STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
SECRET_QUERY = "QUERYSECRET0123456789abcdef"
#: `2025-01-02 03:04:05 WARNING authgate: message`
READABLE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) +\S+: ")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def sqlite_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An explicit SQLite file and no secret key: the key is generated, and its warning is
    the first line authgate prints."""
    return clean_env(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
            "AUTHGATE_DATA_DIR": str(tmp_path / "data"),
            **extra,
        },
        secret=None,
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (a graceful shutdown, logged), SIGKILL if it
    lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        process.wait(timeout=10)


@contextlib.contextmanager
def serving(
    env: dict[str, str], stdout: int | IO[bytes], stderr: int | IO[bytes], *args: str
) -> Iterator[str]:
    """`authgate serve` on a free loopback port; yields its URL once /health answers."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "authgate", "serve", "--port", str(port), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, f"authgate serve exited with {process.returncode}"
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(url + "/health", timeout=1.0).status_code == 200
        return False

    try:
        wait_for(healthy, STARTUP_TIMEOUT, "authgate serve to answer /health")
        yield url
    finally:
        stop(process)


def lines(text: str) -> list[str]:
    return [line.rstrip("\r") for line in text.splitlines() if line.strip()]


def assert_no_secret(text: str, data_dir: Path) -> None:
    assert SECRET_QUERY not in text
    key = (data_dir / "secret_key").read_text().strip()
    assert len(key) >= 32
    assert key not in text


# --- not a terminal: JSON -------------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.parametrize("workers", ["1", "2"])
def test_every_line_is_json_when_not_on_a_terminal(tmp_path: Path, workers: str) -> None:
    out_path, err_path = tmp_path / "out.log", tmp_path / "err.log"
    with (
        out_path.open("wb") as out,
        err_path.open("wb") as err,
        serving(sqlite_env(tmp_path), out, err, "--workers", workers) as url,
    ):
        response = httpx.get(f"{url}/health?token={SECRET_QUERY}&next=/x", timeout=10.0)
        assert response.status_code == 200
        wait_for(lambda: "token=***" in out_path.read_text(), 10.0, "the access line")
    stderr, stdout = err_path.read_text(), out_path.read_text()

    records = []
    for stream, text in (("stderr", stderr), ("stdout", stdout)):
        for line in lines(text):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                pytest.fail(f"not a JSON line on {stream}: {line!r}\n{stderr}")
            assert isinstance(record, dict), line
            assert {"time", "level", "logger", "message"} <= set(record), line
            records.append((stream, record))

    def messages(stream: str, logger: str) -> list[str]:
        return [r["message"] for s, r in records if s == stream and r["logger"] == logger]

    authgate_lines = messages("stderr", "authgate")
    # The first thing authgate says is the generated key, on an explicit SQLite file.
    assert authgate_lines[0].startswith("generated a new secret key in ")
    assert any(m.startswith("serving with ") for m in authgate_lines)
    uvicorn_lines = messages("stderr", "uvicorn.error")
    for expected in ("Started server process", "Application startup complete", "Shutting down"):
        assert any(expected in m for m in uvicorn_lines), (expected, uvicorn_lines)
    assert any("Finished server process" in m for m in uvicorn_lines), uvicorn_lines

    access_records = [r for s, r in records if s == "stdout" and r["logger"] == "uvicorn.access"]
    assert {r["path"] for r in access_records} == {"/health", "/health?token=***&next=***"}
    (access,) = [r for r in access_records if "token" in r["path"]]
    assert access["method"] == "GET"
    assert access["path"] == "/health?token=***&next=***"
    assert access["status"] == 200
    assert access["http_version"] == "1.1"
    assert access["client"].startswith("127.0.0.1:")
    assert "/health?token=***&next=***" in access["message"]
    assert not [r for s, r in records if s == "stdout" and r["logger"] != "uvicorn.access"]
    assert "Traceback" not in stderr
    assert_no_secret(stderr + stdout, tmp_path / "data")


# --- a terminal: one readable line ------------------------------------------------------------


class PtyReader:
    """The master side of a pseudo-terminal, drained by a thread (a full pty would block the
    server's writes)."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: every slave side is closed
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def close_slave(self) -> None:
        """Once a child holds the slave side, the parent lets go of its own (once: the fd
        number may be reused)."""
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1

    def close(self) -> None:
        self.close_slave()
        self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            os.close(self.master)


@pytest.mark.subprocess
def test_lines_are_readable_on_a_terminal(tmp_path: Path) -> None:
    terminal = PtyReader()
    try:
        with serving(sqlite_env(tmp_path), terminal.slave, terminal.slave) as url:
            terminal.close_slave()  # the server holds the only slave side now
            response = httpx.get(f"{url}/health?token={SECRET_QUERY}", timeout=10.0)
            assert response.status_code == 200
            wait_for(lambda: "token=***" in terminal.text, 10.0, "the access line")
        wait_for(lambda: "Finished server process" in terminal.text, 10.0, "the shutdown")
    finally:
        terminal.close()
    output = lines(terminal.text)
    for line in output:
        assert READABLE.match(line), line
        assert not line.startswith("{"), line
    assert re.search(r" WARNING +authgate: generated a new secret key in ", output[0]), output[0]
    assert any(" INFO    uvicorn.error: Started server process" in line for line in output)
    (access,) = [line for line in output if " uvicorn.access: " in line and "token" in line]
    assert re.search(r'127\.0\.0\.1:\d+ - "GET /health\?token=\*\*\* HTTP/1\.1" 200$', access)
    assert "Traceback" not in terminal.text
    assert_no_secret(terminal.text, tmp_path / "data")


# --- AUTHGATE_LOG_FORMAT ---------------------------------------------------------------------


def warning_of(env: dict[str, str], *, tty: bool) -> tuple[int, list[str]]:
    """`authgate db upgrade` (it generates the key and warns): exit code, stderr lines."""
    terminal = PtyReader() if tty else None
    try:
        result = subprocess.run(
            [sys.executable, "-m", "authgate", "db", "upgrade"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal.slave if terminal else subprocess.PIPE,
            timeout=60,
            check=False,
        )
        if terminal is not None:
            wait_for(lambda: terminal.text.endswith("\n"), 10.0, "a line on the terminal")
    finally:
        if terminal is not None:
            terminal.close()
    text = terminal.text if terminal is not None else result.stderr.decode()
    return result.returncode, lines(text)


@pytest.mark.subprocess
def test_the_format_can_be_chosen(tmp_path: Path) -> None:
    code, text_on_a_pipe = warning_of(
        sqlite_env(tmp_path / "a", AUTHGATE_LOG_FORMAT="text"), tty=False
    )
    assert code == 0
    (line,) = text_on_a_pipe
    assert READABLE.match(line), line
    assert "generated a new secret key" in line

    code, json_on_a_terminal = warning_of(
        sqlite_env(tmp_path / "b", AUTHGATE_LOG_FORMAT="JSON"), tty=True
    )
    assert code == 0
    (line,) = json_on_a_terminal
    assert json.loads(line)["message"].startswith("generated a new secret key")

    code, refused = warning_of(sqlite_env(tmp_path / "c", AUTHGATE_LOG_FORMAT="xml"), tty=False)
    assert code == 1
    assert refused == ["Error: AUTHGATE_LOG_FORMAT must be json or text"]


# --- the formatters -------------------------------------------------------------------------


def record(name: str, msg: str, *args: Any, **fields: Any) -> logging.LogRecord:
    made = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)
    if fields:
        made.authgate = fields
    return made


def test_an_access_record_is_redacted_by_the_formatters_too() -> None:
    """Even on a handler without `AccessLogFilter`, neither format writes a query value."""
    access = record(
        "uvicorn.access", '%s - "%s %s HTTP/%s" %d', "10.0.0.1:5", "GET", "/r?token=abc", "1.1", 200
    )
    as_json = json.loads(JsonFormatter().format(access))
    assert as_json["path"] == "/r?token=***"
    assert as_json["status"] == 200
    assert as_json["message"] == '10.0.0.1:5 - "GET /r?token=*** HTTP/1.1" 200'
    as_text = TextFormatter().format(access)
    # The readable line is the message alone: the fields would say it twice.
    assert as_text.endswith(' INFO    uvicorn.access: 10.0.0.1:5 - "GET /r?token=*** HTTP/1.1" 200')
    assert "abc" not in as_text


def test_the_readable_line_escapes_control_characters_and_quotes_fields() -> None:
    event = record(
        "authgate.events", "login_failed", event="login_failed", user_agent="a\x1b[2Jb c"
    )
    line = TextFormatter().format(event)
    assert "\x1b" not in line
    assert "\n" not in line
    assert line.endswith('authgate.events: login_failed  user_agent="a\\u001b[2Jb c"')
    bare = TextFormatter().format(record("authgate", "x", user_agent="a\x1bb"))
    assert bare.endswith("authgate: x  user_agent=a\\x1bb")
    plain = record("authgate", "line one\nline two")
    assert "\n" not in TextFormatter().format(plain)


def test_neither_format_writes_a_traceback() -> None:
    try:
        raise ValueError("INSERT ... VALUES ('hunter2')")
    except ValueError:
        failed = logging.LogRecord(
            "authgate", logging.ERROR, __file__, 1, "boom", (), sys.exc_info()
        )
    for formatter in (JsonFormatter(), TextFormatter()):
        text = formatter.format(failed)
        assert "hunter2" not in text
        assert "ValueError" in text
