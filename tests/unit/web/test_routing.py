"""`GateRouter`: a path none of authgate's routes has is refused in one test, and nothing else
about routing changes (web/routing.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import APIRouter, FastAPI
from starlette.routing import Match

from authgate import AuthConfig, AuthGate
from authgate.web.routing import GateRouter
from tests.helpers import TEST_SECRET


def _gate_router(app: FastAPI) -> GateRouter:
    found = [
        r for r in app.router.routes if isinstance(getattr(r, "original_router", None), GateRouter)
    ]
    assert len(found) == 1
    router = found[0].original_router  # type: ignore[attr-defined]
    assert isinstance(router, GateRouter)
    return router


def _app(tmp_path: Path) -> tuple[FastAPI, GateRouter]:
    gate = AuthGate(AuthConfig(secret_key=TEST_SECRET, data_dir=tmp_path / "data"))
    app = FastAPI()
    gate.install(app)
    return app, _gate_router(app)


def test_every_authgate_path_starts_with_one_of_the_prefixes(tmp_path: Path) -> None:
    app, router = _app(tmp_path)
    prefixes = router._route_prefixes()
    assert prefixes is not None
    assert "/auth/me" in prefixes or any("/auth/me".startswith(p) for p in prefixes)
    paths = list(app.openapi()["paths"])
    assert len(paths) > 20
    for path in paths:
        assert path.split("{", 1)[0].startswith(prefixes), path
    # Shortest of each: no prefix is an extension of another.
    assert not [p for p in prefixes for q in prefixes if p != q and p.startswith(q)]


def test_a_foreign_path_is_refused_at_once_and_an_own_path_is_matched(tmp_path: Path) -> None:
    _, router = _app(tmp_path)
    scope = {"type": "http", "path": "/hello", "method": "GET", "root_path": ""}
    assert router.matches(scope) == (Match.NONE, {})
    # Under a root path the prefixes are not applied: FastAPI's own matching decides.
    assert router._route_prefixes() is not None
    unknown = GateRouter()
    unknown.routes.append(object())  # type: ignore[arg-type]  # a route without a path
    assert unknown._route_prefixes() is None


async def test_host_routes_before_and_after_install_and_a_catch_all_keep_their_order(
    tmp_path: Path,
) -> None:
    gate = AuthGate(AuthConfig(secret_key=TEST_SECRET, data_dir=tmp_path / "data"))
    app = FastAPI(lifespan=gate.lifespan)
    before = APIRouter()

    @before.get("/auth/host-first")
    async def host_first() -> dict[str, str]:
        return {"route": "host, declared before install"}

    app.include_router(before)
    gate.install(app)

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"route": "hello"}

    @app.get("/{anything:path}")
    async def catch_all(anything: str) -> dict[str, str]:
        return {"route": "catch-all", "path": anything}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/hello")).json() == {"route": "hello"}
        assert (await client.get("/auth/host-first")).json()["route"].startswith("host")
        assert (await client.get("/health")).json() == {"status": "ok"}
        # An authgate path with another method: Starlette's rule is unchanged (a later full
        # match wins over a partial one), so the host's catch-all answers.
        assert (await client.get("/auth/login")).json()["route"] == "catch-all"
        assert (await client.get("/somewhere/else")).json() == {
            "route": "catch-all",
            "path": "somewhere/else",
        }
        assert (await client.get("/auth/me")).status_code == 401
