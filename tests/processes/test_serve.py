"""`authgate serve` as a real process on a loopback port (contract.md §2), on both backends.

Servers run in their own process group (workers included) and are always stopped in a
`finally`; every wait is a bounded loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.helpers import (
    ANN,
    CLI_TIMEOUT,
    NEW_PASSWORD,
    PASSWORD,
    TEST_SECRET,
    Backend,
    Server,
    SmtpSink,
    bearer,
    clean_env,
    register_and_login,
    serving,
)

pytestmark = pytest.mark.subprocess


# --- the development setup ---------------------------------------------------------------


def test_serve_with_no_configuration_then_restart(tmp_path: Path) -> None:
    """No configuration at all: embedded SQLite and a generated key in ./.authgate, a
    development warning, and a restart that keeps the key (old tokens still work)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    data_dir = workdir / ".authgate"  # the default AUTHGATE_DATA_DIR, relative to the cwd

    with serving(clean_env({}, secret=None), tmp_path / "logs", cwd=workdir) as server:
        health = server.get("/health")
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}
        readiness = server.get("/readiness")
        assert readiness.status_code == 200
        assert readiness.json() == {"status": "ok", "checks": {}}
        assert "development setup" in server.stderr

        assert (data_dir / "authgate.sqlite3").is_file()
        key_file = data_dir / "secret_key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_bytes()
        assert len(key.strip()) >= 32

        tokens = register_and_login(server)
        me = server.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200, me.text
        assert me.json()["email"] == "ann@example.com"
        assert server.get("/auth/me").status_code == 401

    # The same data dir, now named explicitly: the key is read back, not regenerated.
    env = clean_env({"AUTHGATE_DATA_DIR": str(data_dir)}, secret=None)
    with serving(env, tmp_path / "logs") as server:
        assert key_file.read_bytes() == key
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        me = server.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200, me.text
        assert me.json()["email"] == "ann@example.com"
        refreshed = server.post("/auth/refresh", json={"refresh_token": tokens["refresh_token"]})
        assert refreshed.status_code == 200, refreshed.text
        assert "Traceback" not in server.stderr


# --- several workers, both backends ------------------------------------------------------


def test_serve_two_workers_share_database_and_key(backend: Backend, tmp_path: Path) -> None:
    """`--workers 2`: a token issued by one worker works on every one, and so does its
    revocation. On SQLite the workers share the generated key file; on PostgreSQL the
    configured secret."""
    secret = None if backend.name == "sqlite" else TEST_SECRET
    env = clean_env(backend.env, secret=secret)
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        readiness = server.get("/readiness")
        assert readiness.status_code == 200, readiness.text
        body = readiness.json()
        assert body["status"] == "ok"
        if backend.name == "sqlite":
            assert body["checks"] == {}
        else:
            assert set(body["checks"]) == {"database", "cache"}
            for check in body["checks"].values():
                assert check["status"] == "ok"
                assert isinstance(check["latency_ms"], int | float)
                assert not isinstance(check["latency_ms"], bool)
                assert check["latency_ms"] >= 0

        # Several logins, each on a new connection, so tokens come from both workers; each
        # token is then presented on new connections, which land on either worker.
        tokens = [register_and_login(server)]
        for _ in range(3):
            response = server.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
            assert response.status_code == 200, response.text
            tokens.append(response.json())
        statuses = [
            server.get("/auth/me", headers=bearer(t["access_token"])).status_code
            for t in tokens
            for _ in range(5)
        ]
        assert statuses == [200] * 20

        logout = server.post("/auth/logout", json={"refresh_token": tokens[0]["refresh_token"]})
        assert logout.status_code == 200
        statuses = [
            server.get("/auth/me", headers=bearer(tokens[0]["access_token"])).status_code
            for _ in range(10)
        ]
        assert statuses == [401] * 10
        assert server.get("/auth/me", headers=bearer(tokens[1]["access_token"])).status_code == 200
        assert "Traceback" not in server.stderr


# --- usage -------------------------------------------------------------------------------


