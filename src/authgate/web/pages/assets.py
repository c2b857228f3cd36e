"""The pages' static files (one stylesheet, an icon, the page scripts), served from the package
at `/_authgate/static/<name>`: outside the prefix, and outside any path a team's own routes
are likely to use.

The files are read once, when the router is built. A file of the same name in
`{AUTHGATE_TEMPLATES_DIR}/pages/static/` replaces authgate's (a team restyles the pages by
shipping its own `authgate.css`). The pages link every file as `<name>?v=<its digest>`: that
exact version may be cached for a year; any other URL revalidates with the ETag.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request, Response

from authgate.errors import NotFound

__all__ = ["STATIC_PATH", "Asset", "Assets"]

STATIC_PATH = "/_authgate/static"
_MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
_IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str
    version: str

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


class Assets:
    """The static files by name, and the versioned URL of each."""

    def __init__(self, templates_dir: Path | None) -> None:
        self.files: dict[str, Asset] = {}
        shipped = files("authgate.web.pages").joinpath("static")
        for entry in shipped.iterdir():
            media_type = _MEDIA_TYPES.get(Path(entry.name).suffix)
            if media_type is None or not entry.is_file():
                continue
            body = entry.read_bytes()
            own = templates_dir / "pages" / "static" / entry.name if templates_dir else None
            if own is not None and own.is_file():
                body = own.read_bytes()
            version = hashlib.sha256(body).hexdigest()[:16]
            self.files[entry.name] = Asset(body, media_type, version)

    def url(self, name: str) -> str:
        """The versioned URL the pages link (a KeyError for a file that does not exist)."""
        return f"{STATIC_PATH}/{name}?v={self.files[name].version}"

    def router(self) -> APIRouter:
        router = APIRouter(include_in_schema=False)

        @router.api_route(STATIC_PATH + "/{name}", methods=["GET", "HEAD"])
        async def static_file(name: str, request: Request) -> Response:
            asset = self.files.get(name)
            if asset is None:
                raise NotFound()
            pinned = request.query_params.get("v") == asset.version
            headers = {
                "ETag": asset.etag,
                "Cache-Control": _IMMUTABLE if pinned else "no-cache",
                "Cross-Origin-Resource-Policy": "same-origin",
            }
            if asset.etag in _etags(request.headers.get("if-none-match", "")):
                return Response(status_code=304, headers=headers)
            return Response(asset.body, media_type=asset.media_type, headers=headers)

        return router


def _etags(header: str) -> set[str]:
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}
