"""The browser client (contract §7) in a real Chromium against a real `authgate serve`.

The page is a blank HTML document on the server's origin with the pages' CSP
(`default-src 'self'`, fulfilled by the browser's request routing: it reaches no server); the
tests import `{prefix}/client.js` into it and drive the client with `page.evaluate`. What
reached the server is read from its access log, what the browser sent from `watch_context`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.browser.conftest import LiveServer, ServeFactory, Watch, first_page, watch_context

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page, Route

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

PASSWORD = "correct horse battery"
TEST_PAGE = "/__client-test__"
#: The same page without a CSP, where a request to another origin is not blocked before it
#: is sent (only to check what it carries: the browser's routing answers it).
OPEN_PAGE = "/__client-test-open__"
ELSEWHERE = "http://127.0.0.1:9/collect"
CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
HTML = "<!doctype html><html lang=en><meta charset=utf-8><title>client</title><p>client test"
#: Import the module into the page: `window.auth`, and every onChange event in `window.events`.
BOOT = """async (url) => {
  const { createClient } = await import(url);
  window.auth = createClient();
  window.events = [];
  window.auth.onChange((event) => window.events.push(event));
}"""
#: `auth.me()` at one instant (epoch ms) shared by every tab.
ME_AT = """async (at) => {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
  return window.auth.me();
}"""
#: A call whose AuthgateError comes back as a plain object.
CAUGHT = """async ([method, args]) => {
  try { return { value: await window.auth[method](...args) }; }
  catch (error) { return { status: error.status, code: error.code, name: error.name }; }
}"""


async def open_tab(context: BrowserContext, server: LiveServer) -> Page:
    """A tab on the test page with the client loaded."""
    page = await context.new_page()
    return await load(page, server)


async def load(page: Page, server: LiveServer, path: str = TEST_PAGE) -> Page:
    await page.goto(server.url + path)
    await page.evaluate(BOOT, f"{server.url}/auth/client.js")
    return page


async def serve_test_page(context: BrowserContext, server: LiveServer) -> None:
    async def fulfil(route: Route) -> None:
        await route.fulfill(
            status=200,
            content_type="text/html; charset=utf-8",
            headers={"Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"},
            body=HTML,
        )

    async def fulfil_open(route: Route) -> None:
        await route.fulfill(status=200, content_type="text/html; charset=utf-8", body=HTML)

    async def elsewhere(route: Route) -> None:
        await route.fulfill(status=204)

    await context.route(server.url + TEST_PAGE, fulfil)
    await context.route(server.url + OPEN_PAGE, fulfil_open)
    await context.route(ELSEWHERE, elsewhere)


async def setup(
    serve: ServeFactory, context: BrowserContext, env: dict[str, str] | None = None
) -> tuple[LiveServer, Watch]:
    server = await serve(env)
    watch = await watch_context(context, server.url)
    await serve_test_page(context, server)
    return server, watch


async def register(server: LiveServer, email: str = "ann@example.com") -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        response = await http.post("/auth/register", json={"email": email, "password": PASSWORD})
    assert response.status_code == 201, response.text


async def served(server: LiveServer, method: str, path: str, expected: int) -> int:
    """How many `method path` the server answered, once the access log has `expected` of them
    (bounded wait: the log line follows the answer) and a moment more for any extra one."""
    for _ in range(50):
        if server.access_count(method, path) >= expected:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)
    return server.access_count(method, path)


async def events(page: Page) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = await page.evaluate("window.events")
    return result


async def csrf_cookie(context: BrowserContext) -> str | None:
    for cookie in await context.cookies():
        if cookie.get("name") == "svc_csrf_token":
            return cookie.get("value")
    return None


async def test_login_me_logout(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server, watch = await setup(serve_authgate, browser_context)
    page = await load(await first_page(browser_context), server)

    user = await page.evaluate("window.auth.register('ann@example.com', 'correct horse battery')")
    assert user["email"] == "ann@example.com"
    taken = await page.evaluate(CAUGHT, ["register", ["ANN@example.com", PASSWORD]])
    assert taken == {"status": 409, "code": "email_taken", "name": "AuthgateError"}
    wrong = await page.evaluate(CAUGHT, ["login", ["ann@example.com", "wrong password!"]])
    assert wrong == {"status": 401, "code": "invalid_credentials", "name": "AuthgateError"}
    assert await page.evaluate("window.auth.me()") is None
    assert await events(page) == []

    me = await page.evaluate("window.auth.login('ann@example.com', 'correct horse battery')")
    assert me["email"] == "ann@example.com"
    assert me == await page.evaluate("window.auth.me()")
    assert await csrf_cookie(browser_context)
    assert await events(page) == [{"type": "signed-in", "remote": False}]

    await page.evaluate("window.auth.logout()")
    assert await events(page) == [
        {"type": "signed-in", "remote": False},
        {"type": "signed-out", "remote": False},
    ]
    assert await csrf_cookie(browser_context) is None
    assert await page.evaluate("window.auth.me()") is None
    assert watch.requests_to("POST", "/auth/refresh") == []  # nothing to refresh, no attempt
    watch.assert_clean()


async def test_csrf_header_on_unsafe_methods_only(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server, watch = await setup(serve_authgate, browser_context)
    await register(server)
    page = await load(await first_page(browser_context), server)
    await page.evaluate("window.auth.login('ann@example.com', 'correct horse battery')")
    csrf = await csrf_cookie(browser_context)
    assert csrf

    sessions = await page.evaluate("window.auth.request('GET', '/sessions')")
    assert len(sessions["sessions"]) == 1
    # Cookie-authenticated DELETE: 403 csrf_failed without the header bound to the session.
    revoked = await page.evaluate("window.auth.request('DELETE', '/sessions')")
    assert revoked == {"revoked": 0}
    status = await page.evaluate(
        "window.auth.fetch('/auth/sessions', { method: 'DELETE' }).then((r) => r.status)"
    )
    assert status == 200

    [get] = watch.requests_to("GET", "/auth/sessions")
    assert "x-csrf-token" not in get.headers
    deletes = watch.requests_to("DELETE", "/auth/sessions")
    assert len(deletes) == 2
    assert all(d.headers.get("x-csrf-token") == csrf for d in deletes)
    [login] = watch.requests_to("POST", "/auth/login")
    assert "x-csrf-token" not in login.headers  # no cookie yet: nothing to send

    watch.assert_clean()

    # Another origin never gets the value. Under the page's CSP the request is not even sent
    # (and the watch sees the violation); on a page without one it goes out without it.
    post_elsewhere = (
        "(url) => window.auth.fetch(url, { method: 'POST' }).then(() => 'sent', () => 'failed')"
    )
    assert await page.evaluate(post_elsewhere, ELSEWHERE) == "failed"
    assert [r.url for r in watch.requests if r.url == ELSEWHERE] == []
    assert any(ELSEWHERE in v or "connect-src" in v for v in watch.csp_violations)
    await load(page, server, OPEN_PAGE)
    await page.evaluate(post_elsewhere, ELSEWHERE)
    [sent] = [r for r in watch.requests if r.url == ELSEWHERE]
    assert sent.method == "POST"
    assert "x-csrf-token" not in sent.headers
    assert watch.foreign_requests() == [ELSEWHERE]


async def test_four_tabs_expired_together_make_one_refresh(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    """Strict reuse is on: a second refresh with the rotated token would revoke the family, and
    the tabs would end signed out. One refresh, four 200s, twice over."""
    server, watch = await setup(serve_authgate, browser_context, {"AUTHGATE_ACCESS_TTL": "3"})
    await register(server)
    tabs = [await open_tab(browser_context, server) for _ in range(4)]
    await tabs[0].evaluate("window.auth.login('ann@example.com', 'correct horse battery')")

    for round_ in (1, 2):
        await access_cookie_gone(browser_context)
        seen = len(me_statuses(server))
        at = int(time.time() * 1000) + 300
        users = await asyncio.gather(*(tab.evaluate(ME_AT, at) for tab in tabs))
        assert [u and u["email"] for u in users] == ["ann@example.com"] * 4, (round_, users)
        assert len(watch.requests_to("POST", "/auth/refresh")) == round_
        assert await served(server, "POST", "/auth/refresh", round_) == round_
        # The tabs did find their token expired together (all four, in every run so far; at
        # least two make the race), and each got its 200 from one retry.
        statuses = me_statuses(server)[seen:]
        assert statuses.count(401) >= 2, statuses
        assert statuses.count(200) == 4, statuses
    assert all(status == 200 for m, p, status in server.access_log() if p == "/auth/refresh")
    for tab in tabs:
        assert all(e["type"] != "signed-out" for e in await events(tab))
        assert (await tab.evaluate("window.auth.me()"))["email"] == "ann@example.com"
    watch.assert_clean()


def me_statuses(server: LiveServer) -> list[int]:
    return [status for method, path, status in server.access_log() if path == "/auth/me"]


async def access_cookie_gone(context: BrowserContext, timeout: float = 15.0) -> None:
    """Wait (bounded) until the browser dropped the access cookie: its Max-Age is the TTL."""
    for _ in range(int(timeout / 0.1)):
        if all(c.get("name") != "svc_access_token" for c in await context.cookies()):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the access cookie outlived {timeout} s")


async def test_logout_reaches_the_other_tabs(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server, watch = await setup(serve_authgate, browser_context)
    await register(server)
    tabs = [await open_tab(browser_context, server) for _ in range(3)]
    await tabs[0].evaluate("window.auth.login('ann@example.com', 'correct horse battery')")
    for tab in tabs:
        assert (await tab.evaluate("window.auth.me()"))["email"] == "ann@example.com"
    await wait_for_event(tabs[2], {"type": "signed-in", "remote": True})

    await tabs[1].evaluate("window.auth.logout()")
    for tab in (tabs[0], tabs[2]):
        await wait_for_event(tab, {"type": "signed-out", "remote": True})
        assert await tab.evaluate("window.auth.me()") is None
    assert await events(tabs[1]) == [
        {"type": "signed-in", "remote": True},
        {"type": "signed-out", "remote": False},
    ]
    assert watch.requests_to("POST", "/auth/refresh") == []
    watch.assert_clean()


async def wait_for_event(page: Page, event: dict[str, Any], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if event in await events(page):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {event} within {timeout} s: {await events(page)}")


async def test_one_refresh_and_one_retry_never_a_loop(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server, watch = await setup(serve_authgate, browser_context)
    await register(server)
    page = await load(await first_page(browser_context), server)
    await page.evaluate("window.auth.login('ann@example.com', 'correct horse battery')")

    # A 401 that a refresh cannot cure (the header wins over the cookie): one refresh, which
    # succeeds, one retry, and the second 401 is the answer.
    gets_before = len(watch.requests_to("GET", "/auth/me"))
    status = await page.evaluate(
        "window.auth.fetch('/auth/me', { headers: { Authorization: 'Bearer nope' } })"
        ".then((r) => r.status)"
    )
    assert status == 401
    assert len(watch.requests_to("POST", "/auth/refresh")) == 1
    assert len(watch.requests_to("GET", "/auth/me")) == gets_before + 2
    assert (await page.evaluate("window.auth.me()"))["email"] == "ann@example.com"

    # The session revoked on the server (another device's "sign out everywhere else"): the
    # access token is refused, the one refresh is refused, the tab is signed out.
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        login = await http.post(
            "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
        )
        token = login.json()["access_token"]
        response = await http.delete("/auth/sessions", headers={"Authorization": f"Bearer {token}"})
    assert response.json() == {"revoked": 1}
    gets_before = len(watch.requests_to("GET", "/auth/me"))
    assert await page.evaluate("window.auth.me()") is None
    assert len(watch.requests_to("POST", "/auth/refresh")) == 2
    assert len(watch.requests_to("GET", "/auth/me")) == gets_before + 1  # no retry
    assert (await events(page))[-1] == {"type": "signed-out", "remote": False}
    assert await csrf_cookie(browser_context) is None  # cleared: the next 401 is final
    assert await page.evaluate("window.auth.me()") is None
    assert len(watch.requests_to("POST", "/auth/refresh")) == 2
    assert await served(server, "POST", "/auth/refresh", 2) == 2
    watch.assert_clean()
