"""A real browser against a real `authgate serve`: Playwright (the PyPI package only, never
`playwright install`) driving Debian's Chromium at /usr/bin/chromium, headless, one fresh
profile per browser.

Without the `playwright` package or without Chromium, every test in this folder skips with a
message saying how to get them (`apt-get install -y chromium`, `pip install -e '.[test]'`); with
`CI=true` they fail instead, like the postgres+redis half of the suite.

Mark a test module `pytestmark = [pytest.mark.browser, pytest.mark.subprocess]`
(`-m "not browser"` then leaves it out). Fixtures and helpers::

    async def test_login_page(
        serve_authgate: ServeFactory, browser_context: BrowserContext, tmp_path: Path
    ) -> None:
        server = await serve_authgate({"AUTHGATE_ACCESS_TTL": "2"})  # -> LiveServer
        watch = await watch_context(browser_context, server.url)  # before any navigation
        page = await first_page(browser_context)
        await page.goto(f"{server.url}/login")
        await screenshot(page, tmp_path / "login.png")  # or docs/…; parent folders are made
        watch.assert_clean()  # no request left the origin, no CSP violation, no page error
        assert server.access_count("POST", "/auth/login") == 1  # what reached the server

- `serve_authgate(env=None, *, data_dir=None, workers=1, localhost=False) -> LiveServer`
  (async factory): a real `authgate serve` subprocess on 127.0.0.1 and a free port, yielded
  once `/health` answers; every server is stopped when the test ends. `localhost=True` names
  it `http://localhost:<port>` (its public URL too, so the WebAuthn RP id is "localhost"):
  passkeys need a secure context and a domain as RP id, which 127.0.0.1 is not; the
  browser's host-resolver rule below maps localhost to 127.0.0.1. Defaults, all overridable
  by `env`: SQLite in `data_dir` (default `tmp_path / "data"`, or pass `Backend.env` from the
  `backend` / `pg_backend` fixtures for PostgreSQL + Redis), `AUTHGATE_COOKIE_SECURE=false` (plain
  HTTP on loopback), `AUTHGATE_PUBLIC_URL` = the server's own URL (mailed links open on it),
  `AUTHGATE_RATE_LIMITS=off`, `AUTHGATE_LOG_FORMAT=json`. For mail, pass
  `{"AUTHGATE_SMTP_URL": smtp_sink.url}` (the `smtp_sink` fixture of tests/conftest.py).
  `LiveServer`: `url` (`http://127.0.0.1:<port>`), `loopback_url` (the same on 127.0.0.1),
  `data_dir`, `stdout`/`stderr` (text so far), `access_log()` (`[(method, path, status)]`,
  query values redacted), `access_count(method, path)`.
- `browser_context` -> `BrowserContext`: one Chromium (a persistent context on a fresh
  user-data-dir under `tmp_path`). Its pages share cookies, storage, Web Locks and
  BroadcastChannel, so several tabs of one person are `await browser_context.new_page()`.
- `launch_browser(**options) -> BrowserContext` (async factory): another, isolated browser
  (a second person), with any option of Playwright's `launch_persistent_context`, such as
  `java_script_enabled=False` or `viewport={"width": 360, "height": 740}`; closed at the end.
- `first_page(context) -> Page`: the tab a persistent context opens with (or a new one).
- `watch_context(context, origin) -> Watch` (once per context, before its pages navigate):
  records every request of every page of the context (`watch.requests`:
  `Seen(method, url, headers, resource_type)`, `.path`) and every answer (`watch.responses`:
  `(method, url, status)`), and collects CSP violations (a `securitypolicyviolation` listener
  injected into every document, plus Chromium's console reports), console errors and
  uncaught page errors. Then `watch.foreign_requests()`, `watch.requests_to(method, path)`,
  `watch.assert_clean()`.
- `screenshot(page, path, *, full_page=True) -> Path`: a PNG where the caller says.

Chromium resolves no host name but localhost (`--host-resolver-rules`): a page that tries
another origin fails on the spot, and `watch` still shows the attempt.

For the pages with second factors (tests/browser/test_mfa_pages.py, test_passkeys_browser.py):
`page_ready(page)` waits for a page script's handlers, `access_claims(context, server)` reads
the payload of the browser's access-token cookie, and `add_virtual_authenticator(context,
page)` gives the browser a platform authenticator through the DevTools protocol (CTAP2,
resident keys, user verification, touched automatically), as a phone or laptop would have.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.helpers import IN_CI, clean_env, free_port

if TYPE_CHECKING:
    from playwright.async_api import (
        BrowserContext,
        CDPSession,
        ConsoleMessage,
        Page,
        Playwright,
        Request,
        Response,
    )

try:
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover - depends on the machine
    async_playwright = None  # type: ignore[assignment]

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "BrowserFactory",
    "LiveServer",
    "Seen",
    "ServeFactory",
    "VirtualAuthenticator",
    "Watch",
    "access_claims",
    "add_virtual_authenticator",
    "browser_problem",
    "first_page",
    "page_ready",
    "require_browser",
    "screenshot",
    "watch_context",
]

CHROMIUM = Path(os.environ.get("AUTHGATE_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    # Only loopback: no host name resolves, so nothing can reach another origin; `localhost`
    # (a secure context and a valid WebAuthn RP id, unlike 127.0.0.1) is 127.0.0.1.
    "--host-resolver-rules=MAP localhost 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
HOW_TO_GET = "apt-get install -y chromium` and `pip install -e '.[test]'"
STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
#: Playwright's default timeout for every action and wait, milliseconds.
ACTION_TIMEOUT_MS = 20_000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives a real Chromium (tests/browser/)")


# --- availability ------------------------------------------------------------------------


def browser_problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    problems = []
    if async_playwright is None:
        problems.append("the Python package `playwright` is not installed")
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        problems.append(f"Chromium is not at {CHROMIUM}")
    return "; ".join(problems) or None


def require_browser() -> None:
    problem = browser_problem()
    if problem is None:
        return
    if IN_CI:
        pytest.fail(f"the browser tests are required in CI: {problem}", pytrace=False)
    pytest.skip(f"browser tests skipped ({problem}): run `{HOW_TO_GET}`")


@pytest.fixture(autouse=True)
def _browser_available() -> None:
    """Every test in this folder needs the browser: skip (or fail in CI) before any setup."""
    require_browser()


# --- a real server -----------------------------------------------------------------------


@dataclass
class LiveServer:
    """One `authgate serve` process on loopback."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    @property
    def loopback_url(self) -> str:
        """`url` on 127.0.0.1 (the server listens there even when `url` says localhost)."""
        return self.url.replace("://localhost:", "://127.0.0.1:", 1)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def access_log(self) -> list[tuple[str, str, int]]:
        """Every request the server answered so far: (method, path, status), query values
        redacted (`/reset-password?token=***`)."""
        out = []
        for line in (self.stdout + "\n" + self.stderr).splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("logger") == "uvicorn.access":
                    out.append((str(record["method"]), str(record["path"]), int(record["status"])))
        return out

    def access_count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.access_log() if m == method and p == path)


