"""Second factors on the pages (contract §9), in a real Chromium against a real `authgate
serve`: an authenticator app enrolled on /account (the key read from the page, the codes
computed by the test with pyotp as a phone would), the recovery codes shown once; then every
sign-in asks for the second step on /login: a code, a recovery code, each once; wrong codes
and the lock-out said in the alert; the step survives a reload; 360 px; no request leaving the
origin and no CSP violation. `AUTHGATE_WRITE_SCREENSHOTS=1` writes docs/login-second-step.png
(else into the test's tmp folder)."""

from __future__ import annotations

import contextlib
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import (
    BrowserFactory,
    LiveServer,
    ServeFactory,
    Watch,
    access_claims,
    first_page,
    page_ready,
    screenshot,
    watch_context,
)
from tests.helpers import ANN, PASSWORD, totp_code

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page

with contextlib.suppress(ImportError):
    from playwright.async_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITE_SCREENSHOTS = os.environ.get("AUTHGATE_WRITE_SCREENSHOTS") == "1"
#: One time step of RFC 6238: the next step's code is within the one step of drift allowed.
STEP = timedelta(seconds=30)


# --- helpers -------------------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


async def watched(context: BrowserContext, server: LiveServer) -> tuple[Page, Watch]:
    watch = await watch_context(context, server.url)
    return await first_page(context), watch


async def open_page(page: Page, url: str) -> None:
    await page.goto(url)
    await page_ready(page)


async def password_step(page: Page, server: LiveServer, email: str = ANN) -> None:
    await open_page(page, f"{server.url}/login")
    await page.get_by_label("Email address").fill(email)
    await page.get_by_label("Password", exact=True).fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()


async def sign_up(page: Page, server: LiveServer) -> None:
    await open_page(page, f"{server.url}/register")
    await page.get_by_label("Email address").fill(ANN)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Create account").click()
    await page.wait_for_url(f"{server.url}/account")
    await page_ready(page)


async def enrol_app(page: Page) -> tuple[str, list[str]]:
    """On /account: set up the authenticator app from what the page shows; (the key, the
    recovery codes the page shows once)."""
    section = page.locator("#second-factors")
    await expect(section.locator("#totp-state")).to_have_text("Not set up.")
    await section.get_by_role("button", name="Set up an authenticator app").click()
    qr = section.get_by_role("img", name="QR code for your authenticator app")
    await expect(qr).to_be_visible()
    assert await qr.evaluate("(img) => img.complete && img.naturalWidth > 0"), "the QR code shows"
    assert (await qr.get_attribute("src") or "").startswith("data:image/svg+xml")
    secret = (await section.locator("#totp-secret").inner_text()).replace(" ", "")
    assert re.fullmatch(r"[A-Z2-7]{16,}", secret), secret
    link = await section.get_by_role("link", name="Open in an authenticator app").get_attribute(
        "href"
    )
    assert link is not None
    assert link.startswith("otpauth://totp/")
    assert f"secret={secret}" in link

    form = section.locator("#totp-confirm-form")
    await form.get_by_label("Code from the app").fill(wrong_code(secret))
    await form.get_by_role("button", name="Turn on").click()
    await expect(form.get_by_role("alert")).to_have_text(
        "That code is not right. Enter the code the app shows now."
    )
    await form.get_by_label("Code from the app").fill(totp_code(secret, now()))
    await form.get_by_role("button", name="Turn on").click()
    codes = section.locator("#recovery-list > li")
    await expect(codes).to_have_count(10)
    await expect(section.get_by_role("heading", name="Your recovery codes")).to_be_focused()
    await expect(section.locator("#totp-state")).to_have_text("On. 10 of 10 recovery codes left.")
    await expect(section.locator("#totp-enrol")).to_be_hidden()
    return secret, await codes.all_inner_texts()


def wrong_code(secret: str) -> str:
    """A six-digit code that is none of the codes the drift window accepts now."""
    near = {totp_code(secret, now() + k * STEP) for k in range(-2, 3)}
    return next(c for c in ("000000", "111111", "222222", "333333", "444444") if c not in near)


async def sign_out(page: Page, server: LiveServer) -> None:
    await page.get_by_role("button", name="Sign out", exact=True).first.click()
    await page.wait_for_url(f"{server.url}/login")


# --- the whole round -------------------------------------------------------------------------


