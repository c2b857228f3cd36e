"""The API documentation pages (issue 10, I4): `/docs` shares its origin with the auth cookies,
so it loads nothing from another origin that is not pinned by version and SRI digest, runs
under a CSP, and is off by default in production. `/openapi.json` is always served."""

from __future__ import annotations

import base64
import hashlib
import re

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from authgate import AuthConfig, create_app
from tests.conftest import TEST_SECRET, AppFactory, Backend, make_config, running

_EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?P<url>[a-z][a-z0-9+.-]*://[^"']*)["']""", re.I)
_ANY_URL = re.compile(r"""[a-z][a-z0-9+.-]*://[^\s"'<>)]+""", re.I)
_TAG = re.compile(r"<(?:script|link)\b[^>]*>", re.I)


def _csp(response: httpx.Response) -> dict[str, list[str]]:
    header = response.headers.get("content-security-policy", "")
    directives = [d.split() for d in header.split(";") if d.strip()]
    return {d[0]: d[1:] for d in directives}


def _check_page(response: httpx.Response) -> None:
    """Every resource of another origin is a versioned URL with an SRI digest, allowed by the
    page's CSP; inline scripts are allowed by their digest only."""
    body = response.text
    for tag in _TAG.findall(body):
        match = _EXTERNAL.search(tag)
        if match is None:
            continue
        url = match["url"]
        assert re.search(r"@\d+\.\d+\.\d+/", url), f"not pinned to a version: {url}"
        assert re.search(r'integrity="sha(256|384|512)-[A-Za-z0-9+/=]+"', tag), tag
        assert 'crossorigin="anonymous"' in tag, tag
    # No other URL anywhere in the page (a script could load it).
    pinned = {m["url"] for m in _EXTERNAL.finditer(body)}
    assert set(_ANY_URL.findall(body)) <= pinned
    csp = _csp(response)
    assert csp["default-src"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    script_src = csp["script-src"]
    assert "'unsafe-inline'" not in script_src
    assert "'unsafe-eval'" not in script_src
    for source in script_src:
        assert source.startswith("'sha256-") or source in pinned, source
    for script in re.findall(r"<script>(.*?)</script>", body, re.S):
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in script_src
    for source in csp["style-src"]:
        assert source == "'unsafe-inline'" or source in pinned, source
    assert response.headers["referrer-policy"] == "no-referrer"


async def test_docs_in_the_development_setup(backend: Backend) -> None:
    """On by default without DATABASE_URL (the embedded setup), off with it; `docs=True`
    turns it on in production. Either way /openapi.json stays and /redoc is gone."""
    async with running(create_app(make_config(backend))) as client:
        docs = await client.get("/docs")
        openapi = await client.get("/openapi.json")
        redoc = await client.get("/redoc")
    assert openapi.status_code == 200
    assert redoc.status_code == 404
    if backend.name == "sqlite":
        assert docs.status_code == 200
        _check_page(docs)
    else:
        assert docs.status_code == 404
    async with running(create_app(make_config(backend, docs=True))) as client:
        docs = await client.get("/docs")
    assert docs.status_code == 200
    _check_page(docs)


async def test_docs_off(make_client: AppFactory) -> None:
    async with make_client(docs=False) as client:
        assert (await client.get("/docs")).status_code == 404
        assert (await client.get("/docs/oauth2-redirect")).status_code == 404
        assert (await client.get("/openapi.json")).status_code == 200


async def test_no_page_references_an_unpinned_origin(make_client: AppFactory) -> None:
    """Every GET route of the standalone app without path parameters: whatever it answers
    names no URL of another origin, unless it is a pinned, SRI-checked asset of /docs."""
    async with make_client(docs=True) as client:
        app = client._transport.app  # type: ignore[attr-defined]
        paths = sorted(
            route.path
            for route in app.routes
            if isinstance(route, APIRoute | Route)
            and "GET" in (route.methods or ())
            and "{" not in route.path
        )
        assert "/docs" in paths
        assert "/openapi.json" in paths
        for path in paths:
            response = await client.get(path)
            if path == "/docs":
                _check_page(response)
                continue
            urls = _ANY_URL.findall(response.text)
            assert urls == [], (path, urls)


@pytest.mark.parametrize(
    ("env", "database_url", "enabled"),
    [
        (None, None, True),
        (None, "postgresql://db/app", False),
        ("on", "postgresql://db/app", True),
        ("off", None, False),
        ("true", None, True),
    ],
)
def test_docs_setting(
    monkeypatch: pytest.MonkeyPatch, env: str | None, database_url: str | None, enabled: bool
) -> None:
    for name in ("AUTHGATE_DOCS", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    if env is not None:
        monkeypatch.setenv("AUTHGATE_DOCS", env)
    if database_url is not None:
        monkeypatch.setenv("DATABASE_URL", database_url)
    assert AuthConfig(secret_key=TEST_SECRET).docs_enabled is enabled
