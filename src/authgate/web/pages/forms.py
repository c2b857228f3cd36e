"""Reading what a page's form posts: `application/x-www-form-urlencoded` in UTF-8, each field
once, none missing, none longer than it could honestly be. Anything else is a `FormProblem`
(a 4xx the page handlers render as a page), never a 500.

The body is already capped by `RequestGuard` (`AUTHGATE_MAX_BODY_BYTES`); parsing is done here
rather than by `python-multipart`, which the JSON API does not need.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qsl

from fastapi import Request

__all__ = ["FormProblem", "one_time_token", "read_form"]

_FORM_TYPE = "application/x-www-form-urlencoded"
#: More fields than any page has, with room for a browser's extras.
_MAX_FIELDS = 16
#: Opaque tokens are 43 URL-safe characters (256 bits); this accepts any honest variant.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")


class FormProblem(Exception):
    """A form body that cannot be read. `detail` is a fixed sentence, never a value."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def read_form(request: Request, limits: Mapping[str, int]) -> dict[str, str]:
    """The fields named in `limits` (name -> longest length in characters); other fields are
    ignored. 415 for another content type, 400 for a body that does not parse, a field given
    twice, missing or too long."""
    media_type, _, params = request.headers.get("content-type", "").partition(";")
    if media_type.strip().lower() != _FORM_TYPE:
        raise FormProblem(415, "The form must be sent as application/x-www-form-urlencoded.")
    charset = params.strip().lower().removeprefix("charset=").strip('"')
    if charset not in ("", "utf-8"):
        raise FormProblem(415, "The form must be sent in UTF-8.")
    body = await request.body()
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            errors="strict",
            max_num_fields=_MAX_FIELDS,
        )
    except ValueError:  # UnicodeDecodeError too
        raise FormProblem(400, "The form could not be read.") from None
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in limits:
            continue
        if name in values:
            raise FormProblem(400, "A field of the form was sent twice.")
        if len(value) > limits[name]:
            raise FormProblem(400, "A field of the form is too long.")
        values[name] = value
    if set(values) != set(limits):
        raise FormProblem(400, "A field of the form is missing.")
    return values


def one_time_token(value: str | None) -> str | None:
    """`value` when it looks like one of authgate's one-time tokens, else None (nothing that
    cannot be a token reaches the database)."""
    return value if value is not None and _TOKEN.fullmatch(value) else None
