"""Passkeys in a real browser (contract §9, issue 14): Chromium through Playwright with a
platform authenticator from the DevTools protocol (`WebAuthn.addVirtualAuthenticator`: CTAP2,
resident keys, user verification), against a real `authgate serve` on http://localhost:<port>
(a secure context, and "localhost" is the RP id; 127.0.0.1 could be neither).

Registered on /account, a passkey signs in from /login with no email at `aal2`, and is the
second step of a password sign-in; it is renamed and removed from /account. Refused: an
assertion replayed with the browser's own cookies, a ceremony completed over a challenge the
browser no longer holds (asked again meanwhile), and one whose 5 minutes are over (the
challenge aged in the database while the request is held, instead of sleeping).
`AUTHGATE_WRITE_SCREENSHOTS=1` writes docs/account-2fa.png (else into the test's tmp folder).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.browser.conftest import (
    BrowserFactory,
    LiveServer,
    ServeFactory,
    VirtualAuthenticator,
    Watch,
    access_claims,
    add_virtual_authenticator,
    first_page,
    page_ready,
    screenshot,
    watch_context,
)
from tests.helpers import ANN, PASSWORD, totp_code

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, FloatRect, Page, Route

with contextlib.suppress(ImportError):
    from playwright.async_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITE_SCREENSHOTS = os.environ.get("AUTHGATE_WRITE_SCREENSHOTS") == "1"
LOGIN_PATH = "/auth/passkeys/login"
CEREMONY_TIMEOUT_MS = 15_000
#: In the page: a sign-in ceremony over the FIRST of two options answers (the browser's
#: cookie is bound to the second by then); the server's answer as {status, code}.
SUPERSEDED = """async (url) => {
  const { createClient } = await import(url);
  const auth = createClient();
  const first = await auth.request("POST", "/passkeys/login/options");
  await auth.request("POST", "/passkeys/login/options");
  const credential = await navigator.credentials.get({
    publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(first),
  });
  try {
    await auth.request("POST", "/passkeys/login", { credential: credential.toJSON() });
    return { status: 200, code: null };
  } catch (error) {
    return { status: error.status, code: error.code };
  }
}"""


# --- helpers -------------------------------------------------------------------------------


async def passkey_browser(
    context: BrowserContext, server: LiveServer
) -> tuple[Page, Watch, VirtualAuthenticator]:
    """The context's tab, watched, with a platform authenticator."""
    watch = await watch_context(context, server.url)
    page = await first_page(context)
    return page, watch, await add_virtual_authenticator(context, page)


async def open_page(page: Page, url: str) -> None:
    await page.goto(url)
    await page_ready(page)


async def sign_up(page: Page, server: LiveServer) -> None:
    await open_page(page, f"{server.url}/register")
    await page.get_by_label("Email address").fill(ANN)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Create account").click()
    await page.wait_for_url(f"{server.url}/account")
    await page_ready(page)


async def password_step(page: Page, server: LiveServer) -> None:
    await open_page(page, f"{server.url}/login")
    await page.get_by_label("Email address").fill(ANN)
    await page.get_by_label("Password", exact=True).fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()


async def sign_out(page: Page, server: LiveServer) -> None:
    await page.get_by_role("button", name="Sign out", exact=True).first.click()
    await page.wait_for_url(f"{server.url}/login")
    await page_ready(page)


async def add_passkey(page: Page, name: str) -> None:
    """On /account: add a passkey named `name` (the authenticator answers by itself)."""
    form = page.locator("#passkey-add-form")
    await form.get_by_label("Name of the new passkey").fill(name)
    await form.get_by_role("button", name="Add a passkey").click()
    # A ceremony and three requests: more than expect's 5 s on a loaded 2-core machine.
    await expect(page.locator("#mfa-status")).to_have_text(
        f"The passkey {name} is added.", timeout=CEREMONY_TIMEOUT_MS
    )
    await expect(page.locator("#passkey-list > li").filter(has_text=name)).to_have_count(1)


def passkey_amr(amr: list[str]) -> set[str]:
    """The authenticator part of `amr`: "user" (verified) and one of "hwk" / "swk"."""
    kinds = set(amr) & {"hwk", "swk"}
    assert len(kinds) == 1, amr
    assert "user" in amr, amr
    return kinds | {"user"}


