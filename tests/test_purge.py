"""`authgate purge` in batches: what it deletes, what it must keep."""

from __future__ import annotations

from authgate import create_app
from tests.conftest import Backend, FakeClock, bearer, login, make_config, register, running


async def test_purge_in_small_batches(backend: Backend, clock: FakeClock) -> None:
    app = create_app(make_config(backend, refresh_ttl=100, session_max_age=0), clock=clock)
    gate = app.state.authgate
    async with running(app) as client:
        await register(client)
        for _ in range(5):  # five sessions that will simply expire
            await login(client)
        for _ in range(3):  # three logged out
            tokens = await login(client)
            await client.post("/auth/logout", json={"refresh_token": tokens["refresh_token"]})
        clock.advance(101)
        live = await login(client)
        rotated = await client.post("/auth/refresh", json={"refresh_token": live["refresh_token"]})
        newest = rotated.json()
        client.cookies.clear()

        result = await gate.accounts.purge(batch_size=2)
        assert result.sessions == 8
        assert result.batches > 3  # several transactions, not one
        # A second purge finds nothing.
        assert (await gate.accounts.purge(batch_size=2)).total == 0

        # The live session survived, and its spent token is still recognised as reuse.
        me = await client.get("/auth/me", headers=bearer(newest["access_token"]))
        assert me.status_code == 200
        reuse = await client.post("/auth/refresh", json={"refresh_token": live["refresh_token"]})
        assert reuse.json()["code"] == "refresh_token_reused"