async def test_enrol_the_app_then_every_sign_in_asks_for_a_code_or_a_recovery_code(
    serve_authgate: ServeFactory, browser_context: BrowserContext, launch_browser: BrowserFactory
) -> None:
    server = await serve_authgate()
    page, watch = await watched(browser_context, server)
    await sign_up(page, server)
    assert (await access_claims(browser_context, server))["aal"] == "aal1"

    # Another device is signed in; adding the first factor signs it out.
    other = await first_page(await launch_browser())
    await password_step(other, server)
    await other.wait_for_url(f"{server.url}/account")
    await page.reload()
    await page_ready(page)
    await expect(page.locator("#session-list > li")).to_have_count(2)

    secret, codes = await enrol_app(page)
    assert len(set(codes)) == 10
    await expect(page.locator("#session-list > li")).to_have_count(1)
    await expect(page.locator("#mfa-status")).to_contain_text("The authenticator app is on.")
    await page.get_by_role("button", name="I have stored them").click()
    await expect(page.locator("#recovery-list > li")).to_have_count(0)
    await other.reload()
    await other.wait_for_url(f"{server.url}/login?next=%2Faccount")

    # Sign out, sign in: the password is not enough.
    await sign_out(page, server)
    refreshes = server.access_count("POST", "/auth/refresh")  # the other device's, so far
    await password_step(page, server)
    step = page.locator("#second-step")
    await expect(step).to_be_visible()
    await expect(page.get_by_label("Code from your authenticator app")).to_be_focused()
    assert await page.get_by_label("Code from your authenticator app").get_attribute(
        "autocomplete"
    ) == ("one-time-code")
    claims = await access_claims(browser_context, server)
    assert (claims["aal"], claims["amr"], claims.get("mfa")) == ("aal1", ["pwd"], "pending")

    # /account sends a waiting session back here, and the page opens on the second step.
    await page.goto(f"{server.url}/account")
    await page.wait_for_url(f"{server.url}/login?next=%2Faccount")
    await page_ready(page)
    await expect(step).to_be_visible()
    await expect(page.locator("#first-step")).to_be_hidden()
    # The client never answers mfa_required with a refresh (refreshing keeps the level).
    assert server.access_count("POST", "/auth/refresh") == refreshes

    code_field = page.get_by_label("Code from your authenticator app")
    await code_field.fill(wrong_code(secret))
    await page.get_by_role("button", name="Verify").click()
    await expect(page.locator("#login-error")).to_have_text(
        "That code is not right, or it was already used. Enter the newest code."
    )
    await expect(code_field).to_be_focused()
    # The next step's code (the confirming code's step is spent), with the spaces apps show.
    code = totp_code(secret, now() + STEP)
    await code_field.fill(f"{code[:3]} {code[3:]}")
    await page.get_by_role("button", name="Verify").click()
    await page.wait_for_url(f"{server.url}/account")
    await expect(page.locator("#profile-email")).to_have_text(ANN)
    claims = await access_claims(browser_context, server)
    assert (claims["aal"], set(claims["amr"]), claims.get("mfa")) == ("aal2", {"pwd", "otp"}, None)

    # Once more, with a recovery code; the same recovery code a second time is refused.
    for attempt in range(2):
        await sign_out(page, server)
        await password_step(page, server)
        await page.get_by_role("button", name="Use a recovery code instead").click()
        await expect(page.get_by_label("Code from your authenticator app")).to_be_hidden()
        await page.get_by_label("Recovery code").fill(f"  {codes[0]} ")
        await page.get_by_role("button", name="Verify").click()
        if attempt == 0:
            await page.wait_for_url(f"{server.url}/account")
            await expect(page.locator("#totp-state")).to_have_text(
                "On. 9 of 10 recovery codes left."
            )
    await expect(page.locator("#login-error")).to_contain_text("That code is not right")
    await page.get_by_label("Recovery code").fill(codes[1])
    await page.get_by_role("button", name="Verify").click()
    await page.wait_for_url(f"{server.url}/account")
    watch.assert_clean()