ServeFactory = Callable[..., Awaitable[LiveServer]]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (workers too), SIGKILL if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        process.wait(timeout=10)


async def _wait_healthy(server: LiveServer) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    health = server.loopback_url + "/health"
    async with httpx.AsyncClient(timeout=1.0) as http:
        for _ in range(int(STARTUP_TIMEOUT / 0.1)):
            if server.process.poll() is not None:
                code = server.process.returncode
                pytest.fail(f"authgate serve exited with {code}:\n{server.stderr}")
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(health)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    pytest.fail(f"authgate serve did not become healthy in {STARTUP_TIMEOUT} s:\n{server.stderr}")


@pytest.fixture
async def serve_authgate(tmp_path: Path) -> AsyncIterator[ServeFactory]:
    """`server = await serve_authgate(env, data_dir=..., workers=1)`: see the module's doc."""
    servers: list[LiveServer] = []

    async def start(
        env: Mapping[str, str] | None = None,
        *,
        data_dir: Path | None = None,
        workers: int = 1,
        localhost: bool = False,
    ) -> LiveServer:
        port = free_port()
        url = f"http://{'localhost' if localhost else '127.0.0.1'}:{port}"
        data = data_dir or tmp_path / "data"
        logs = tmp_path / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        settings: dict[str, str] = {
            "AUTHGATE_DATA_DIR": str(data),
            "AUTHGATE_COOKIE_SECURE": "false",
            "AUTHGATE_PUBLIC_URL": url,
            "AUTHGATE_RATE_LIMITS": "off",
            "AUTHGATE_LOG_FORMAT": "json",
            **(env or {}),
        }
        out_path, err_path = logs / f"serve-{port}.out", logs / f"serve-{port}.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(  # noqa: ASYNC220 - returns at once, never waits
                [
                    sys.executable,
                    "-m",
                    "authgate",
                    "serve",
                    "--port",
                    str(port),
                    "--workers",
                    str(workers),
                ],
                env=clean_env(settings),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        server = LiveServer(url, data, process, out_path, err_path)
        servers.append(server)
        await _wait_healthy(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            await asyncio.to_thread(_stop, server.process)


# --- the browser ---------------------------------------------------------------------------


BrowserFactory = Callable[..., Awaitable["BrowserContext"]]


@pytest.fixture
async def playwright() -> AsyncIterator[Playwright]:
    assert async_playwright is not None  # _browser_available skipped otherwise
    async with async_playwright() as driver:
        yield driver


@pytest.fixture
async def launch_browser(playwright: Playwright, tmp_path: Path) -> AsyncIterator[BrowserFactory]:
    """`context = await launch_browser(**launch_persistent_context options)`: a Chromium of its
    own (fresh profile), closed when the test ends."""
    contexts: list[BrowserContext] = []

    async def launch(**options: Any) -> BrowserContext:
        profile = tmp_path / f"chromium-profile-{len(contexts)}"
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=list(CHROMIUM_ARGS),
            **options,
        )
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        contexts.append(context)
        return context

    try:
        yield launch
    finally:
        for context in contexts:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(context.close(), STOP_TIMEOUT)
        # A context is one browser process; profiles can be large, drop them now.
        for index in range(len(contexts)):
            shutil.rmtree(tmp_path / f"chromium-profile-{index}", ignore_errors=True)