# --- sign-in with no email -----------------------------------------------------------------


async def test_register_on_account_then_sign_in_with_no_email_at_aal2_and_no_replay(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server = await serve_authgate(localhost=True)
    page, watch, authenticator = await passkey_browser(browser_context, server)
    await sign_up(page, server)
    await expect(page.locator("#passkeys-empty")).to_be_visible()
    await add_passkey(page, "Test laptop")
    await expect(page.locator("#passkeys-empty")).to_be_hidden()
    await expect(page.locator("#passkey-list > li")).to_contain_text("not used yet")
    (stored,) = await authenticator.credentials()
    assert stored["isResidentCredential"] is True  # discoverable: no email needed
    assert stored["rpId"] == "localhost"

    await sign_out(page, server)
    sent: list[tuple[dict[str, str], bytes | None]] = []

    async def keep(route: Route) -> None:
        sent.append((await route.request.all_headers(), route.request.post_data_buffer))
        await route.continue_()

    await page.route(f"**{LOGIN_PATH}", keep)
    await page.get_by_role("button", name="Use a passkey").click()
    await page.wait_for_url(f"{server.url}/account")
    await expect(page.locator("#profile-email")).to_have_text(ANN)
    claims = await access_claims(browser_context, server)
    assert claims["aal"] == "aal2"
    assert "pwd" not in claims["amr"]
    passkey_amr(claims["amr"])
    assert claims.get("mfa") is None
    await expect(page.locator("#passkey-list > li")).to_contain_text("last used")

    # The same assertion again, with the cookies and CSRF header the browser sent: refused
    # (its challenge was spent), and no session comes of it.
    ((headers, body),) = sent
    assert body
    assert "svc_webauthn=" in headers["cookie"]
    replay = {k: v for k, v in headers.items() if k in ("cookie", "content-type", "x-csrf-token")}
    async with httpx.AsyncClient(base_url=server.loopback_url, timeout=10.0) as http:
        answer = await http.post(LOGIN_PATH, content=body, headers=replay)
    assert answer.status_code in (400, 401), answer.text
    assert set(answer.json()) == {"detail", "code"}
    assert "svc_access_token" not in answer.headers.get("set-cookie", "")
    assert server.access_count("POST", LOGIN_PATH) == 2
    watch.assert_clean()


# --- the second step of a password sign-in; rename, remove -----------------------------------


async def test_a_passkey_is_the_second_step_then_it_is_renamed_and_removed(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server = await serve_authgate(localhost=True)
    page, watch, _authenticator = await passkey_browser(browser_context, server)
    await sign_up(page, server)
    await add_passkey(page, "Test laptop")

    await sign_out(page, server)
    await password_step(page, server)
    await expect(page.locator("#second-step")).to_be_visible()
    assert (await access_claims(browser_context, server)).get("mfa") == "pending"
    await page.locator("#passkey-second").click()
    await page.wait_for_url(f"{server.url}/account")
    await page_ready(page)
    claims = await access_claims(browser_context, server)
    assert claims["aal"] == "aal2"
    assert set(claims["amr"]) == {"pwd"} | passkey_amr(claims["amr"])
    await expect(page.locator("#session-list > li")).to_have_count(1)  # the same session

    item = page.locator("#passkey-list > li")
    await item.get_by_role("button", name="Rename Test laptop").click()
    await item.get_by_label("New name for Test laptop").fill("Work laptop")
    await item.get_by_role("button", name="Save").click()
    await expect(page.locator("#mfa-status")).to_have_text("The passkey is now called Work laptop.")
    await expect(item.locator(".device")).to_have_text("Work laptop")

    await item.get_by_role("button", name="Remove Work laptop").click()
    await item.get_by_label("Password, to remove Work laptop").fill("not my password")
    await item.get_by_role("button", name="Remove").click()
    await expect(item.get_by_role("alert")).to_have_text("The password is wrong.")
    await item.get_by_label("Password, to remove Work laptop").fill(PASSWORD)
    await item.get_by_role("button", name="Remove").click()
    await expect(page.locator("#mfa-status")).to_contain_text("Work laptop is removed.")
    await expect(item).to_have_count(0)
    await expect(page.locator("#passkeys-empty")).to_be_visible()

    # No factor left: the password alone signs in again.
    await sign_out(page, server)
    await password_step(page, server)
    await page.wait_for_url(f"{server.url}/account")
    watch.assert_clean()


# --- stale challenges ------------------------------------------------------------------------


async def test_a_superseded_or_expired_challenge_is_refused(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server = await serve_authgate(localhost=True)
    page, watch, _authenticator = await passkey_browser(browser_context, server)
    await sign_up(page, server)
    await add_passkey(page, "Test laptop")
    await sign_out(page, server)

    # Options asked twice: the browser's cookie now names the second challenge, so an
    # assertion over the first one is refused.
    answer = await page.evaluate(SUPERSEDED, f"{server.url}/auth/client.js")
    assert answer["status"] in (400, 401), answer
    await expect(page.locator("#profile-email")).to_have_count(0)

    # The challenge's 5 minutes are over when the assertion arrives: refused, said on the page.
    async def age_then_send(route: Route) -> None:
        database = server.data_dir / "authgate.sqlite3"
        with contextlib.closing(sqlite3.connect(database)) as db, db:
            aged = db.execute(
                "UPDATE authgate_webauthn_challenges SET expires_at = created_at"
            ).rowcount
        await route.continue_()
        assert aged >= 1  # the challenge of this ceremony (and the superseded one above)

    await page.route(f"**{LOGIN_PATH}", age_then_send)
    await page.get_by_role("button", name="Use a passkey").click()
    await expect(page.locator("#login-error")).to_have_text(
        "This passkey could not sign you in. Try again, or choose another way."
    )
    await page.unroute(f"**{LOGIN_PATH}", age_then_send)

    # A fresh ceremony with the same passkey works: only the challenges were refused.
    await page.get_by_role("button", name="Use a passkey").click()
    await page.wait_for_url(f"{server.url}/account")
    assert (await access_claims(browser_context, server))["aal"] == "aal2"
    watch.assert_clean()


# --- the README's screenshot -------------------------------------------------------------------


async def test_screenshot_of_the_account_page_with_an_app_and_a_passkey(
    serve_authgate: ServeFactory, launch_browser: BrowserFactory, tmp_path: Path
) -> None:
    server = await serve_authgate({"AUTHGATE_PRODUCT_NAME": "Acme"}, localhost=True)
    context = await launch_browser(viewport={"width": 1024, "height": 720})
    page, watch, _authenticator = await passkey_browser(context, server)
    await sign_up(page, server)
    await page.get_by_role("button", name="Set up an authenticator app").click()
    await expect(page.locator("#totp-secret")).not_to_be_empty()
    secret = (await page.locator("#totp-secret").inner_text()).replace(" ", "")
    await page.get_by_label("Code from the app").fill(totp_code(secret, datetime.now(UTC)))
    await page.get_by_role("button", name="Turn on").click()
    await expect(page.locator("#recovery-list > li")).to_have_count(10)
    await page.get_by_role("button", name="I have stored them").click()
    await add_passkey(page, "MacBook (Touch ID)")
    await page.reload()
    await page_ready(page)
    await expect(page.locator("#passkey-list > li")).to_have_count(1)
    await page.mouse.move(0, 0)
    folder = DOCS if WRITE_SCREENSHOTS else tmp_path / "docs"
    path = folder / "account-2fa.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.evaluate("window.scrollTo(0, 0)")  # the box is in viewport coordinates
    box = await page.locator("#second-factors").bounding_box()
    assert box is not None
    margin = 24  # the card's own padding around the section
    clip: FloatRect = {
        "x": box["x"] - margin,
        "y": box["y"] - margin,
        "width": box["width"] + 2 * margin,
        "height": box["height"] + 2 * margin,
    }
    await page.screenshot(path=str(path), clip=clip, full_page=True)
    assert path.stat().st_size > 10_000
    watch.assert_clean()
    await screenshot(page, tmp_path / "account-full.png")
