"""The second-factor parts of the pages (contract §6, §9) through HTTP, on both backends, without
a browser: the second step of /login and the "Two-step verification" section of /account are
server-rendered with labelled fields, one-time-code hints and no inline script or style; the
CSP is the pages' own (the QR code is a data: image, so nothing was loosened); the page
scripts never parse markup into the page; the browser client exports and declares the
second-factor calls. What they do in a browser is tests/browser/test_mfa_pages.py's and
test_passkeys_browser.py's."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx

from tests.helpers import login, register

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
PAGE_SCRIPTS = ("login.js", "account.js", "second_factors.js", "page.js")
#: Ways of turning a string into markup in the page.
MARKUP_SINKS = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|DOMParser|document\.write")


class Tags(HTMLParser):
    """Every start tag with its attributes, by id; and any inline script or style."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, tuple[str, dict[str, str]]] = {}
        self.labels: set[str] = set()
        self.inputs: list[dict[str, str]] = []
        self.inline: list[str] = []
        self.forms = 0
        self._last = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self._last = tag
        if "id" in values:
            self.by_id[values["id"]] = (tag, values)
        if tag == "label":
            self.labels.add(values["for"])
        if tag == "input":
            self.inputs.append(values)
        if tag == "form":
            self.forms += 1
        assert "style" not in values, (tag, values)

    def handle_data(self, data: str) -> None:
        if self._last in ("script", "style") and data.strip():
            self.inline.append(data)


async def page(client: httpx.AsyncClient, path: str) -> Tags:
    response = await client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-security-policy"] == CSP
    tags = Tags()
    tags.feed(response.text)
    assert tags.inline == []
    assert not re.search(r"\son[a-z]+=", response.text), "no inline event handler"
    for field in tags.inputs:
        assert field["id"] in tags.labels, f"input {field} has no label"
    return tags


async def test_the_sign_in_page_carries_the_second_step(client: httpx.AsyncClient) -> None:
    tags = await page(client, "/login")
    assert tags.forms == 1  # one form, two steps: Enter submits whichever shows
    tag, step = tags.by_id["second-step"]
    assert tag == "fieldset"
    assert "hidden" in step
    assert "disabled" in step  # nothing of it is sent or checked with the password
    _, code = tags.by_id["totp_code"]
    assert code["autocomplete"] == "one-time-code"
    assert code["inputmode"] == "numeric"
    _, recovery = tags.by_id["recovery_code"]
    assert recovery["autocomplete"] == "off"
    assert "disabled" in recovery
    for button in ("switch-factor", "passkey-second", "passkey-sign-in", "second-step-cancel"):
        tag, attrs = tags.by_id[button]
        assert (tag, attrs["type"]) == ("button", "button"), button
    assert "hidden" in tags.by_id["passkey-first"][1]  # shown by the script where it works


async def test_the_account_page_carries_the_two_step_section(client: httpx.AsyncClient) -> None:
    await register(client)
    await login(client)  # the cookies: /account renders instead of redirecting
    tags = await page(client, "/account")
    for element in (
        "second-factors",
        "totp-start",
        "totp-qr",
        "totp-secret",
        "totp-link",
        "totp-confirm-form",
        "recovery-list",
        "recovery-form",
        "totp-remove-form",
        "passkey-list",
        "passkey-add-form",
        "mfa-error",
        "mfa-status",
    ):
        assert element in tags.by_id, element
    tag, qr = tags.by_id["totp-qr"]
    assert tag == "img"
    assert qr["alt"]
    assert "src" not in qr  # set from the enrolment's SVG, never before
    _, code = tags.by_id["totp_confirm_code"]
    assert (code["autocomplete"], code["inputmode"]) == ("one-time-code", "numeric")
    for form in ("recovery-form", "totp-remove-form"):
        assert tags.by_id[form][0] == "form"
    assert tags.by_id["recovery_password"][1]["type"] == "password"
    assert tags.by_id["totp_remove_password"][1]["type"] == "password"
    assert tags.by_id["mfa-error"][1]["role"] == "alert"


async def test_page_scripts_never_parse_markup_into_the_page(client: httpx.AsyncClient) -> None:
    for name in PAGE_SCRIPTS:
        response = await client.get(f"/_authgate/static/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == "text/javascript; charset=utf-8"
        assert MARKUP_SINKS.search(response.text) is None, (
            name,
            MARKUP_SINKS.search(response.text),
        )
    factors = (await client.get("/_authgate/static/second_factors.js")).text
    # The QR code is an image of a data: URL (allowed by img-src), never markup in the page.
    assert "data:image/svg+xml" in factors


async def test_the_client_exports_and_declares_the_second_factor_calls(
    client: httpx.AsyncClient,
) -> None:
    module = (await client.get("/auth/client.js")).text
    declarations = (await client.get("/auth/client.d.ts")).text
    for member in (
        "status",
        "enrolTotp",
        "confirmTotp",
        "removeTotp",
        "regenerateRecoveryCodes",
        "verify",
        "list",
        "register",
        "signIn",
        "rename",
        "remove",
    ):
        assert re.search(rf"\b{member}\b", module), member
        assert f"{member}(" in declarations, member
    assert re.search(r"^\s+mfa,$", module, re.MULTILINE)
    assert re.search(r"^\s+passkeys,$", module, re.MULTILINE)
    assert "readonly mfa: MfaApi;" in declarations
    assert "readonly passkeys: PasskeysApi;" in declarations
    assert "Promise<User | MfaRequired | null>" in declarations
    # A 401 mfa_required is never answered with a refresh (refreshing keeps the level).
    assert 'const MFA_REQUIRED = "mfa_required";' in module
    assert "navigator.credentials[kind]({ publicKey })" in module