async def test_new_recovery_codes_and_removal_need_the_password(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server = await serve_authgate()
    page, watch = await watched(browser_context, server)
    await sign_up(page, server)
    _secret, old_codes = await enrol_app(page)
    manage = page.locator("#totp-manage")

    await manage.get_by_text("Get new recovery codes").click()
    form = page.locator("#recovery-form")
    await form.get_by_label("Password").fill("not my password")
    await form.get_by_role("button", name="Get new codes").click()
    await expect(form.get_by_role("alert")).to_have_text("The password is wrong.")
    await form.get_by_label("Password").fill(PASSWORD)
    await form.get_by_role("button", name="Get new codes").click()
    await expect(page.locator("#mfa-status")).to_contain_text("the old ones no longer work")
    new_codes = await page.locator("#recovery-list > li").all_inner_texts()
    assert len(new_codes) == 10
    assert not set(new_codes) & set(old_codes)

    # An old code no longer signs in; a new one does.
    await sign_out(page, server)
    await password_step(page, server)
    await page.get_by_role("button", name="Use a recovery code instead").click()
    await page.get_by_label("Recovery code").fill(old_codes[0])
    await page.get_by_role("button", name="Verify").click()
    await expect(page.locator("#login-error")).to_contain_text("That code is not right")
    await page.get_by_label("Recovery code").fill(new_codes[0])
    await page.get_by_role("button", name="Verify").click()
    await page.wait_for_url(f"{server.url}/account")
    await page_ready(page)

    await manage.get_by_text("Remove the authenticator app").click()
    form = page.locator("#totp-remove-form")
    await form.get_by_label("Password").fill("not my password")
    await form.get_by_role("button", name="Remove the app").click()
    await expect(form.get_by_role("alert")).to_have_text("The password is wrong.")
    await form.get_by_label("Password").fill(PASSWORD)
    await form.get_by_role("button", name="Remove the app").click()
    await expect(page.locator("#mfa-status")).to_contain_text("The authenticator app is removed.")
    await expect(page.locator("#totp-state")).to_have_text("Not set up.")
    await expect(manage).to_be_hidden()

    # No factor: the password alone signs in again.
    await sign_out(page, server)
    await password_step(page, server)
    await page.wait_for_url(f"{server.url}/account")
    watch.assert_clean()


async def test_wrong_codes_lock_the_second_step_with_the_wait_said(
    serve_authgate: ServeFactory, browser_context: BrowserContext
) -> None:
    server = await serve_authgate({"AUTHGATE_RATE_LIMITS": "on"})
    page, watch = await watched(browser_context, server)
    await sign_up(page, server)
    secret, _codes = await enrol_app(page)  # one wrong code there already
    await sign_out(page, server)
    await password_step(page, server)
    code_field = page.get_by_label("Code from your authenticator app")
    alert = page.locator("#login-error")
    for _ in range(10):  # bounded: the lock comes after 5 wrong codes in 15 minutes
        await code_field.fill(wrong_code(secret))
        await page.get_by_role("button", name="Verify").click()
        await expect(alert).not_to_be_empty()
        if "Too many attempts" in await alert.inner_text():
            break
        await expect(alert).to_contain_text("That code is not right")
    await expect(alert).to_have_text(re.compile(r"Too many attempts\. Please try again in \d+ "))
    # Locked: even the right code is refused now, and the page says so again.
    await code_field.fill(totp_code(secret, now() + STEP))
    await page.get_by_role("button", name="Verify").click()
    await expect(alert).to_have_text(re.compile(r"Too many attempts"))
    assert (await access_claims(browser_context, server)).get("mfa") == "pending"
    assert server.access_count("POST", "/auth/mfa/verify") <= 10
    watch.assert_clean()


# --- 360 px, and the README's screenshot ------------------------------------------------------


async def test_the_second_step_and_the_enrolment_fit_360px(
    serve_authgate: ServeFactory, launch_browser: BrowserFactory, tmp_path: Path
) -> None:
    server = await serve_authgate({"AUTHGATE_PRODUCT_NAME": "Acme"})
    context = await launch_browser(viewport={"width": 360, "height": 740})
    page, watch = await watched(context, server)
    await sign_up(page, server)
    await page.get_by_role("button", name="Set up an authenticator app").click()
    await expect(page.locator("#totp-qr")).to_be_visible()
    await fits_360(page)
    secret = (await page.locator("#totp-secret").inner_text()).replace(" ", "")
    await page.get_by_label("Code from the app").fill(totp_code(secret, now()))
    await page.get_by_role("button", name="Turn on").click()
    await expect(page.locator("#recovery-list > li")).to_have_count(10)
    await fits_360(page)
    await screenshot(page, tmp_path / "account-2fa-360.png")
    await sign_out(page, server)
    await password_step(page, server)
    await expect(page.locator("#second-step")).to_be_visible()
    await fits_360(page)

    folder = DOCS if WRITE_SCREENSHOTS else tmp_path / "docs"
    laptop = await launch_browser(viewport={"width": 1024, "height": 720})
    shot, shot_watch = await watched(laptop, server)
    await password_step(shot, server)
    await expect(shot.locator("#second-step")).to_be_visible()
    await shot.mouse.move(0, 0)
    await shot.evaluate("document.activeElement.blur()")
    await screenshot(shot, folder / "login-second-step.png", full_page=False)
    assert (folder / "login-second-step.png").stat().st_size > 10_000
    watch.assert_clean()
    shot_watch.assert_clean()


async def fits_360(page: Page) -> None:
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 360, f"{page.url} scrolls sideways: {width} px"
