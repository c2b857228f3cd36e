"""Self-service revocations reach access tokens at once on every worker of a real
`authgate serve --workers 2` (contract §5), on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import (
    PASSWORD,
    TEST_SECRET,
    Backend,
    Server,
    bearer,
    clean_env,
    register_and_login,
    serving,
)

pytestmark = pytest.mark.subprocess

ANN = "ann@example.com"


def _login(server: Server) -> dict[str, Any]:
    response = server.post("/auth/login", json={"email": ANN, "password": PASSWORD})
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    return tokens


def _statuses(server: Server, access: str, count: int = 12) -> list[int]:
    """GET /me `count` times, each on a new connection (so both workers answer)."""
    return [server.get("/auth/me", headers=bearer(access)).status_code for _ in range(count)]


def _sid(server: Server, access: str) -> str:
    response = server.get("/auth/sessions", headers=bearer(access))
    assert response.status_code == 200, response.text
    [current] = [s for s in response.json()["sessions"] if s["current"]]
    sid: str = current["id"]
    return sid


def _delete(
    server: Server, path: str, tokens: dict[str, Any], json: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.request(
        "DELETE",
        server.url + path,
        json=json,
        headers=bearer(tokens["access_token"]),
        timeout=10.0,
    )


def test_revocations_reach_every_worker_at_once(backend: Backend, tmp_path: Path) -> None:
    secret = None if backend.name == "sqlite" else TEST_SECRET
    env = clean_env(backend.env, secret=secret)
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        mine = register_and_login(server)
        phone, tablet, laptop = (_login(server) for _ in range(3))
        # Every worker has seen every session live (their copies are warm).
        for tokens in (mine, phone, tablet, laptop):
            assert _statuses(server, tokens["access_token"]) == [200] * 12

        # One session, by id.
        response = _delete(server, f"/auth/sessions/{_sid(server, phone['access_token'])}", mine)
        assert response.status_code == 204, response.text
        assert _statuses(server, phone["access_token"]) == [401] * 12

        # Every other session.
        response = _delete(server, "/auth/sessions", mine)
        assert response.json() == {"revoked": 2}
        for tokens in (tablet, laptop):
            assert _statuses(server, tokens["access_token"]) == [401] * 12
        assert _statuses(server, mine["access_token"]) == [200] * 12

        # The password change keeps this session and shuts the others out.
        other = _login(server)
        assert _statuses(server, other["access_token"]) == [200] * 12
        change = server.post(
            "/auth/password-change",
            json={"current_password": PASSWORD, "new_password": "a brand new passphrase"},
            headers=bearer(mine["access_token"]),
        )
        assert change.status_code == 200, change.text
        assert _statuses(server, other["access_token"]) == [401] * 12
        assert _statuses(server, mine["access_token"]) == [200] * 12

        # Deleting the account ends this session too.
        deleted = _delete(server, "/auth/me", mine, json={"password": "a brand new passphrase"})
        assert deleted.status_code == 204, deleted.text
        assert _statuses(server, mine["access_token"]) == [401] * 12
        assert "Traceback" not in server.stderr