@pytest.fixture
async def browser_context(launch_browser: BrowserFactory) -> BrowserContext:
    """One browser (one person): its tabs share cookies, storage, locks and broadcasts."""
    return await launch_browser()


async def first_page(context: BrowserContext) -> Page:
    """The tab a persistent context opens with, or a new one."""
    return context.pages[0] if context.pages else await context.new_page()


async def screenshot(page: Page, path: Path, *, full_page: bool = True) -> Path:
    """Write a PNG of `page` at `path` (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(path), full_page=full_page, type="png")
    return path


# --- watching what pages do ----------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    method: str
    url: str
    headers: dict[str, str]
    resource_type: str

    @property
    def path(self) -> str:
        return urlsplit(self.url).path


#: Schemes that load nothing from the network.
_LOCAL_SCHEMES = frozenset({"about", "blob", "data"})
_CSP_BINDING = "__authgateTestCspViolation"
_CSP_LISTENER = f"""
document.addEventListener("securitypolicyviolation", (event) => {{
  window.{_CSP_BINDING}(JSON.stringify({{
    directive: event.effectiveDirective, blocked: event.blockedURI,
    source: event.sourceFile, line: event.lineNumber, sample: event.sample,
  }}));
}}, true);
"""


@dataclass
class Watch:
    """What the pages of one context did: see `watch_context`."""

    origin: str
    requests: list[Seen] = field(default_factory=list)
    responses: list[tuple[str, str, int]] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def foreign_requests(self) -> list[str]:
        """Every URL requested that is not on the origin."""
        origin = urlsplit(self.origin)
        return [
            r.url
            for r in self.requests
            if urlsplit(r.url).scheme not in _LOCAL_SCHEMES
            and (urlsplit(r.url).scheme, urlsplit(r.url).netloc) != (origin.scheme, origin.netloc)
        ]

    def requests_to(self, method: str, path: str) -> list[Seen]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def assert_clean(self) -> None:
        """No request left the origin, no CSP violation, no uncaught error in a page."""
        assert self.foreign_requests() == [], self.foreign_requests()
        assert self.csp_violations == [], self.csp_violations
        assert self.page_errors == [], self.page_errors

    # handlers

    def _request(self, request: Request) -> None:
        self.requests.append(
            Seen(request.method, request.url, dict(request.headers), request.resource_type)
        )

    def _response(self, response: Response) -> None:
        self.responses.append((response.request.method, response.url, response.status))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        self.console_errors.append(message.text)
        if "Content Security Policy" in message.text:
            self.csp_violations.append(message.text)

    def _attach(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))


async def watch_context(context: BrowserContext, origin: str) -> Watch:
    """Start watching `context` (call it before the pages navigate): every request of every
    tab, CSP violations, console errors and uncaught errors."""
    watch = Watch(origin.rstrip("/"))
    context.on("request", watch._request)
    context.on("response", watch._response)
    context.on("page", watch._attach)
    for page in context.pages:
        watch._attach(page)
    await context.expose_binding(
        _CSP_BINDING, lambda _source, report: watch.csp_violations.append(str(report))
    )
    await context.add_init_script(_CSP_LISTENER)
    return watch


# --- pages with second factors ------------------------------------------------------------------


async def page_ready(page: Page) -> None:
    """Wait until the page script has attached its handlers (`<html data-ready=true>`)."""
    await page.locator("html[data-ready=true]").wait_for(state="attached")


async def access_claims(context: BrowserContext, server: LiveServer) -> dict[str, Any]:
    """The payload of the access token the browser holds for `server` (read, not verified:
    the server verifies it on every request; the test only looks at `aal` and `amr`)."""
    cookies = await context.cookies(server.url)
    (token,) = [c["value"] for c in cookies if c["name"] == "svc_access_token"]
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


@dataclass(frozen=True)
class VirtualAuthenticator:
    """A DevTools virtual authenticator and the CDP session that made it (kept open: closing
    the session that enabled the WebAuthn domain takes the authenticator away)."""

    cdp: CDPSession
    id: str

    async def credentials(self) -> list[dict[str, Any]]:
        """What it holds (`WebAuthn.getCredentials`): credentialId, isResidentCredential,
        rpId, signCount, …"""
        found = await self.cdp.send("WebAuthn.getCredentials", {"authenticatorId": self.id})
        listed: list[dict[str, Any]] = found["credentials"]
        return listed


async def add_virtual_authenticator(context: BrowserContext, page: Page) -> VirtualAuthenticator:
    """A platform authenticator for `page` (the DevTools WebAuthn domain): CTAP2, internal
    transport, discoverable credentials, user verification that succeeds, presence simulated,
    no browser UI. It stays with the tab across navigations."""
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable", {"enableUI": False})
    added = await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return VirtualAuthenticator(cdp, str(added["authenticatorId"]))