def test_serve_bad_port_is_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "authgate", "serve", "--port", "notaport"],
        env=clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data")}),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Usage:" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was started or created


def test_python_dash_m_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "authgate", "--help"],
        env=clean_env({}),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
    for command in ("serve", "db", "users", "purge"):
        assert command in result.stdout


@pytest.mark.subprocess
def test_readme_curl_walkthrough(backend: Backend, tmp_path: Path) -> None:
    """examples/walkthrough.sh is the README's curl walkthrough; it runs against a real server."""
    script = Path(__file__).parents[2] / "examples" / "walkthrough.sh"
    env = clean_env({**backend.env, "AUTHGATE_COOKIE_SECURE": "false"})
    with serving(env, tmp_path / "logs") as server:
        result = subprocess.run(
            ["bash", str(script), server.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"email":"ann@example.com"' in result.stdout
    assert "access token refused after logout" in result.stdout


# --- the HTTP edge of a real server (issue 10: I2, I3) -----------------------------------


def _connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5.0)
    # The server must close each of these connections well within this bound.
    sock.settimeout(20.0)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by the socket's
    timeout: a server that keeps the connection open fails the test)."""
    data = b""
    for _ in range(1000):
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            pytest.fail(f"the server kept the connection open; received {data[:200]!r}")
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    pytest.fail("the server kept sending")


def test_serve_closes_slow_idle_and_oversized_connections(tmp_path: Path) -> None:
    """No connection is held for ever: one that sends nothing, a head that never ends, a body
    that stalls, an idle kept-alive connection; a head over the limit gets 431."""
    env = clean_env(
        {
            "AUTHGATE_DATA_DIR": str(tmp_path / "data"),
            "AUTHGATE_READ_TIMEOUT": "1",
            "AUTHGATE_KEEP_ALIVE_TIMEOUT": "1",
            "AUTHGATE_MAX_HEADER_BYTES": "8192",
        }
    )
    with serving(env, tmp_path / "logs") as server:
        # Connects, sends nothing.
        with _connect(server) as sock:
            assert _read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
        # Half a head, then silence (slowloris).
        with _connect(server) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\r\n")
            assert _read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
        # Trickling a head byte by byte does not reset the clock.
        with _connect(server) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            for _ in range(40):
                try:
                    sock.sendall(b"a")
                except (BrokenPipeError, ConnectionResetError):
                    break
                time.sleep(0.1)
            assert _read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
        # A body that stops half-way.
        with _connect(server) as sock:
            sock.sendall(
                b"POST /auth/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"email": '
            )
            assert b"HTTP/1.1 200" not in _read_until_closed(sock)
        # A complete request, then an idle kept-alive connection.
        with _connect(server) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = _read_until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert answer.endswith(b'{"status":"ok"}')
        # A head over the limit.
        with _connect(server) as sock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(
                    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n"
                )
            assert _read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
        # Ordinary requests, and a head just under the limit, still work.
        assert server.get("/health").status_code == 200
        assert server.get("/health", headers={"X-Pad": "p" * 6000}).status_code == 200
        assert "Traceback" not in server.stderr


def test_access_log_never_carries_query_values(tmp_path: Path) -> None:
    """uvicorn's access log names every request target; tokens in mailed links (and anything
    else in a query) are redacted, parameter names kept."""
    secrets_sent = ["RESETTOKEN0123456789abcdef", "CODE987654", "PASSWORDhunter2"]
    env = clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data")})
    with serving(env, tmp_path / "logs") as server:
        server.get(f"/reset-password?token={secrets_sent[0]}")
        server.get(f"/verify-email?token={secrets_sent[0]}&next=/x")
        server.get(f"/x?code={secrets_sent[1]}&password={secrets_sent[2]}")
        server.post(f"/auth/login?{secrets_sent[2]}", json={"email": "a@b.c", "password": "x"})
        access_log = tmp_path / "logs" / f"serve-{server.url.rsplit(':', 1)[1]}.out"
        for _ in range(100):  # the log is written after each answer: wait (bounded) for it
            if "/auth/login?***" in access_log.read_text(errors="replace"):
                break
            time.sleep(0.05)
        logs = access_log.read_text(errors="replace") + server.stderr
    assert "/reset-password?token=***" in logs
    assert "/verify-email?token=***&next=***" in logs
    assert "/x?code=***&password=***" in logs
    assert "/auth/login?***" in logs
    for secret in secrets_sent:
        assert secret not in logs


# --- files on disk (issue 10, F13) -------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_serve_keeps_the_embedded_database_private(tmp_path: Path) -> None:
    """The data directory is 0700 and the database, its WAL and shared-memory files 0600,
    with a permissive umask; a directory and files left wider by an older version are fixed
    at the next start, with a warning."""
    data_dir = tmp_path / "data"
    env = clean_env({"AUTHGATE_DATA_DIR": str(data_dir)}, secret=None)
    db_files = [data_dir / f"authgate.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
    old_umask = os.umask(0o022)  # the subprocess inherits it
    try:
        with serving(env, tmp_path / "logs") as server:
            register_and_login(server)
            assert _mode(data_dir) == 0o700
            for path in [*db_files, data_dir / "secret_key"]:
                assert path.exists(), path
                assert _mode(path) == 0o600, path
        # What an older version left behind.
        data_dir.chmod(0o755)
        for path in db_files:
            if path.exists():
                path.chmod(0o644)
        with serving(env, tmp_path / "logs") as server:
            register_and_login(server, "bob@example.com")
            assert _mode(data_dir) == 0o700
            for path in db_files:
                assert _mode(path) == 0o600, path
            assert "was mode 0755; now 0700" in server.stderr
            assert "was mode 0644; now 0600" in server.stderr
    finally:
        os.umask(old_umask)


# --- logins racing a password reset on a real server (security finding F2) ---------------


@pytest.mark.subprocess
def test_concurrent_logins_with_old_password_do_not_survive_reset(
    backend: Backend, tmp_path: Path, smtp_sink: SmtpSink
) -> None:
    """F2 against a real server: logins with the old password fired while the reset is
    confirmed; afterwards no token any of them got still works."""
    env = clean_env(
        {
            **backend.env,
            "AUTHGATE_SMTP_URL": smtp_sink.url,
            "AUTHGATE_RATE_LIMITS": "off",
            "AUTHGATE_HASH_MAX_WAIT": "30",
        }
    )
    with serving(env, tmp_path / "logs") as server:
        assert server.post("/auth/register", json={"email": ANN, "password": PASSWORD}).is_success
        assert server.post("/auth/password-reset", json={"email": ANN}).status_code == 200
        messages = asyncio.run(smtp_sink.wait_for(1))
        body = messages[0].get_body(preferencelist=("plain",))
        assert body is not None
        match = re.search(r"token=([A-Za-z0-9_\-]+)", body.get_content())
        assert match is not None
        token = match.group(1)

        def attempt(i: int) -> httpx.Response:
            if i == 6:
                return server.post(
                    "/auth/password-reset/confirm",
                    json={"token": token, "new_password": NEW_PASSWORD},
                )
            return server.post("/auth/login", json={"email": ANN, "password": PASSWORD})

        with ThreadPoolExecutor(max_workers=13) as pool:
            answers = list(pool.map(attempt, range(13)))
        assert answers[6].status_code == 200, answers[6].text
        tokens = [r.json() for i, r in enumerate(answers) if i != 6 and r.status_code == 200]
        for pair in tokens:
            assert server.get("/auth/me", headers=bearer(pair["access_token"])).status_code == 401
            refreshed = server.post("/auth/refresh", json={"refresh_token": pair["refresh_token"]})
            assert refreshed.status_code == 401
        assert (
            server.post("/auth/login", json={"email": ANN, "password": NEW_PASSWORD}).status_code
            == 200
        )
        assert (
            server.post("/auth/login", json={"email": ANN, "password": PASSWORD}).status_code == 401
        )
