"""The HTML pages (contract §6), outside the prefix: sign-in, sign-up, the account page, and
the pages the mailed links open. Server-rendered with Jinja2; off with `AUTHGATE_PAGES=off`.

    links.py         /reset-password, /verify-email, /confirm-email-change (no JavaScript needed)
    client_pages.py  /login, /register, /forgot-password, /account (on the browser client)
    rendering.py     the templates (a team's first) and the headers every page carries
    assets.py        /_authgate/static/: the stylesheet, the icon, the page scripts
    csrf.py          the signed double submit of the link pages' forms
    forms.py         reading a form body; redirects.py: where `?next=` may go
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

from authgate.web.pages.assets import STATIC_PATH, Assets
from authgate.web.pages.client_pages import client_pages_router
from authgate.web.pages.csrf import FormGuard
from authgate.web.pages.links import LinkPages
from authgate.web.pages.redirects import RedirectPolicy
from authgate.web.pages.rendering import TEMPLATES, Pages, check_page_templates

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["STATIC_PATH", "TEMPLATES", "check_page_templates", "pages_router"]


def pages_router(gate: AuthGate) -> APIRouter:
    config = gate.config
    assets = Assets(config.templates_dir)
    pages = Pages(config, assets)
    redirects = RedirectPolicy.from_setting(config.public_url, config.allowed_redirect_origins)
    router = APIRouter(include_in_schema=False)
    router.include_router(assets.router())
    router.include_router(LinkPages(gate, pages, FormGuard(config)).router())
    router.include_router(client_pages_router(pages, redirects))
    return router
