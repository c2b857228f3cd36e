"""`authgate audit` and the audit retention of `authgate purge`, run as real subprocesses on
both backends: the filters (--user, --event, --since, --limit), the table and the JSON lines,
the exit codes of a wrong filter, a CLI step (`users deactivate`) on the record, and purge
trimming what is older than `AUTHGATE_AUDIT_RETENTION_DAYS` (0: everything); and two `serve`
workers stopped with SIGTERM lose no event."""

from __future__ import annotations

import asyncio
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from authgate import create_app
from tests.helpers import (
    PASSWORD,
    Backend,
    FakeClock,
    authgate,
    clean_env,
    make_config,
    register,
    running,
    serving,
)

pytestmark = pytest.mark.subprocess

ANN = "ann@example.com"
BOB = "bob@example.com"


def run_all(commands: list[tuple[str, ...]], env: dict[str, str]) -> list[Any]:
    """Independent read-only commands side by side; results in the order given."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        return list(pool.map(lambda args: authgate(*args, env=env), commands))


def lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


async def test_audit_filters_formats_and_retention(backend: Backend) -> None:
    clock = FakeClock()
    now = clock()
    clock.now = now - timedelta(days=100)  # Ann's events are past the 90-day retention
    async with running(create_app(make_config(backend), clock=clock)) as client:
        ann = await register(client, ANN)
        r = await client.post("/auth/login", json={"email": ANN, "password": "wrong password"})
        assert r.status_code == 401
        clock.now = now
        bob = await register(client, BOB)
        r = await client.post("/auth/login", json={"email": BOB, "password": PASSWORD})
        assert r.status_code == 200
        r = await client.post("/auth/login", json={"email": BOB, "password": "wrong password"})
        assert r.status_code == 401
    env = clean_env(backend.env)
    since = (now - timedelta(days=50)).isoformat()
    (
        table,
        everything,
        of_ann,
        by_id,
        failed,
        recent,
        two,
        unknown,
        bad_event,
        bad_since,
    ) = await asyncio.to_thread(
        run_all,
        [
            ("audit",),
            ("audit", "--json"),
            ("audit", "--user", "ANN@example.com", "--json"),
            ("audit", "--user", str(bob["id"]), "--json"),
            ("audit", "--event", "login_failed", "--json"),
            ("audit", "--since", since, "--json"),
            ("audit", "--limit", "2", "--json"),
            ("audit", "--user", "nobody@example.com"),
            ("audit", "--event", "logged_in"),
            ("audit", "--since", "last tuesday"),
        ],
        env,
    )
    rows = lines(everything)
    assert [r["event"] for r in rows] == [
        "login_failed",
        "login_succeeded",
        "registered",
        "login_failed",
        "registered",
    ]
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)
    assert {r["client_ip"] for r in rows} == {"127.0.0.1"}
    assert set(rows[0]) >= {"id", "time", "event", "outcome", "user_id", "session_id", "reason"}
    assert [(r["event"], r["user_id"]) for r in lines(of_ann)] == [
        ("login_failed", ann["id"]),
        ("registered", ann["id"]),
    ]
    assert {r["user_id"] for r in lines(by_id)} == {bob["id"]}
    assert [(r["user_id"], r["reason"]) for r in lines(failed)] == [
        (bob["id"], "wrong_password"),
        (ann["id"], "wrong_password"),
    ]
    assert [r["event"] for r in lines(recent)] == ["login_failed", "login_succeeded", "registered"]
    assert len(lines(two)) == 2

    assert table.returncode == 0, table.stderr
    header, *body = table.stdout.splitlines()
    assert header.split()[:4] == ["TIME", "(UTC)", "EVENT", "OUTCOME"]
    assert len(body) == 5
    assert body[0].split()[2:4] == ["login_failed", "failure"]
    assert "wrong_password" in body[0]
    assert "127.0.0.1" in body[0]

    assert unknown.returncode == 1
    assert unknown.stderr.strip().splitlines() == ["Error: no user with email nobody@example.com"]
    for wrong in (bad_event, bad_since):
        assert wrong.returncode == 2, wrong.stderr
        assert "Traceback" not in wrong.stderr
    assert "unknown event 'logged_in'" in bad_event.stderr
    assert PASSWORD not in json.dumps(rows) + table.stdout

    # A command's own step is on the record, with the command's request id.
    done = await asyncio.to_thread(authgate, "users", "deactivate", BOB, env=env)
    assert done.returncode == 0, done.stderr
    [latest] = lines(await asyncio.to_thread(authgate, "audit", "--limit", "1", "--json", env=env))
    assert (latest["event"], latest["user_id"]) == ("deactivated", bob["id"])
    assert latest["request_id"].startswith("cli-")

    # purge trims Ann's 100-day-old events (retention 90 by default) and says so.
    purged = await asyncio.to_thread(authgate, "purge", env=env)
    assert purged.returncode == 0, purged.stderr
    assert "and 2 audit events" in purged.stdout
    kept = lines(await asyncio.to_thread(authgate, "audit", "--json", env=env))
    assert {r["user_id"] for r in kept} == {bob["id"]}
    assert len(kept) == 4
    # Retention 0: the audit log is off, and purge keeps none of it.
    off = clean_env({**backend.env, "AUTHGATE_AUDIT_RETENTION_DAYS": "0"})
    purged = await asyncio.to_thread(authgate, "purge", env=off)
    assert purged.returncode == 0, purged.stderr
    assert "and 4 audit events" in purged.stdout
    assert lines(await asyncio.to_thread(authgate, "audit", "--json", env=env)) == []


def test_two_workers_stopped_gracefully_lose_no_event(backend: Backend, tmp_path: Path) -> None:
    env = clean_env({**backend.env, "AUTHGATE_HASH_MAX_WAIT": "60"})
    emails = [f"user{i}@example.com" for i in range(6)]
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        for i, email in enumerate(emails):  # a new connection each: they spread over the workers
            headers = {"X-Request-ID": f"req-{i}", "Connection": "close"}
            body = {"email": email, "password": PASSWORD}
            assert server.post("/auth/register", json=body, headers=headers).status_code == 201
            body["password"] = "wrong password"
            assert server.post("/auth/login", json=body, headers=headers).status_code == 401
    # SIGTERM: each worker writes what it still holds before it exits.
    rows = lines(authgate("audit", "--json", "--limit", "100", env=env))
    assert sorted((r["request_id"], r["event"]) for r in rows) == sorted(
        [(f"req-{i}", "registered") for i in range(6)]
        + [(f"req-{i}", "login_failed") for i in range(6)]
    )
