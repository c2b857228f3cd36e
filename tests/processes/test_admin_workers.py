"""The admin API's revocations reach access tokens at once on every worker of a real
`authgate serve --workers 2` on PostgreSQL + Redis (contract §10): deactivation, ending a
user's sessions, and deletion, each through one worker's answer, refused by every worker on
the very next requests (new connections, a fixed number of them, no waiting)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import (
    ADMIN_TOKEN,
    PASSWORD,
    TEST_SECRET,
    Backend,
    Server,
    admin_headers,
    bearer,
    clean_env,
    register_and_login,
    serving,
)

pytestmark = pytest.mark.subprocess

#: Requests per check, each on a new connection, so that both workers answer some.
TRIES = 12


def _statuses(server: Server, access: str) -> list[int]:
    return [server.get("/auth/me", headers=bearer(access)).status_code for _ in range(TRIES)]


def _user_id(server: Server, email: str) -> int:
    response = server.get("/auth/admin/users", params={"query": email}, headers=admin_headers())
    assert response.status_code == 200, response.text
    [user] = response.json()["users"]
    found: int = user["id"]
    return found


def _admin(server: Server, method: str, path: str, json: Any = None) -> httpx.Response:
    return httpx.request(
        method, server.url + path, json=json, headers=admin_headers(), timeout=10.0
    )


def test_admin_revocations_reach_every_worker_at_once(pg_backend: Backend, tmp_path: Path) -> None:
    env = clean_env({**pg_backend.env, "AUTHGATE_ADMIN_TOKEN": ADMIN_TOKEN}, secret=TEST_SECRET)
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        people = ("ann@example.com", "bob@example.com", "carl@example.com")
        tokens = {email: register_and_login(server, email)["access_token"] for email in people}
        # Every worker has seen every session live (their copies are warm).
        for access in tokens.values():
            assert _statuses(server, access) == [200] * TRIES
        ann, bob, carl = (_user_id(server, email) for email in people)

        deactivated = _admin(server, "PATCH", f"/auth/admin/users/{ann}", {"is_active": False})
        assert deactivated.status_code == 200, deactivated.text
        assert _statuses(server, tokens["ann@example.com"]) == [401] * TRIES
        assert _statuses(server, tokens["bob@example.com"]) == [200] * TRIES
        refused = server.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert refused.status_code == 401

        ended = _admin(server, "DELETE", f"/auth/admin/users/{bob}/sessions")
        assert ended.json() == {"revoked": 1}
        assert _statuses(server, tokens["bob@example.com"]) == [401] * TRIES
        assert _statuses(server, tokens["carl@example.com"]) == [200] * TRIES

        deleted = _admin(server, "DELETE", f"/auth/admin/users/{carl}")
        assert deleted.status_code == 204, deleted.text
        assert _statuses(server, tokens["carl@example.com"]) == [401] * TRIES
        assert "Traceback" not in server.stderr
        assert ADMIN_TOKEN not in server.stderr
