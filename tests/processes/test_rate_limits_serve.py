"""Rate limits shared by the workers of a real `authgate serve --workers 2`: each request on
a new connection (so they spread over both workers), and the budget holds exactly.

- SQLite without CACHE_URL: the counters live in the database the workers share;
- PostgreSQL + Redis: the counters live in Redis.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.helpers import PASSWORD, Backend, Server, clean_env, serving

pytestmark = pytest.mark.subprocess

SETTINGS = {
    # The email's overall budget is the one under test; the per-address one is out of the way.
    "AUTHGATE_LOGIN_FAILURE_LIMIT": "10/15minutes",
    "AUTHGATE_LOGIN_FAILURE_LIMIT_PER_ADDRESS": "1000/minute",
    "AUTHGATE_LOGIN_LIMIT_PER_IP": "1000/minute",
    "AUTHGATE_HASH_MAX_WAIT": "60",
}
BUDGET = 10


def _register(server: Server) -> None:
    response = server.post(
        "/auth/register", json={"email": "ann@example.com", "password": PASSWORD}
    )
    assert response.status_code == 201, response.text


def _wrong(server: Server) -> int:
    """One wrong-password login on a new connection."""
    response = server.post(
        "/auth/login", json={"email": "ann@example.com", "password": "wrong guess!"}
    )
    return response.status_code


async def _burst(server: Server, count: int) -> list[int]:
    async def one() -> int:
        async with httpx.AsyncClient(timeout=60.0) as client:  # its own connection
            response = await client.post(
                server.url + "/auth/login",
                json={"email": "ann@example.com", "password": "wrong guess!"},
            )
            return response.status_code

    async with asyncio.timeout(180):
        return list(await asyncio.gather(*(one() for _ in range(count))))


def test_two_workers_on_sqlite_share_the_failed_login_budget(tmp_path: Path) -> None:
    env = clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data"), **SETTINGS})
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        _register(server)
        codes = [_wrong(server) for _ in range(25)]
        assert codes == [401] * BUDGET + [429] * (25 - BUDGET), codes
        response = server.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) >= 1


def test_two_workers_on_sqlite_share_the_budget_in_a_concurrent_burst(tmp_path: Path) -> None:
    env = clean_env({"AUTHGATE_DATA_DIR": str(tmp_path / "data"), **SETTINGS})
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        _register(server)
        codes = asyncio.run(_burst(server, 30))
        assert sorted(codes) == [401] * BUDGET + [429] * (30 - BUDGET), codes


def test_two_workers_on_postgres_share_the_budget_in_a_concurrent_burst(
    pg_backend: Backend, tmp_path: Path
) -> None:
    env = clean_env({**pg_backend.env, **SETTINGS})
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        _register(server)
        codes = asyncio.run(_burst(server, 30))
        assert sorted(codes) == [401] * BUDGET + [429] * (30 - BUDGET), codes
