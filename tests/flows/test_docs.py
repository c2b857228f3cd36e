"""web/routes/docs.py and the OpenAPI document, through HTTP: `/docs` shares its origin with the
auth cookies, so it loads nothing from another origin that is not pinned by version and SRI
digest, runs under a CSP, and is off by default in production (issue 10, I4). `/openapi.json`
is always served, with the package version (contract §4 Versioning)."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.metadata import version

import httpx
from fastapi.routing import APIRoute
from starlette.routing import Route

from authgate import create_app
from tests.helpers import AppFactory, Backend, make_config, running

INTERFACE_PATHS = {
    "/auth/register": "post",
    "/auth/login": "post",
    "/auth/refresh": "post",
    "/auth/logout": "post",
    "/auth/me": "get",
    "/auth/password-reset": "post",
    "/auth/password-reset/confirm": "post",
    "/auth/email-verification": "post",
    "/auth/email-verification/confirm": "post",
}
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


# --- the OpenAPI document ----------------------------------------------------------------


async def test_openapi_carries_the_package_version(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["info"]["version"] == version("authgate")
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for path, method in INTERFACE_PATHS.items():
        assert path in paths, path
        assert method in paths[path], (path, method)
    assert "get" in paths["/health"]
    assert "get" in paths["/readiness"]


async def test_openapi_follows_the_prefix(make_client: AppFactory) -> None:
    async with make_client(prefix="/id") as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
    for path in INTERFACE_PATHS:
        assert "/id" + path.removeprefix("/auth") in paths
    assert "/health" in paths
