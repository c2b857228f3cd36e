"""The pages (contract §6) in a real Chromium against a real `authgate serve`, mail in the real
SMTP sink: scanners that fetch and render each mailed link spend nothing, then the person
completes it (JavaScript off); sign-up, sign-in with `?next=`, the account page's sessions and
sign-outs, password and email change, deletion; forgot password end to end; every page at
360 px without horizontal scrolling; no request leaving the origin and no CSP violation
anywhere. The README's screenshots come from here: `AUTHGATE_WRITE_SCREENSHOTS=1` writes
docs/login.png and docs/account.png (otherwise they go to the test's tmp folder)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.browser.conftest import (
    BrowserFactory,
    LiveServer,
    ServeFactory,
    Watch,
    first_page,
    screenshot,
    watch_context,
)
from tests.helpers import ANN, NEW_PASSWORD, PASSWORD, SmtpSink

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page

# Without playwright the conftest skips (or, in CI, fails) every test here before it runs.
with contextlib.suppress(ImportError):
    from playwright.async_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITE_SCREENSHOTS = os.environ.get("AUTHGATE_WRITE_SCREENSHOTS") == "1"
NEW_EMAIL = "ann@new.example"
THIRD_PASSWORD = "yet another fine passphrase"
LINK = re.compile(r"http://127\.0\.0\.1:\d+(/[a-z-]+)\?token=([A-Za-z0-9_-]+)")
MAIL_TIMEOUT = 15.0
# A second device, for the sessions list.
FIREFOX_ON_MAC = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.5; rv:128.0) Gecko/20100101 Firefox/128.0"
)


# --- helpers -------------------------------------------------------------------------------


async def mailed_link(sink: SmtpSink, to: str, path: str) -> str:
    """The newest link to `path` mailed to `to` (polled, bounded)."""
    for _ in range(int(MAIL_TIMEOUT / 0.05)):
        for message in reversed(sink.messages):
            if message["To"] != to:
                continue
            body = message.get_body(preferencelist=("plain",))
            assert body is not None
            found = LINK.search(body.get_content())
            if found and found.group(1) == path:
                return found.group(0)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no mail to {to} with a link to {path}")


async def api(server: LiveServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=10.0) as http:
        return await http.request(method, "/auth" + path, **kwargs)


async def access_token(server: LiveServer, email: str, password: str) -> str:
    response = await api(server, "POST", "/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    token: str = response.json()["access_token"]
    return token


async def can_sign_in(server: LiveServer, email: str, password: str) -> bool:
    response = await api(server, "POST", "/login", json={"email": email, "password": password})
    return response.status_code == 200


async def ready(page: Page) -> None:
    """Wait until the page script has attached its handlers."""
    await page.locator("html[data-ready=true]").wait_for(state="attached")


async def open_page(page: Page, url: str) -> None:
    await page.goto(url)
    await ready(page)


async def sign_in(
    page: Page, server: LiveServer, email: str, password: str, query: str = ""
) -> None:
    await open_page(page, f"{server.url}/login{query}")
    await page.get_by_label("Email address").fill(email)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Sign in").click()


async def fits_360(page: Page) -> None:
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 360, f"{page.url} scrolls sideways: {width} px"


async def watched(context: BrowserContext, server: LiveServer) -> tuple[Page, Watch]:
    watch = await watch_context(context, server.url)
    return await first_page(context), watch


# --- mailed links: scanners first, then the person, JavaScript off ---------------------------


async def test_scanners_spend_nothing_then_the_person_completes_each_link(
    serve_authgate: ServeFactory, launch_browser: BrowserFactory, smtp_sink: SmtpSink
) -> None:
    server = await serve_authgate({"AUTHGATE_SMTP_URL": smtp_sink.url})
    await api(server, "POST", "/register", json={"email": ANN, "password": PASSWORD})
    bearer = {"Authorization": f"Bearer {await access_token(server, ANN, PASSWORD)}"}
    await api(server, "POST", "/email-verification", headers=bearer)
    await api(server, "POST", "/password-reset", json={"email": ANN})
    change = {"new_email": NEW_EMAIL, "password": PASSWORD}
    assert (await api(server, "POST", "/email-change", json=change, headers=bearer)).is_success
    links = {
        "/verify-email": await mailed_link(smtp_sink, ANN, "/verify-email"),
        "/reset-password": await mailed_link(smtp_sink, ANN, "/reset-password"),
        "/confirm-email-change": await mailed_link(smtp_sink, NEW_EMAIL, "/confirm-email-change"),
    }

    # The scanners: a HEAD and a GET without cookies, then a browser that renders the page,
    # runs its scripts and waits, but clicks nothing.
    scanner, scanner_watch = await watched(await launch_browser(), server)
    async with httpx.AsyncClient(timeout=10.0) as http:
        for link in links.values():
            assert (await http.head(link)).status_code == 200
            assert (await http.get(link)).status_code == 200
    for link in links.values():
        await scanner.goto(link)
        await scanner.wait_for_load_state("networkidle")
        await expect(scanner.locator("form button[type=submit]")).to_be_visible()
    for path in links:
        assert server.access_count("POST", path) == 0
    scanner_watch.assert_clean()

    # The person, with JavaScript off: each link still works, in the order a person might.
    person, watch = await watched(await launch_browser(java_script_enabled=False), server)
    await person.goto(f"{server.url}/login")  # the scripted pages say what they need
    await expect(person.locator(".notice")).to_contain_text("needs JavaScript")
    await person.goto(links["/verify-email"])
    await person.get_by_role("button", name="Confirm my email address").click()
    await expect(person.get_by_role("heading", level=1)).to_have_text(
        "Your email address is verified"
    )

    await person.goto(links["/reset-password"])
    await person.get_by_label("New password", exact=True).fill("short")
    await person.get_by_label("New password, again").fill("short")
    await person.get_by_role("button", name="Set the new password").click()
    await expect(person.get_by_role("alert")).to_contain_text("at least 8 characters")
    await person.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    await person.get_by_label("New password, again").fill(NEW_PASSWORD)
    await person.get_by_role("button", name="Set the new password").click()
    await expect(person.get_by_role("heading", level=1)).to_have_text(
        "Your password has been reset"
    )

    await person.goto(links["/confirm-email-change"])
    await person.get_by_role("button", name="Confirm the new address").click()
    await expect(person.get_by_role("heading", level=1)).to_have_text(
        "Your email address has been changed"
    )
    await person.goto(links["/confirm-email-change"])  # once more: it says it was used
    await expect(person.get_by_role("heading", level=1)).to_have_text("This link was already used")
    watch.assert_clean()

    assert await can_sign_in(server, NEW_EMAIL, NEW_PASSWORD)
    assert not await can_sign_in(server, ANN, PASSWORD)
    me = await api(
        server,
        "GET",
        "/me",
        headers={"Authorization": f"Bearer {await access_token(server, NEW_EMAIL, NEW_PASSWORD)}"},
    )
    assert me.json()["email_verified"] is True


# --- sign-up, sign-in, the account page -----------------------------------------------------


async def test_sign_up_sessions_sign_outs_password_email_and_deletion(
    serve_authgate: ServeFactory,
    browser_context: BrowserContext,
    launch_browser: BrowserFactory,
    smtp_sink: SmtpSink,
) -> None:
    server = await serve_authgate({"AUTHGATE_SMTP_URL": smtp_sink.url})
    page, watch = await watched(browser_context, server)
    sessions = page.locator("#session-list > li")

    # Sign up: the account page follows, signed in.
    await open_page(page, f"{server.url}/register")
    await page.get_by_label("Email address").fill(ANN)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Create account").click()
    await page.wait_for_url(f"{server.url}/account")
    await ready(page)
    await expect(page.locator("#profile-email")).to_have_text(ANN)
    await expect(page.locator("#profile-verified")).to_have_text("Not confirmed yet")
    await expect(sessions).to_have_count(1)
    await expect(sessions.first).to_contain_text("This device")

    # A second device signs in; this one signs it out.
    other, other_watch = await watched(await launch_browser(user_agent=FIREFOX_ON_MAC), server)
    await sign_in(other, server, ANN, PASSWORD, "?next=/account")
    await other.wait_for_url(f"{server.url}/account")
    await page.reload()
    await expect(sessions).to_have_count(2)
    await expect(sessions.first).to_contain_text("Firefox on macOS")
    await sessions.filter(has_text="Firefox on macOS").get_by_role("button").click()
    await expect(page.locator("#sessions-status")).to_have_text("Signed out of Firefox on macOS.")
    await expect(sessions).to_have_count(1)
    await other.reload()
    await other.wait_for_url(f"{server.url}/login?next=%2Faccount")

    # It signs in again (a hostile ?next= lands on the account page); "everywhere else" ends it.
    await sign_in(other, server, ANN, PASSWORD, "?next=//evil.example/steal")
    await other.wait_for_url(f"{server.url}/account")
    await page.reload()
    await expect(sessions).to_have_count(2)
    await page.get_by_role("button", name="Sign out everywhere else").click()
    await expect(page.locator("#sessions-status")).to_have_text("Signed out of 1 other session.")
    await expect(sessions).to_have_count(1)
    await expect(page.get_by_role("button", name="Sign out everywhere else")).to_be_hidden()
    await other.reload()
    await other.wait_for_url(f"{server.url}/login?next=%2Faccount")
    other_watch.assert_clean()

    # Password change: a wrong current password is said so; the right one works.
    form = page.locator("#password-form")
    await form.get_by_label("Current password").fill("not my password")
    await form.get_by_label("New password").fill(NEW_PASSWORD)
    await form.get_by_role("button").click()
    await expect(form.get_by_role("alert")).to_have_text("The current password is wrong.")
    await form.get_by_label("Current password").fill(PASSWORD)
    await form.get_by_label("New password").fill(NEW_PASSWORD)
    await form.get_by_role("button").click()
    await expect(form.get_by_role("status")).to_contain_text("The password has been changed")
    assert await can_sign_in(server, ANN, NEW_PASSWORD)

    # Email change: the link goes to the new address; following it changes the profile.
    form = page.locator("#email-form")
    await form.get_by_label("New email address").fill(NEW_EMAIL)
    await form.get_by_label("Password").fill(NEW_PASSWORD)
    await form.get_by_role("button").click()
    await expect(form.get_by_role("status")).to_contain_text(f"We sent a link to {NEW_EMAIL}")
    await page.goto(await mailed_link(smtp_sink, NEW_EMAIL, "/confirm-email-change"))
    await page.get_by_role("button", name="Confirm the new address").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(
        "Your email address has been changed"
    )
    await page.get_by_role("link", name="Go to your account").click()
    await ready(page)
    await expect(page.locator("#profile-email")).to_have_text(NEW_EMAIL)
    await expect(page.locator("#profile-verified")).to_have_text("Confirmed")

    # Deletion needs the password and the box ticked.
    form = page.locator("#delete-form")
    await form.get_by_label("Password").fill("not my password")
    await form.get_by_label("I understand").check()
    await form.get_by_role("button").click()
    await expect(form.get_by_role("alert")).to_have_text("The password is wrong.")
    await form.get_by_label("Password").fill(NEW_PASSWORD)
    await form.get_by_role("button").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Your account has been deleted")
    assert not await can_sign_in(server, NEW_EMAIL, NEW_PASSWORD)
    await page.goto(f"{server.url}/account")
    await page.wait_for_url(f"{server.url}/login?next=%2Faccount")
    watch.assert_clean()


async def test_forgot_password_from_the_sign_in_page_to_signed_in(
    serve_authgate: ServeFactory, browser_context: BrowserContext, smtp_sink: SmtpSink
) -> None:
    server = await serve_authgate({"AUTHGATE_SMTP_URL": smtp_sink.url})
    await api(server, "POST", "/register", json={"email": ANN, "password": PASSWORD})
    page, watch = await watched(browser_context, server)

    await sign_in(page, server, ANN, "not my password", "?next=/account%3Ftab%3Dsessions")
    await expect(page.locator("#login-error")).to_have_text(
        "The email address or the password is wrong."
    )
    await page.get_by_role("link", name="Forgot your password?").click()
    await ready(page)
    await page.get_by_label("Email address").fill(ANN)
    await page.get_by_role("button", name="Send the link").click()
    await expect(page.get_by_role("status")).to_contain_text("a link to choose a new password")

    await page.goto(await mailed_link(smtp_sink, ANN, "/reset-password"))
    await page.get_by_label("New password", exact=True).fill(THIRD_PASSWORD)
    await page.get_by_label("New password, again").fill(THIRD_PASSWORD)
    await page.get_by_role("button", name="Set the new password").click()
    await page.get_by_role("link", name="Sign in").click()
    await ready(page)
    await page.get_by_label("Email address").fill(ANN)
    await page.get_by_label("Password", exact=True).fill(THIRD_PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{server.url}/account")
    await expect(page.locator("#profile-email")).to_have_text(ANN)

    # Signing out in one tab takes the other tab's account page along.
    second = await browser_context.new_page()
    await open_page(second, f"{server.url}/account")
    await expect(second.locator("#profile-email")).to_have_text(ANN)
    await page.get_by_role("button", name="Sign out").first.click()
    await page.wait_for_url(f"{server.url}/login")
    await second.wait_for_url(f"{server.url}/login?next=%2Faccount")

    # ?next= (a path here) is where the sign-in page goes.
    await sign_in(page, server, ANN, THIRD_PASSWORD, "?next=/account%3Ftab%3Dsessions")
    await page.wait_for_url(f"{server.url}/account?tab=sessions")
    watch.assert_clean()


async def test_the_account_page_refreshes_in_the_browser_never_on_the_server(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server = await serve_authgate({"AUTHGATE_ACCESS_TTL": "2"})
    await api(server, "POST", "/register", json={"email": ANN, "password": PASSWORD})
    page, watch = await watched(browser_context, server)
    await sign_in(page, server, ANN, PASSWORD)
    await page.wait_for_url(f"{server.url}/account")
    await expect(page.locator("#profile-email")).to_have_text(ANN)
    await page.wait_for_timeout(2500)  # the access token (and its cookie) expire
    refreshes = server.access_count("POST", "/auth/refresh")
    await page.reload()
    await expect(page.locator("#profile-email")).to_have_text(ANN)
    await expect(page.locator("#session-list > li")).to_have_count(1)
    assert server.access_count("POST", "/auth/refresh") == refreshes + 1
    assert server.access_count("GET", "/account") == 2  # no redirect: the page loaded
    watch.assert_clean()


# --- every page: 360 px, this origin only ------------------------------------------------------


async def test_every_page_fits_a_360px_screen_and_loads_only_from_its_origin(
    serve_authgate: ServeFactory,
    launch_browser: BrowserFactory,
    smtp_sink: SmtpSink,
    tmp_path: Path,
) -> None:
    server = await serve_authgate({"AUTHGATE_SMTP_URL": smtp_sink.url})
    long_email = "a.very.long.address.that.keeps.going@subdomain.example-company.example"
    await api(server, "POST", "/register", json={"email": long_email, "password": PASSWORD})
    bearer = {"Authorization": f"Bearer {await access_token(server, long_email, PASSWORD)}"}
    await api(server, "POST", "/email-verification", headers=bearer)
    await api(server, "POST", "/password-reset", json={"email": long_email})
    change = {"new_email": NEW_EMAIL, "password": PASSWORD}
    await api(server, "POST", "/email-change", json=change, headers=bearer)
    links = [
        await mailed_link(smtp_sink, long_email, "/verify-email"),
        await mailed_link(smtp_sink, long_email, "/reset-password"),
        await mailed_link(smtp_sink, NEW_EMAIL, "/confirm-email-change"),
    ]
    context = await launch_browser(viewport={"width": 360, "height": 740})
    page, watch = await watched(context, server)

    for path in ("/login", "/register", "/forgot-password"):
        await open_page(page, server.url + path)
        await fits_360(page)
    for link in links:
        await page.goto(link)
        await fits_360(page)
    await page.goto(f"{server.url}/reset-password?token=not-a-real-token-at-all")
    await expect(page.get_by_role("heading", level=1)).to_have_text("This link is not valid")
    await fits_360(page)
    await sign_in(page, server, long_email, PASSWORD)
    await page.wait_for_url(f"{server.url}/account")
    await expect(page.locator("#profile-email")).to_have_text(long_email)
    await expect(page.locator("#session-list > li")).to_have_count(2)
    await fits_360(page)
    await screenshot(page, tmp_path / "account-360.png")  # to look at when it fails
    watch.assert_clean()
    assert watch.requests, "the watch saw the pages"


# --- the README's screenshots ------------------------------------------------------------------


async def test_screenshots_of_the_sign_in_and_account_pages(
    serve_authgate: ServeFactory, launch_browser: BrowserFactory, tmp_path: Path
) -> None:
    server = await serve_authgate({"AUTHGATE_PRODUCT_NAME": "Acme"})
    await api(server, "POST", "/register", json={"email": ANN, "password": PASSWORD})
    folder = DOCS if WRITE_SCREENSHOTS else tmp_path / "docs"
    options: dict[str, Any] = {"viewport": {"width": 1024, "height": 720}}

    laptop = await launch_browser(user_agent=FIREFOX_ON_MAC, **options)
    await sign_in(await first_page(laptop), server, ANN, PASSWORD)

    page, watch = await watched(await launch_browser(**options), server)
    await open_page(page, f"{server.url}/login")
    await page.get_by_label("Email address").fill(ANN)
    await page.evaluate("document.activeElement.blur()")
    await screenshot(page, folder / "login.png", full_page=False)
    await page.get_by_label("Password", exact=True).fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{server.url}/account")
    await expect(page.locator("#session-list > li")).to_have_count(2)
    await page.mouse.move(0, 0)
    await screenshot(page, folder / "account.png")
    watch.assert_clean()
    for name in ("login.png", "account.png"):
        assert (folder / name).stat().st_size > 10_000
