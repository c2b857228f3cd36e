"""web/routes/health.py through HTTP: GET /health and GET /readiness at the application root
(contract §4 Health endpoints), and GET /.well-known/jwks.json."""

from __future__ import annotations

from typing import Any

import httpx
import jwt
import pytest

from tests.helpers import AppFactory, Backend, bearer, login, register, write_signing_key

UNREACHABLE_CACHE = "redis://127.0.0.1:1/0"
UNREACHABLE_DATABASE = "postgresql://postgres@127.0.0.1:1/x"


def assert_ok_check(check: dict[str, Any]) -> None:
    assert check["status"] == "ok"
    assert isinstance(check["latency_ms"], int | float)
    assert not isinstance(check["latency_ms"], bool)
    assert check["latency_ms"] >= 0
    assert "error" not in check


def assert_failed_check(check: dict[str, Any]) -> None:
    assert check["status"] == "error"
    assert isinstance(check["error"], str)
    assert check["error"]
    assert isinstance(check["latency_ms"], int | float)
    # The reason never quotes the URL (and so never its password).
    assert "127.0.0.1" not in check["error"]


async def test_health_answers_ok_at_the_root(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_health_is_not_under_the_prefix(client: httpx.AsyncClient) -> None:
    for path in ("/auth/health", "/auth/readiness"):
        response = await client.get(path)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


async def test_health_stays_at_the_root_with_another_prefix(make_client: AppFactory) -> None:
    async with make_client(prefix="/id") as client:
        assert (await client.get("/health")).json() == {"status": "ok"}
        assert (await client.get("/readiness")).status_code == 200
        assert (await client.get("/id/health")).status_code == 404


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_readiness_with_nothing_configured_has_no_checks(client: httpx.AsyncClient) -> None:
    response = await client.get("/readiness")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {}}
    assert response.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_readiness_checks_database_and_cache_when_configured(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/readiness")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "cache"}
    assert_ok_check(body["checks"]["database"])
    assert_ok_check(body["checks"]["cache"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_readiness_checks_an_explicit_sqlite_url(
    make_client: AppFactory, backend: Backend
) -> None:
    url = f"sqlite:///{backend.data_dir / 'explicit.sqlite3'}"
    async with make_client(database_url=url) as client:
        response = await client.get("/readiness")
    assert response.status_code == 200, response.text
    assert set(response.json()["checks"]) == {"database"}
    assert_ok_check(response.json()["checks"]["database"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_readiness_with_unreachable_cache_is_503(make_client: AppFactory) -> None:
    async with make_client(cache_url=UNREACHABLE_CACHE) as client:
        response = await client.get("/readiness")
        # Liveness does not depend on the cache.
        assert (await client.get("/health")).status_code == 200
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "unavailable"
    assert set(body["checks"]) == {"cache"}
    assert_failed_check(body["checks"]["cache"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_readiness_with_unreachable_database_is_503(make_client: AppFactory) -> None:
    async with make_client(database_url=UNREACHABLE_DATABASE, auto_migrate=False) as client:
        response = await client.get("/readiness")
        assert (await client.get("/health")).status_code == 200
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "unavailable"
    assert set(body["checks"]) == {"database"}
    assert_failed_check(body["checks"]["database"])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_readiness_reports_each_check_on_its_own(make_client: AppFactory) -> None:
    """A dead cache beside a live database: 503, the database still reported ok."""
    async with make_client(cache_url=UNREACHABLE_CACHE) as client:
        response = await client.get("/readiness")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert_ok_check(checks["database"])
    assert_failed_check(checks["cache"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_readiness_with_everything_unreachable_is_503(make_client: AppFactory) -> None:
    async with make_client(
        database_url="postgresql://postgres:hunter2@127.0.0.1:1/x",
        cache_url="redis://:hunter2@127.0.0.1:1/0",
        auto_migrate=False,
    ) as client:
        response = await client.get("/readiness")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert_failed_check(body["checks"]["database"])
    assert_failed_check(body["checks"]["cache"])
    assert "hunter2" not in response.text


# --- the JWKS ----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
async def test_tokens_verify_offline_with_the_published_jwks(
    make_client: AppFactory, backend: Backend, algorithm: str
) -> None:
    key_file = write_signing_key(backend.data_dir.parent / "signing.pem", algorithm)
    async with make_client(jwt_algorithm=algorithm, jwt_private_key_file=key_file) as client:
        await register(client)
        tokens = await login(client)
        jwks = (await client.get("/.well-known/jwks.json")).json()
        client.cookies.clear()
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 200
    header = jwt.get_unverified_header(tokens["access_token"])
    assert header["alg"] == algorithm
    (jwk,) = jwks["keys"]
    assert jwk["kid"] == header["kid"]
    assert "d" not in jwk  # never the private half
    # Another service, with nothing but the JWKS:
    claims = jwt.decode(
        tokens["access_token"],
        jwt.PyJWK(jwk).key,
        algorithms=[algorithm],
        audience="authgate",
        issuer="authgate",
    )
    assert claims["sub"] == "1"
