"""web/routes/client.py through HTTP: `{prefix}/client.js` and `{prefix}/client.d.ts`
(contract §7) with their content types, caching and HEAD, on both backends. What the module
does in a browser is tests/browser/test_client.py's."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.helpers import AppFactory

JS = "text/javascript; charset=utf-8"
DTS = "application/typescript; charset=utf-8"
#: Anything that names another origin: a scheme with `//`, or a protocol-relative string.
ANOTHER_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://|[\"'`]//", re.IGNORECASE)


@pytest.mark.parametrize(("path", "media_type"), [("client.js", JS), ("client.d.ts", DTS)])
async def test_served_with_type_nosniff_and_cache_headers(
    client: httpx.AsyncClient, path: str, media_type: str
) -> None:
    response = await client.get(f"/auth/{path}")
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "public, max-age=300"
    assert re.fullmatch(r'"[0-9a-f]{32}"', response.headers["etag"])
    assert response.headers["content-length"] == str(len(response.content))
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize("path", ["client.js", "client.d.ts"])
async def test_etag_revalidates_to_304(client: httpx.AsyncClient, path: str) -> None:
    etag = (await client.get(f"/auth/{path}")).headers["etag"]
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        response = await client.get(f"/auth/{path}", headers={"If-None-Match": header})
        assert response.status_code == 304, header
        assert response.content == b""
        assert response.headers["etag"] == etag
    response = await client.get(f"/auth/{path}", headers={"If-None-Match": '"other"'})
    assert response.status_code == 200
    assert response.content


@pytest.mark.parametrize(("path", "media_type"), [("client.js", JS), ("client.d.ts", DTS)])
async def test_head_has_the_headers_and_no_body(
    client: httpx.AsyncClient, path: str, media_type: str
) -> None:
    full = await client.get(f"/auth/{path}")
    response = await client.head(f"/auth/{path}")
    assert response.status_code == 200
    assert response.content == b""
    assert response.headers["content-type"] == media_type
    assert response.headers["content-length"] == str(len(full.content))
    assert response.headers["etag"] == full.headers["etag"]
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_other_methods_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/auth/client.js")
    assert response.status_code == 405


async def test_module_is_self_contained(client: httpx.AsyncClient) -> None:
    """No other origin, no import of anything, the API of contract §7 exported."""
    text = (await client.get("/auth/client.js")).text
    assert ANOTHER_ORIGIN.search(text) is None, ANOTHER_ORIGIN.search(text)
    assert re.search(r"^\s*import\b|\bimport\s*\(", text, re.MULTILINE) is None
    assert "export function createClient(" in text
    assert "export class AuthgateError" in text
    for member in ("login", "register", "logout", "me", "fetch", "onChange", "request"):
        assert re.search(rf"\b{member}\b", text), member
    assert "navigator.locks.request(LOCK_NAME" in text
    assert 'const LOCK_NAME = "authgate-refresh";' in text
    assert 'const CHANNEL_NAME = "authgate";' in text
    assert 'const DEFAULT_PREFIX = "/auth";' in text


async def test_declarations_match_the_module(client: httpx.AsyncClient) -> None:
    text = (await client.get("/auth/client.d.ts")).text
    assert "export function createClient(options?: ClientOptions): AuthgateClient;" in text
    for member in ("login(", "register(", "logout(", "me(", "fetch(", "onChange(", "request<"):
        assert member in text, member


async def test_served_under_the_configured_prefix(make_client: AppFactory) -> None:
    async with make_client(prefix="/id") as client:
        response = await client.get("/id/client.js")
        assert response.status_code == 200
        assert 'const DEFAULT_PREFIX = "/id";' in response.text
        assert (await client.get("/id/client.d.ts")).status_code == 200
        assert (await client.get("/auth/client.js")).status_code == 404


async def test_no_store_is_not_needed_nothing_personal(client: httpx.AsyncClient) -> None:
    """Signed in or not, the module is the same bytes: it carries nothing of the user."""
    anonymous = await client.get("/auth/client.js")
    await client.post(
        "/auth/register", json={"email": "ann@example.com", "password": "correct horse battery"}
    )
    await client.post(
        "/auth/login", json={"email": "ann@example.com", "password": "correct horse battery"}
    )
    signed_in = await client.get("/auth/client.js")
    assert signed_in.content == anonymous.content
    assert signed_in.headers["etag"] == anonymous.headers["etag"]
