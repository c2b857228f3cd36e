"""The README's library example is a file, and it runs: examples/mount_fastapi.py."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.helpers import PASSWORD, TEST_SECRET, Backend, bearer, login, register, running

EXAMPLE = Path(__file__).parents[2] / "examples" / "mount_fastapi.py"


async def test_mounted_app_protects_its_own_routes(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in backend.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AUTHGATE_SECRET_KEY", TEST_SECRET)
    monkeypatch.setenv("AUTHGATE_RATE_LIMITS", "off")
    app = runpy.run_path(str(EXAMPLE))["app"]

    async with running(app) as client:
        assert (await client.get("/hello")).status_code == 401
        assert (await client.get("/health")).json() == {"status": "ok"}
        await register(client)
        tokens = await login(client, password=PASSWORD)

        # Cookie authentication (the jar holds the login cookies).
        response = await client.get("/hello")
        assert response.status_code == 200
        assert response.json() == {"hello": "ann@example.com"}

        # An unsafe request authenticated by cookie needs the CSRF header…
        assert (await client.post("/notes")).status_code == 403
        csrf = client.cookies["svc_csrf_token"]
        response = await client.post("/notes", headers={"X-CSRF-Token": csrf})
        assert response.status_code == 200
        # …a bearer token does not.
        client.cookies.clear()
        response = await client.post("/notes", headers=bearer(tokens["access_token"]))
        assert response.status_code == 200

        # Logging out reaches the host app's routes at once.
        await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        response = await client.get("/hello", headers=bearer(tokens["access_token"]))
        assert response.status_code == 401
