"""The pages that run on the browser client (contract §6-7): `/login`, `/register`,
`/forgot-password` and `/account`.

The server renders the whole page (headings, labels, forms, the places errors appear); a page
script (an ES module that imports `createClient` from `{prefix}/client.js`) sends the forms to
the JSON API and fills in what only a signed-in browser may read. Cookie-authenticated calls
carry the session-bound `X-CSRF-Token` header (the client adds it), so these forms need no
nonce of their own.

A GET here reads nothing it could spend: `/account` never refreshes a session on the server
(that would rotate the refresh token behind the browser's back). Without the access cookie and
without the CSRF cookie (which lives as long as the refresh token) nobody is signed in, and it
redirects to `/login?next=/account`; otherwise the page loads and the client refreshes in the
browser if it must. With JavaScript off these forms cannot work: the page says so, and a form
that posts anyway gets a page saying so, its body unread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from authgate.web.pages.redirects import DEFAULT_NEXT
from authgate.web.pages.rendering import PAGE_HEADERS
from authgate.web.transport import ACCESS_COOKIE, CSRF_COOKIE, single_cookie

if TYPE_CHECKING:
    from authgate.web.pages.redirects import RedirectPolicy
    from authgate.web.pages.rendering import Pages

__all__ = ["client_pages_router"]

#: The four pages, and the title of each.
_TITLES = {
    "/login": "Sign in",
    "/register": "Create an account",
    "/forgot-password": "Reset your password",
    "/account": "Your account",
}

_LOGIN_FOR_ACCOUNT = "/login?" + urlencode({"next": "/account"})


def client_pages_router(pages: Pages, redirects: RedirectPolicy) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def next_of(request: Request) -> str:
        given = request.query_params.getlist("next")
        return redirects.target(given[0] if len(given) == 1 else None)

    def carrying(path: str, next_url: str) -> str:
        """`path`, carrying `?next=` along when it is not the default."""
        return path if next_url == DEFAULT_NEXT else f"{path}?{urlencode({'next': next_url})}"

    @router.api_route("/login", methods=["GET", "HEAD"])
    async def login(request: Request) -> HTMLResponse:
        next_url = next_of(request)
        return pages.render(
            "login.html",
            title=_TITLES["/login"],
            next=next_url,
            register_href=carrying("/register", next_url),
        )

    @router.api_route("/register", methods=["GET", "HEAD"])
    async def register(request: Request) -> HTMLResponse:
        next_url = next_of(request)
        return pages.render(
            "register.html",
            title=_TITLES["/register"],
            next=next_url,
            login_href=carrying("/login", next_url),
        )

    @router.api_route("/forgot-password", methods=["GET", "HEAD"])
    async def forgot_password() -> HTMLResponse:
        return pages.render("forgot_password.html", title=_TITLES["/forgot-password"])

    @router.api_route("/account", methods=["GET", "HEAD"])
    async def account(request: Request) -> Response:
        if not (single_cookie(request, ACCESS_COOKIE) or single_cookie(request, CSRF_COOKIE)):
            return RedirectResponse(_LOGIN_FOR_ACCOUNT, status_code=303, headers=PAGE_HEADERS)
        return pages.render("account.html", title=_TITLES["/account"])

    async def needs_javascript() -> HTMLResponse:
        # The body is never read: a password posted here goes nowhere, not even a log.
        return pages.message(
            "needs_javascript",
            title="This page needs JavaScript",
            message="Turn JavaScript on for this site, then try again.",
            status=400,
        )

    for path in _TITLES:
        router.add_api_route(path, needs_javascript, methods=["POST"])
    return router
