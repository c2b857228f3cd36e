"""The copy of the mails, rendered from Jinja2 templates.

Each mail has `<name>.txt` (which also sets `subject`) and `<name>.html`, shipped in
`mail/templates/`. A team's folder (`AUTHGATE_TEMPLATES_DIR`) is searched first, file by file:
a template it lacks comes from authgate's own. HTML is autoescaped; a name a template uses but
is not given fails the render (`StrictUndefined`) rather than mailing a hole.

What each template is given (every value a string):

    every mail     product_name, public_url, email (the recipient), subject (HTML only)
    reset, verify, email_change    link (carrying the token; email_change goes to the new address)
    password_changed               changed_at
    email_change_requested         new_email (the notice goes to the current address)
    factor_added, factor_removed   factor ("an authenticator app", "a passkey"), changed_at
    recovery_code_used             changed_at, remaining (recovery codes left, as digits)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import jinja2

from authgate.config import AuthConfig, ConfigError

__all__ = ["MailName", "NoticeKind", "Purpose", "RenderedMail", "check_templates", "render"]

#: Mails that carry a one-time token in a link.
Purpose = Literal["reset", "verify", "email_change"]
#: Notices: never a token, never a link with one. A new kind is one name here and its two
#: templates.
NoticeKind = Literal[
    "password_changed",
    "email_change_requested",
    "factor_added",
    "factor_removed",
    "recovery_code_used",
]
MailName = Purpose | NoticeKind

_DEFAULT_PRODUCT_NAME: str = AuthConfig.model_fields["product_name"].default


@dataclass(frozen=True, slots=True)
class RenderedMail:
    subject: str
    text: str
    html: str


@functools.cache
def _environment(templates_dir: Path | None = None) -> jinja2.Environment:
    """One environment per templates folder (its compiled templates are cached in it)."""
    loader: jinja2.BaseLoader = jinja2.PackageLoader("authgate.mail", "templates")
    if templates_dir is not None:
        loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(templates_dir), loader])
    return jinja2.Environment(
        loader=loader,
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        # The text part keeps its last newline; `{% set %}` lines leave none behind.
        keep_trailing_newline=True,
        trim_blocks=True,
    )


def render(name: MailName, *, templates_dir: Path | None = None, **context: str) -> RenderedMail:
    """The subject, text and HTML of mail `name`; `product_name` defaults to authgate's."""
    context.setdefault("product_name", _DEFAULT_PRODUCT_NAME)
    env = _environment(templates_dir)
    text = env.get_template(f"{name}.txt").make_module(context)
    subject = str(getattr(text, "subject"))  # noqa: B009 - set by the template, unknown to mypy
    html = env.get_template(f"{name}.html").render(context, subject=subject)
    # A header cannot hold a line break: a template's subject is kept on one line.
    return RenderedMail(subject=" ".join(subject.split()), text=str(text), html=html)


def check_templates(templates_dir: Path | None) -> None:
    """Compile every template once, at start: a missing folder or a template that does not
    parse is a `ConfigError` then, not a mail that fails later in the background."""
    if templates_dir is not None and not templates_dir.is_dir():
        raise ConfigError(f"AUTHGATE_TEMPLATES_DIR {templates_dir} is not a directory")
    env = _environment(templates_dir)
    for name in (*get_args(Purpose), *get_args(NoticeKind)):
        for suffix in ("txt", "html"):
            try:
                env.get_template(f"{name}.{suffix}")
            except jinja2.TemplateSyntaxError as exc:
                where = f"{exc.filename or name + '.' + suffix}, line {exc.lineno}"
                raise ConfigError(f"mail template {where}: {exc.message}") from None
