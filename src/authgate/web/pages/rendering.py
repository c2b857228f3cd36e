"""Rendering a page: one Jinja2 environment (a team's templates first), and the headers every
page carries.

Templates live in `pages/templates/`; a file of the same name in
`{AUTHGATE_TEMPLATES_DIR}/pages/` wins (the folder's top level holds the mail templates, and
both sets have a `_layout.html`). Autoescaped, `StrictUndefined`: a template that names a value
it is not given fails loudly instead of rendering a hole.

What every template gets: `product_name`, `prefix` (of the JSON API), `asset(name)` (the
versioned URL of a static file), `title`; each page adds its own (see the templates).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse

from authgate.config import AuthConfig, ConfigError
from authgate.web.pages.assets import Assets

__all__ = ["PAGE_HEADERS", "TEMPLATES", "Pages", "check_page_templates"]

#: No inline script or style anywhere (not even `style=` attributes), nothing from another
#: origin, no framing, no `<base>` or plugin, forms post only here.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    # A token in the URL must not leak to whatever the page links or loads.
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Every page may carry a token (the mailed links) or personal data (the account).
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
}
#: Every page template, compiled at start (`check_page_templates`).
TEMPLATES = (
    "_layout.html",
    "login.html",
    "register.html",
    "forgot_password.html",
    "account.html",
    "reset_password.html",
    "verify_email.html",
    "confirm_email_change.html",
    "message.html",
)


@functools.cache
def _environment(templates_dir: Path | None) -> jinja2.Environment:
    """One environment per templates folder (its compiled templates are cached in it)."""
    loader: jinja2.BaseLoader = jinja2.PackageLoader("authgate.web.pages", "templates")
    if templates_dir is not None:
        loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(templates_dir / "pages"), loader])
    return jinja2.Environment(
        loader=loader,
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def check_page_templates(templates_dir: Path | None) -> None:
    """Compile every page template once: a team's template that does not parse is a
    `ConfigError` at start, not a 500 on the first visit."""
    env = _environment(templates_dir)
    for name in TEMPLATES:
        try:
            env.get_template(name)
        except jinja2.TemplateSyntaxError as exc:
            where = f"{exc.filename or name}, line {exc.lineno}"
            raise ConfigError(f"page template {where}: {exc.message}") from None


class Pages:
    """Renders the page templates into responses with the security headers."""

    def __init__(self, config: AuthConfig, assets: Assets) -> None:
        check_page_templates(config.templates_dir)
        self._env = _environment(config.templates_dir)
        self._common: dict[str, Any] = {
            "product_name": config.product_name,
            "prefix": config.prefix,
            "asset": assets.url,
        }

    def render(
        self,
        name: str,
        *,
        title: str,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        html = self._env.get_template(name).render(self._common, title=title, **context)
        return HTMLResponse(html, status_code=status, headers={**PAGE_HEADERS, **(headers or {})})

    def message(
        self,
        outcome: str,
        *,
        title: str,
        message: str,
        status: int,
        link: tuple[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        """A page that says one thing (an outcome, an error) and offers at most one way on.
        `outcome` is a stable word a team's `message.html` may branch on."""
        href, label = link or (None, None)
        return self.render(
            "message.html",
            title=title,
            status=status,
            headers=headers,
            outcome=outcome,
            message=message,
            link_href=href,
            link_label=label,
        )
