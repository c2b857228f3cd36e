"""The copy of the mails, rendered from the Jinja2 templates shipped in `mail/templates/`.

Each purpose has `<purpose>.txt` (which also sets `subject`) and `<purpose>.html`. HTML is
autoescaped; a name a template uses but is not given fails the render (`StrictUndefined`)
rather than mailing a hole.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import jinja2

__all__ = ["Purpose", "RenderedMail", "render"]

Purpose = Literal["reset", "verify"]


@dataclass(frozen=True, slots=True)
class RenderedMail:
    subject: str
    text: str
    html: str


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("authgate.mail", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        # The text part keeps its last newline; `{% set %}` lines leave none behind.
        keep_trailing_newline=True,
        trim_blocks=True,
    )


def render(purpose: Purpose, *, link: str) -> RenderedMail:
    env = _environment()
    text = env.get_template(f"{purpose}.txt").make_module({"link": link})
    html = env.get_template(f"{purpose}.html").render(link=link)
    subject = getattr(text, "subject")  # noqa: B009 - set by the template, unknown to mypy
    return RenderedMail(subject=str(subject), text=str(text), html=html)
