"""The HTML pages (contract §6) through HTTP, on both backends: the headers every page carries,
the email-link pages that GET and HEAD never spend (the token still works through the JSON API
afterwards), each outcome of their forms as a page with its status, the forms' CSRF check,
bad form bodies, `?next=` against hostile values, `AUTHGATE_PAGES=off`, and a team's
templates and stylesheet."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from authgate import create_app
from authgate.config import ConfigError
from authgate.errors import Busy, RateLimited
from tests.helpers import (
    ANN,
    NEW_PASSWORD,
    PASSWORD,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    bearer,
    gate_and_app,
    login,
    make_config,
    register,
    running,
)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
PAGES = ("/login", "/register", "/forgot-password", "/account")
LINKS = {
    "reset": "/reset-password",
    "verify": "/verify-email",
    "email_change": "/confirm-email-change",
}
NEW_EMAIL = "ann@new.example"
FORM_COOKIE = "__Host-authgate_form"


# --- reading a page ---------------------------------------------------------------------------


@dataclass
class Page(HTMLParser):
    """The tags of an HTML page, with their attributes, and its inline script/style text."""

    tags: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    inline: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] in ("script", "style") and data.strip():
            self.inline.append(data)

    def all(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [
            a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())
        ]

    def one(self, tag: str, **attrs: str) -> dict[str, str]:
        found = self.all(tag, **attrs)
        assert len(found) == 1, (tag, attrs, found)
        return found[0]

    def hidden(self) -> dict[str, str]:
        return {a["name"]: a["value"] for a in self.all("input", type="hidden")}


def page_of(response: httpx.Response, status: int) -> Page:
    """The page, after checking its status and every header and rule a page must keep."""
    assert response.status_code == status, response.text
    headers = response.headers
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"] == CSP
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["cache-control"] == "no-store"
    page = Page()
    if response.request.method == "HEAD":
        assert response.content == b""
        return page
    page.feed(response.text)
    assert page.one("html")["lang"] == "en"
    assert page.inline == [], "no inline script or style"
    assert not any("style" in attrs for _, attrs in page.tags), "no style attribute"
    assert not re.search(r"\son[a-z]+=", response.text), "no inline event handler"
    for tag, attrs in page.tags:
        for name in ("src", "href", "action"):
            value = attrs.get(name, "")
            assert not value.startswith(("http:", "https:", "//")), (tag, value)
        if tag == "script":
            assert attrs["type"] == "module"
            assert attrs["src"].startswith("/_authgate/static/")
    labelled = {a["for"] for a in page.all("label")}
    for attrs in page.all("input"):
        if attrs.get("type") != "hidden":
            assert attrs["id"] in labelled, f"input {attrs} has no label"
    return page


# --- mailed links -----------------------------------------------------------------------------


@dataclass
class Mail:
    reset: Outbox = field(default_factory=Outbox)
    verify: Outbox = field(default_factory=Outbox)
    email_change: Outbox = field(default_factory=Outbox)

    def settings(self) -> dict[str, Any]:
        return {
            "password_reset_send_fn": self.reset,
            "email_verify_send_fn": self.verify,
            "email_change_send_fn": self.email_change,
        }


@contextlib.asynccontextmanager
async def mailing(
    make_client: AppFactory, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Mail]]:
    mail = Mail()
    async with make_client(**mail.settings(), **overrides) as client:
        yield client, mail


async def new_token(client: httpx.AsyncClient, mail: Mail, purpose: str) -> str:
    """A fresh token of `purpose` for ANN (registered on first use); the client's cookies are
    left empty."""
    answer = await client.post("/auth/login", json={"email": ANN, "password": PASSWORD})
    if answer.status_code == 401:
        await register(client)
    access = (await login(client))["access_token"]
    client.cookies.clear()
    outbox: Outbox = getattr(mail, purpose)
    before = len(outbox.sent)
    if purpose == "reset":
        response = await client.post("/auth/password-reset", json={"email": ANN})
    elif purpose == "verify":
        response = await client.post("/auth/email-verification", headers=bearer(access))
    else:
        body = {"new_email": NEW_EMAIL, "password": PASSWORD}
        response = await client.post("/auth/email-change", json=body, headers=bearer(access))
    assert response.is_success, response.text
    return (await outbox.wait_for(before + 1))[-1][1]


async def open_link(client: httpx.AsyncClient, purpose: str, token: str) -> dict[str, str]:
    """GET the link's page: the form's fields, ready to post."""
    page = page_of(await client.get(LINKS[purpose], params={"token": token}), 200)
    form = page.one("form")
    assert form["method"] == "post"
    assert form["action"] == LINKS[purpose]
    fields = page.hidden()
    assert fields["token"] == token
    assert set(fields) == {"token", "csrf"}
    if purpose == "reset":
        fields |= {"new_password": NEW_PASSWORD, "confirm_password": NEW_PASSWORD}
    return fields


async def confirm_by_api(client: httpx.AsyncClient, purpose: str, token: str) -> httpx.Response:
    path, body = {
        "reset": ("/auth/password-reset/confirm", {"token": token, "new_password": NEW_PASSWORD}),
        "verify": ("/auth/email-verification/confirm", {"token": token}),
        "email_change": ("/auth/email-change/confirm", {"token": token}),
    }[purpose]
    return await client.post(path, json=body)


def outcome(page: Page) -> str:
    """The outcome word of a message page (`done`, `used`, `csrf_failed` …)."""
    (word,) = [attrs["data-outcome"] for _, attrs in page.tags if "data-outcome" in attrs]
    return word


# --- every page -------------------------------------------------------------------------------


async def test_every_page_renders_with_the_security_headers(make_client: AppFactory) -> None:
    async with mailing(make_client) as (client, mail):
        for path in PAGES[:3]:
            page_of(await client.head(path), 200)
            page = page_of(await client.get(path), 200)
            assert page.one("meta", name="authgate-prefix")["content"] == "/auth"
            assert page.one("link", rel="stylesheet")["href"].startswith(
                "/_authgate/static/authgate.css?v="
            )
            assert page.all("p", role="alert"), "a place for errors that screen readers announce"
        page_of(await client.get("/account", headers={"Cookie": "svc_csrf_token=x"}), 200)
        for purpose in LINKS:
            await open_link(client, purpose, await new_token(client, mail, purpose))


async def test_account_without_a_session_redirects_to_sign_in(client: httpx.AsyncClient) -> None:
    response = await client.get("/account")
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Faccount"
    assert response.headers["cache-control"] == "no-store"
    await register(client)
    await login(client)  # the cookies: the page loads, and its script reads the account
    page = page_of(await client.get("/account"), 200)
    for section in ("profile", "sessions", "password", "email", "second-factors", "delete"):
        assert page.one("section", id=section)["aria-labelledby"] == f"{section}-heading"
    assert page.one("button", id="sign-out-others")


async def test_scripted_forms_posted_without_javascript_get_a_page(
    client: httpx.AsyncClient,
) -> None:
    for path in PAGES:
        response = await client.post(path, data={"email": ANN, "password": PASSWORD})
        assert outcome(page_of(response, 400)) == "needs_javascript"
        assert PASSWORD not in response.text


async def test_static_files_are_versioned_and_revalidated(client: httpx.AsyncClient) -> None:
    page = page_of(await client.get("/login"), 200)
    href = page.one("link", rel="stylesheet")["href"]
    pinned = await client.get(href)
    assert pinned.status_code == 200
    assert pinned.headers["content-type"] == "text/css; charset=utf-8"
    assert pinned.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert pinned.headers["x-content-type-options"] == "nosniff"
    bare = await client.get("/_authgate/static/authgate.css")
    assert bare.headers["cache-control"] == "no-cache"
    etag = bare.headers["etag"]
    again = await client.get("/_authgate/static/authgate.css", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    script = await client.get(page.one("script")["src"])
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "import" in script.text
    for name in ("nope.css", "..%2Fcsrf.py", "__init__.py", "../links.py"):
        missing = await client.get(f"/_authgate/static/{name}")
        assert missing.status_code == 404
        assert missing.json()["code"] == "not_found"


# --- the email-link pages: GET and HEAD never spend -------------------------------------------


@pytest.mark.parametrize("purpose", list(LINKS))
async def test_get_and_head_of_a_link_spend_nothing(make_client: AppFactory, purpose: str) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, purpose)
        for _ in range(3):  # a scanner's HEAD, its GET, then the person's GET
            head = await client.head(LINKS[purpose], params={"token": token})
            assert head.status_code == 200
            assert head.headers["cache-control"] == "no-store"
            await open_link(client, purpose, token)
        response = await confirm_by_api(client, purpose, token)
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("purpose", list(LINKS))
async def test_the_forms_button_spends_the_link(make_client: AppFactory, purpose: str) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, purpose)
        fields = await open_link(client, purpose, token)
        done = page_of(await client.post(LINKS[purpose], data=fields), 200)
        assert outcome(done) == "done"
        # What the link did:
        if purpose == "reset":
            await login(client, password=NEW_PASSWORD)
            assert (
                await client.post("/auth/login", json={"email": ANN, "password": PASSWORD})
            ).status_code == 401
        else:
            access = await login(client, NEW_EMAIL if purpose == "email_change" else ANN)
            me = (await client.get("/auth/me", headers=bearer(access["access_token"]))).json()
            assert me["email_verified"] is True
        # Once spent: the same form again, the link again, and the API say so.
        client.cookies.delete("svc_access_token")
        assert outcome(page_of(await client.post(LINKS[purpose], data=fields), 400)) == "used"
        again = await client.get(LINKS[purpose], params={"token": token})
        assert outcome(page_of(again, 400)) == "used"
        assert page_of(again, 400).all("form") == []
        assert (await confirm_by_api(client, purpose, token)).status_code == 400


@pytest.mark.parametrize("purpose", list(LINKS))
async def test_an_expired_link_says_so(
    make_client: AppFactory, clock: FakeClock, purpose: str
) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, purpose)
        fields = await open_link(client, purpose, token)
        clock.advance(86_400 + 1)
        shown = await client.get(LINKS[purpose], params={"token": token})
        assert outcome(page_of(shown, 400)) == "expired"
        assert outcome(page_of(await client.post(LINKS[purpose], data=fields), 400)) == "expired"
        if purpose == "reset":  # a weak password is no reason to show a dead link's form
            weak = {**fields, "new_password": "short", "confirm_password": "short"}
            assert outcome(page_of(await client.post(LINKS[purpose], data=weak), 400)) == "expired"


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?token=",
        "?token=short",
        "?token=" + "a" * 43,  # the right shape, but no such token
        "?token=" + "a" * 43 + "&token=" + "b" * 43,
        "?token=%00%0a<script>",
        "?token=" + "a" * 5000,
    ],
)
async def test_a_missing_or_unknown_token_is_a_400_page(
    client: httpx.AsyncClient, query: str
) -> None:
    for path in LINKS.values():
        for method in ("GET", "HEAD"):
            response = await client.request(method, path + query)
            assert response.status_code == 400
        page = page_of(await client.get(path + query), 400)
        assert outcome(page) == "invalid"
        assert "<script>" not in (await client.get(path + query)).text


async def test_a_weak_or_mismatched_password_shows_the_form_again(
    make_client: AppFactory,
) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, "reset")
        fields = await open_link(client, "reset", token)
        for new, again, says in (
            ("short", "short", "at least 8 characters"),
            ("password", "password", "commonly used"),
            ("x" * 73, "x" * 73, "at most 72 bytes"),
            (NEW_PASSWORD, NEW_PASSWORD + "!", "do not match"),
        ):
            weak = {**fields, "new_password": new, "confirm_password": again}
            response = await client.post(LINKS["reset"], data=weak)
            page = page_of(response, 422)
            assert says in page_text(response), response.text
            assert page.hidden()["token"] == token
            assert page.one("input", id="new_password")["aria-invalid"] == "true"
            assert new not in response.text or new == "password"
        assert (await confirm_by_api(client, "reset", token)).status_code == 200


def page_text(response: httpx.Response) -> str:
    alert = re.search(r'role="alert">([^<]*)<', response.text)
    return alert.group(1) if alert else ""


async def test_an_address_taken_meanwhile_is_a_409_page(make_client: AppFactory) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, "email_change")
        fields = await open_link(client, "email_change", token)
        await register(client, NEW_EMAIL)
        client.cookies.clear()
        fields = await open_link(client, "email_change", token)
        page = page_of(await client.post(LINKS["email_change"], data=fields), 409)
        assert outcome(page) == "email_taken"
        access = (await login(client))["access_token"]
        me = (await client.get("/auth/me", headers=bearer(access))).json()
        assert me["email"] == ANN


@pytest.mark.parametrize(
    ("error", "status", "word"),
    [(RateLimited(42), 429, "rate_limited"), (Busy(retry_after=3), 503, "unavailable")],
)
async def test_limits_and_overload_are_pages_with_retry_after(
    backend: Backend,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    status: int,
    word: str,
) -> None:
    mail = Mail()
    gate, app = gate_and_app(backend, clock, **mail.settings())
    async with running(app) as client:
        token = await new_token(client, mail, "reset")
        fields = await open_link(client, "reset", token)

        async def refuse(*_args: object) -> None:
            raise error

        monkeypatch.setattr(gate.accounts, "confirm_password_reset", refuse)
        response = await client.post(LINKS["reset"], data=fields)
        assert outcome(page_of(response, status)) == word
        assert response.headers["retry-after"] == str(error.retry_after)  # type: ignore[attr-defined]


# --- CSRF on the link forms -------------------------------------------------------------------


@pytest.mark.parametrize("purpose", list(LINKS))
async def test_a_form_without_its_csrf_pair_spends_nothing(
    make_client: AppFactory, purpose: str
) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, purpose)
        other = await new_token(client, mail, "verify" if purpose != "verify" else "reset")
        fields = await open_link(client, purpose, token)
        other_fields = await open_link(client, "verify" if purpose != "verify" else "reset", other)
        nonce = client.cookies[FORM_COOKIE]
        client.cookies.clear()
        with_nonce = {"Cookie": f"{FORM_COOKIE}={nonce}"}
        forged: list[tuple[dict[str, str], dict[str, str]]] = [
            (fields, {}),  # no cookie
            (fields, {"Cookie": f"{FORM_COOKIE}={'A' * 32}"}),  # another nonce
            (fields, {"Cookie": f"{FORM_COOKIE}={nonce}; {FORM_COOKIE}={nonce}"}),  # two
            ({**fields, "csrf": ""}, with_nonce),
            ({**fields, "csrf": "0" * 64}, with_nonce),
            ({**fields, "csrf": flip_last(fields["csrf"])}, with_nonce),
            ({**fields, "csrf": other_fields["csrf"]}, with_nonce),  # made for another link
            (fields, {**with_nonce, "Sec-Fetch-Site": "cross-site"}),
        ]
        for data, headers in forged:
            response = await client.post(LINKS[purpose], data=data, headers=headers)
            assert outcome(page_of(response, 403)) == "csrf_failed"
        # Nothing was spent: the real pair still works.
        response = await client.post(LINKS[purpose], data=fields, headers=with_nonce)
        assert outcome(page_of(response, 200)) == "done"


def flip_last(value: str) -> str:
    return value[:-1] + ("1" if value.endswith("0") else "0")


async def test_the_form_cookie_is_strict_and_host_only(make_client: AppFactory) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, "verify")
        response = await client.get(LINKS["verify"], params={"token": token})
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{FORM_COOKIE}=")
        for part in ("HttpOnly", "Path=/", "SameSite=strict", "Secure"):
            assert part in cookie, cookie
        assert "Domain" not in cookie
        assert token not in cookie
        second = await client.get(LINKS["verify"], params={"token": token})
        assert "set-cookie" in second.headers  # the same nonce, renewed: tabs share it
        assert client.cookies[FORM_COOKIE] in second.headers["set-cookie"]


# --- bad form bodies --------------------------------------------------------------------------


async def test_bad_form_bodies_are_4xx_pages(make_client: AppFactory) -> None:
    async with mailing(make_client) as (client, mail):
        token = await new_token(client, mail, "reset")
        fields = await open_link(client, "reset", token)
        path = LINKS["reset"]
        encoded = httpx.QueryParams(fields)
        cases: list[tuple[dict[str, Any], int]] = [
            ({"json": fields}, 415),
            ({"content": str(encoded), "headers": {"Content-Type": "text/plain"}}, 415),
            (
                {
                    "content": str(encoded),
                    "headers": {
                        "Content-Type": "application/x-www-form-urlencoded; charset=latin-1"
                    },
                },
                415,
            ),
            (
                {
                    "content": b"token=\xff\xfe",
                    "headers": {"Content-Type": "application/x-www-form-urlencoded"},
                },
                400,
            ),
            (
                {
                    "content": "token=%ff%fe",
                    "headers": {"Content-Type": "application/x-www-form-urlencoded"},
                },
                400,
            ),
            ({"data": {k: v for k, v in fields.items() if k != "csrf"}}, 400),
            (
                {
                    "content": f"{encoded}&token={token}",
                    "headers": {"Content-Type": "application/x-www-form-urlencoded"},
                },
                400,
            ),
            ({"data": {**fields, "new_password": "x" * 5000}}, 400),
            (
                {
                    "content": "&".join(f"f{i}=1" for i in range(40)),
                    "headers": {"Content-Type": "application/x-www-form-urlencoded"},
                },
                400,
            ),
            ({}, 415),
        ]
        for request, status in cases:
            response = await client.post(path, **request)
            assert outcome(page_of(response, status)) == "bad_request", request
        too_big = await client.post(path, data={**fields, "new_password": "x" * 20_000})
        assert too_big.status_code == 413  # RequestGuard, before any page code runs
        assert (await confirm_by_api(client, "reset", token)).status_code == 200


# --- where ?next= may go ----------------------------------------------------------------------

ALLOWED = "https://app.example.com, http://localhost:3000"
NEXT_CASES = [
    ("/account/settings?tab=2#top", "/account/settings?tab=2#top"),
    ("/", "/"),
    ("https://app.example.com/welcome?x=1", "https://app.example.com/welcome?x=1"),
    ("HTTPS://APP.EXAMPLE.COM:443/", "https://app.example.com/"),
    ("http://localhost:3000/done", "http://localhost:3000/done"),
    ("https://auth.example.test/account", "https://auth.example.test/account"),  # public_url
    (None, "/account"),
    ("", "/account"),
    ("//evil.com", "/account"),
    ("//evil.com/account", "/account"),
    ("/\\evil.com", "/account"),
    ("\\\\evil.com", "/account"),
    ("/\t/evil.com", "/account"),
    ("/\n/evil.com", "/account"),
    (" /account", "/account"),
    ("https://evil.com", "/account"),
    ("https://app.example.com.evil.com/", "/account"),
    ("https://app.example.com@evil.com/", "/account"),
    ("https://evil.com#@app.example.com", "/account"),
    ("https://evil.com\\@app.example.com", "/account"),
    ("http://app.example.com/", "/account"),  # the wrong scheme
    ("https://app.example.com:8443/", "/account"),  # the wrong port
    ("http://localhost:3001/", "/account"),
    ("https:app.example.com", "/account"),
    ("https:/app.example.com", "/account"),
    ("javascript:alert(1)", "/account"),
    ("JavaScript://app.example.com/%0aalert(1)", "/account"),
    ("data:text/html,<script>alert(1)</script>", "/account"),
    ("evil.com", "/account"),
    ("https://\u0430pp.example.com/", "/account"),  # a Cyrillic a
    ("https://app.example.com:99999/", "/account"),
    ("/" + "a" * 3000, "/account"),
]


async def test_next_goes_only_to_this_origin_or_an_allowed_one(make_client: AppFactory) -> None:
    settings = {"allowed_redirect_origins": ALLOWED, "public_url": "https://auth.example.test"}
    async with make_client(**settings) as client:
        for given, expected in NEXT_CASES:
            params = {} if given is None else {"next": given}
            for path, link in (("/login", "/register"), ("/register", "/login")):
                page = page_of(await client.get(path, params=params), 200)
                assert page.one("form")["data-next"] == expected, (path, given)
                other = page.one("a", href=page.all("a")[-1]["href"])["href"]
                if expected == "/account":
                    assert other == link
                else:
                    assert httpx.URL(other).params["next"] == expected
        both = await client.get("/login?next=/a&next=//evil.com")
        assert page_of(both, 200).one("form")["data-next"] == "/account"


# --- turning them off, restyling them ---------------------------------------------------------


async def test_pages_off_removes_them_all(make_client: AppFactory) -> None:
    async with make_client(pages=False) as client:
        for path in (*PAGES, *LINKS.values(), "/_authgate/static/authgate.css"):
            for method in ("GET", "HEAD", "POST"):
                response = await client.request(method, path)
                assert response.status_code == 404, (method, path)
        assert (await client.get("/auth/client.js")).status_code == 200  # the API stays


async def test_a_teams_templates_stylesheet_and_name_win(
    make_client: AppFactory, tmp_path: Path
) -> None:
    own = tmp_path / "templates" / "pages"
    (own / "static").mkdir(parents=True)
    (own / "login.html").write_text(
        '{% extends "_layout.html" %}{% block content %}'
        "<h1>Welcome back to {{ product_name }}</h1>{% endblock %}"
    )
    (own / "static" / "authgate.css").write_text("body { color: rebeccapurple; }\n")
    settings = {"templates_dir": tmp_path / "templates", "product_name": "Acme & Co"}
    async with make_client(**settings) as client:
        login_page = await client.get("/login")
        page_of(login_page, 200)
        assert "<h1>Welcome back to Acme &amp; Co</h1>" in login_page.text
        assert "<title>Sign in · Acme &amp; Co</title>" in login_page.text
        register_page = await client.get("/register")  # not overridden: authgate's own
        assert "<h1>Create your Acme &amp; Co account</h1>" in register_page.text
        css = await client.get(page_of(login_page, 200).one("link", rel="stylesheet")["href"])
        assert css.text == "body { color: rebeccapurple; }\n"


def test_a_template_that_does_not_parse_stops_the_start(backend: Backend, tmp_path: Path) -> None:
    own = tmp_path / "templates" / "pages"
    own.mkdir(parents=True)
    (own / "account.html").write_text("{% block content %}")
    with pytest.raises(ConfigError, match=r"page template .*account\.html, line 1"):
        create_app(make_config(backend, templates_dir=tmp_path / "templates"))
